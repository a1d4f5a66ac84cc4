// Two-rank (or N-rank) training step time of wxtrain: the real TrainingStep with ZeroDataParallel
// (bucketed allreduce overlapped with backward) under mpirun, for one run file. bench/peer/ddp_peer.py
// is PyTorch's DistributedDataParallel (Gloo) on the same U-Net; bench/run_ddp_bench.sh alternates
// the two and prints the comparison.
//
//   mpirun -np 2 ddp_step --config configs/storm_unet.toml [--precision fp32] [--batch 8]
//       [--warmup 3] [--steps 10] [--reps 5] [--bucket-mb MB] [--overlap-steps N]
//   ddp_step --config configs/storm_unet.toml --describe   # shape + parameter count, JSON
//
// Timing: after `warmup` steps, `reps` repetitions of `steps` steps each, started together after a
// barrier; a repetition's figure is its wall time / steps on rank 0, the printed one the median.
// The micro-batches are synthetic (synthetic_micro_batches) on the storm grid, as in
// bench/train_throughput.cpp: the data path is measured by bench/prefetch_epoch.cpp.
//
// Overlap (--overlap-steps N > 0): ZeroDataParallel's last_backward().wait_seconds is the time
// finish_backward() still waited for communication after backward. N real steps give the exposed
// wait with overlap; N steps whose backward runs without prepare_backward(true) (so every bucket is
// issued only in finish_backward) give the whole communication time of the same buckets. The
// hidden share is 1 - exposed / whole (medians).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "core/autocast.h"
#include "core/config.h"
#include "core/memory_meter.h"
#include "data/dataset.h"
#include "distributed/communicator.h"
#include "distributed/world.h"
#include "models/unet/unet_options.h"
#include "trainer/training_step.h"
#include "step_bench_args.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace wxtrain;

struct Args : bench::StepBenchArgs {
  double bucket_mb = 0;  // 0: the run file's distributed.bucket_mb
  int overlap_steps = 0;
};

Args parse_args(int argc, char** argv) {
  Args a;
  const std::string usage =
      "mpirun -np 2 ddp_step --config FILE [--precision fp32|bf16-mixed] [--batch N] [--warmup N] [--steps N] "
      "[--reps N] [--bucket-mb MB] [--overlap-steps N] [--describe]";
  static_cast<bench::StepBenchArgs&>(a) = bench::parse_step_bench_args(
      argc, argv, usage, [&](const std::string& arg, const std::function<std::string()>& value) {
        if (arg == "--bucket-mb") a.bucket_mb = std::stod(value());
        else if (arg == "--overlap-steps") a.overlap_steps = std::stoi(value());
        else return false;
        return true;
      });
  if (a.overlap_steps < 0) bench::bench_usage(usage, "--overlap-steps must not be negative");
  return a;
}

using bench::median;

// TrainingStep::run with one micro-batch, except that backward runs without prepare_backward(true):
// no bucket is sent during backward, finish_backward() sends them all and waits.
void unoverlapped_step(trainer::TrainingState& state, const trainer::MicroBatch& mb, double lr) {
  auto& parallel = *state.parallel;
  parallel.zero_grad();
  parallel.prepare_backward(/*sync=*/false);
  torch::Tensor loss;
  {
    const Precision precision = state.config.train.precision;
    AutocastGuard guard(torch::kCPU, torch::kBFloat16, precision == Precision::kBf16Mixed);
    torch::Tensor prediction =
        trainer::rollout(*state.model, mb.input, mb.forcings, mb.target.size(1), state.rollout, mb.target);
    loss = trainer::training_loss(state, prediction, mb.target, mb.target_mask);
  }
  (void)loss.item<double>();  // as TrainingStep does
  loss.backward();
  parallel.finish_backward(1.0);
  parallel.clip_grad_norm(state.config.train.grad_clip);
  parallel.step(lr);
}

int run(const Args& args) {
  const distributed::World world = distributed::init_world();
  std::vector<std::string> overrides = {"train.precision=" + args.precision,
                                        "train.batch_size=" + std::to_string(args.batch), "train.accumulation=1"};
  if (args.bucket_mb > 0) overrides.push_back("distributed.bucket_mb=" + std::to_string(args.bucket_mb));
  RunConfig config = load_config(args.config, overrides);
  const data::Dataset dataset(config.data);
  data::take_grid(config, dataset);  // and its coordinates: graphcast's mesh where the data lies
  const models::ModelShape shape = models::model_shape(config);
  const std::vector<double> latitudes = dataset.has_coordinates() ? dataset.lat() : std::vector<double>{};

  auto comm = distributed::make_communicator(world, config.distributed, torch::kCPU);
  auto state = trainer::build_training_state(config, shape, comm, torch::kCPU, latitudes);
  auto& parallel = *state->parallel;
  parallel.broadcast_parameters();
  int64_t params = 0;
  for (const auto& p : state->model->parameters()) params += p.numel();

  if (args.describe) {
    if (world.rank == 0) {
      std::printf("{\"model\": \"%s\", \"params\": %lld, \"in_channels\": %lld, \"out_channels\": %lld, "
                  "\"lat\": %lld, \"lon\": %lld, \"channels\": [",
                  config.model.name.c_str(), static_cast<long long>(params), static_cast<long long>(shape.in_channels),
                  static_cast<long long>(shape.out_channels), static_cast<long long>(shape.lat),
                  static_cast<long long>(shape.lon));
      const auto& unet = config.model.options.as<models::UNetOptions>();
      for (size_t i = 0; i < unet.channels.size(); ++i)
        std::printf("%s%lld", i ? ", " : "", static_cast<long long>(unet.channels[i]));
      std::printf("], \"groups\": %lld, \"latitudes\": [", static_cast<long long>(unet.groups));
      for (size_t i = 0; i < latitudes.size(); ++i) std::printf("%s%.17g", i ? ", " : "", latitudes[i]);
      std::printf("]}\n");
    }
    return 0;
  }

  torch::manual_seed(1000 + world.rank);  // each rank its own data, as in training
  const auto batches = trainer::synthetic_micro_batches(config, shape, args.batch, 1, torch::kCPU);
  trainer::TrainingStep step(*state);
  const double lr = config.train.lr;
  double last_loss = 0;
  for (int i = 0; i < args.warmup; ++i) last_loss = step.run(batches, lr).loss;

  std::vector<double> step_ms;
  for (int r = 0; r < args.reps; ++r) {
    comm->barrier();
    const auto start = Clock::now();
    for (int i = 0; i < args.steps; ++i) last_loss = step.run(batches, lr).loss;
    step_ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - start).count() / args.steps);
  }

  std::vector<double> exposed_ms, whole_ms;
  int64_t issued_during = 0;
  for (int i = 0; i < args.overlap_steps; ++i) {
    // Alternate, so both see the same machine.
    step.run(batches, lr);
    exposed_ms.push_back(1e3 * parallel.last_backward().wait_seconds);
    issued_during = parallel.last_backward().issued_during_backward;
    unoverlapped_step(*state, batches[0], lr);
    whole_ms.push_back(1e3 * parallel.last_backward().wait_seconds);
  }

  if (world.rank == 0) {
    std::printf("impl=wxtrain ranks=%d model=%s precision=%s batch_per_rank=%lld params=%lld threads=%d "
                "buckets=%lld bucket_mb=%g loss=%.5g step_ms_reps=",
                world.size, config.model.name.c_str(), args.precision.c_str(), static_cast<long long>(args.batch),
                static_cast<long long>(params), at::get_num_threads(), static_cast<long long>(parallel.bucket_count()),
                config.distributed.bucket_mb, last_loss);
    for (size_t i = 0; i < step_ms.size(); ++i) std::printf("%s%.2f", i ? "," : "", step_ms[i]);
    std::printf(" step_ms=%.3f\n", median(step_ms));
    if (args.overlap_steps > 0) {
      const double exposed = median(exposed_ms), whole = median(whole_ms);
      std::printf("overlap buckets=%lld issued_during_backward=%lld exposed_wait_ms=%.3f whole_comm_ms=%.3f "
                  "hidden_share=%.3f\n",
                  static_cast<long long>(parallel.bucket_count()), static_cast<long long>(issued_during), exposed,
                  whole, whole > 0 ? 1.0 - exposed / whole : 0.0);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // LibTorch's CPU allocator is wxtrain's counting, caching one from the start, as in `wxtrain`.
  wxtrain::memory_meter(torch::Device(torch::kCPU));
  const Args args = parse_args(argc, argv);
  const int code = distributed::run_or_abort([&] { return run(args); });
  distributed::finalize_world();
  return code;
}
