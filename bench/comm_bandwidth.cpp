// Allreduce bus bandwidth of wxtrain's Communicator against raw MPI_Allreduce on the same buffers.
//   mpirun -np 2 --allow-run-as-root --oversubscribe build/bench/comm_bandwidth [max_mib]
// busbw = 2(n-1)/n * bytes / time, the NCCL-tests convention: the bytes each rank's link carries
// in a ring all-reduce, so it is comparable across world sizes. The Communicator column adds the
// hand-off to the MPI progress thread (the price of overlapping communication with backward).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <mpi.h>

#include "distributed/communicator.h"
#include "distributed/mpi_communicator.h"
#include "distributed/world.h"

namespace {

using Clock = std::chrono::steady_clock;
using wxtrain::distributed::Communicator;

// Seconds per call: the median over repetitions of the slowest rank's mean over `iters` calls.
template <typename Fn>
double time_collective(Fn&& fn, int iters, int repeats, MPI_Comm world) {
  fn();  // warm-up (connections, page faults)
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    MPI_Barrier(world);
    const auto start = Clock::now();
    for (int i = 0; i < iters; ++i) fn();
    double seconds = std::chrono::duration<double>(Clock::now() - start).count() / iters;
    MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, world);
    samples.push_back(seconds);
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

std::string human(int64_t bytes) {
  char text[32];
  if (bytes >= (1 << 20)) std::snprintf(text, sizeof text, "%lld MiB", static_cast<long long>(bytes >> 20));
  else std::snprintf(text, sizeof text, "%lld KiB", static_cast<long long>(bytes >> 10));
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace wxtrain::distributed;
  const World world = init_world();
  const int64_t max_bytes = (argc > 1 ? std::atoll(argv[1]) : 64) << 20;
  torch::set_num_threads(1);
  if (!world.mpi) {
    std::fprintf(stderr, "comm_bandwidth measures MPI: run it under mpirun -np 2 (or more)\n");
    return 2;
  }
  return run_or_abort([&] {
    auto comm = make_communicator(world, wxtrain::DistributedConfig{}, torch::kCPU);
    // Raw MPI runs on the same (duplicated) communicator, so only the Communicator layer differs.
    MPI_Comm raw_comm = dynamic_cast<MpiCommunicator&>(*comm).comm();
    const double factor = 2.0 * (world.size - 1) / std::max(1, world.size);
    if (world.rank == 0) {
      std::printf("allreduce, float32, %d ranks (%s); busbw = 2(n-1)/n * bytes / time\n", world.size,
                  comm->backend().c_str());
      std::printf("%10s %14s %14s %14s %14s %8s\n", "size", "comm (us)", "comm GB/s", "raw MPI (us)", "raw GB/s", "ratio");
    }
    for (int64_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
      const int64_t n = bytes / 4;
      auto tensor = torch::ones({n}, torch::kFloat);
      auto raw = torch::ones({n}, torch::kFloat);  // same allocator and alignment as the Communicator's
      const int iters = static_cast<int>(std::clamp<int64_t>((int64_t{64} << 20) / bytes, 3, 2000));
      const double t_raw = time_collective(
          [&] { MPI_Allreduce(MPI_IN_PLACE, raw.data_ptr(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, raw_comm); },
          iters, 5, MPI_COMM_WORLD);
      const double t_comm = time_collective([&] { comm->allreduce(tensor); }, iters, 5, MPI_COMM_WORLD);
      if (world.rank == 0) {
        std::printf("%10s %14.1f %14.3f %14.1f %14.3f %8.2f\n", human(bytes).c_str(), t_comm * 1e6,
                    factor * bytes / t_comm / 1e9, t_raw * 1e6, factor * bytes / t_raw / 1e9, t_raw / t_comm);
      }
    }
    comm.reset();
    finalize_world();
    return 0;
  });
}
