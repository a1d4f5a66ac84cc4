// The NCCL backend of a build without WXTRAIN_CUDA: it says how to get the real one.
#include "core/error.h"
#include "distributed/nccl/nccl_communicator.h"

namespace wxtrain::distributed {

bool nccl_available() { return false; }
std::string nccl_version() { return ""; }

std::shared_ptr<Communicator> make_nccl_communicator(const World&, const torch::Device& device) {
  throw Error("NCCL communicator for " + device.str() +
              ": wxtrain was built against a LibTorch without CUDA, so without NCCL (build against a CUDA LibTorch, e.g. the torch wheel scripts/install_deps.sh installs)");
}

}  // namespace wxtrain::distributed
