// A two-rank job whose rank 1 throws while rank 0 waits in a collective: run_or_abort() must take
// the job down (tests/distributed/expect_abort.cmake checks the exit code and the message).
#include <stdexcept>

#include "distributed/communicator.h"
#include "distributed/world.h"

int main() {
  using namespace wxtrain::distributed;
  const World world = init_world();
  return run_or_abort([&] {
    auto comm = make_communicator(world, wxtrain::DistributedConfig{}, torch::kCPU);
    if (world.rank == 1) throw std::runtime_error("injected failure in the training step");
    auto t = torch::ones({4});
    comm->allreduce(t);  // never matched by rank 1: without the abort this hangs
    finalize_world();
    return 0;
  });
}
