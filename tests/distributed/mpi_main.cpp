// main() of the mpirun test binary: MPI up before the tests, the world communicator shared by
// them, every rank's failures printed with its rank, and MPI down after.
#include <cstdio>

#include <gtest/gtest.h>

#include "core/memory_meter.h"
#include "tests/distributed/mpi_test_env.h"

namespace wxtrain::distributed::fixture {

std::shared_ptr<Communicator>& world_comm_slot() {
  static std::shared_ptr<Communicator> comm;
  return comm;
}
std::shared_ptr<Communicator> world_comm() { return world_comm_slot(); }

namespace {

// Ranks other than 0 print only their failures, prefixed with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "rank %d: %s:%d: failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace wxtrain::distributed::fixture

int main(int argc, char** argv) {
  using namespace wxtrain::distributed;
  wxtrain::memory_meter(torch::kCPU);  // the counting allocator, before any tensor exists
  torch::set_num_threads(1);           // two ranks share the machine's cores
  const World world = init_world();
  ::testing::InitGoogleTest(&argc, argv);
  if (world.rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new fixture::RankFailurePrinter(world.rank));
  }
  fixture::world_comm_slot() = make_communicator(world, wxtrain::DistributedConfig{}, torch::kCPU);
  const int failed = RUN_ALL_TESTS();
  fixture::world_comm_slot().reset();
  finalize_world();
  return failed;
}
