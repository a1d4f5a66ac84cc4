// The NCCL backend of a build without WXTRAIN_CUDA: it says how to get the real one.
#include "core/error.h"
#include "distributed/nccl/nccl_communicator.h"

namespace wxtrain::distributed {

bool nccl_available() { return false; }

std::shared_ptr<Communicator> make_nccl_communicator(const World&, const torch::Device& device) {
  throw Error("NCCL communicator for " + device.str() +
              ": wxtrain was built without CUDA/NCCL (reconfigure with cmake -DWXTRAIN_CUDA=ON against a CUDA LibTorch)");
}

}  // namespace wxtrain::distributed
