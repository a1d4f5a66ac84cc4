// The CUDA backend of a build against a CPU-only LibTorch: every entry point says how to get the
// real one.
#include "core/cuda/cuda_backend.h"

#include "core/error.h"

namespace wxtrain::cuda {
namespace {
[[noreturn]] void no_cuda(const std::string& what) {
  throw Error(what + ": wxtrain was built against a LibTorch without CUDA (build against a CUDA LibTorch, "
              "e.g. the torch wheel that scripts/install_deps.sh installs)");
}
}  // namespace

bool built() { return false; }
MemoryMeter& memory_meter(c10::DeviceIndex device) { no_cuda("memory meter for cuda:" + std::to_string(device)); }
std::string unavailable_reason(c10::DeviceIndex) {
  return "wxtrain was built against a LibTorch without CUDA (build against a CUDA LibTorch, e.g. the torch wheel "
         "that scripts/install_deps.sh installs)";
}
DeviceProperties properties(c10::DeviceIndex device) { no_cuda("properties of cuda:" + std::to_string(device)); }
DeviceMemory memory_info(c10::DeviceIndex device) { no_cuda("memory of cuda:" + std::to_string(device)); }
int64_t peak_reserved(c10::DeviceIndex device) { no_cuda("reserved peak of cuda:" + std::to_string(device)); }
void synchronize(c10::DeviceIndex device) { no_cuda("synchronize cuda:" + std::to_string(device)); }
void start_memory_history(size_t) { no_cuda("CUDA memory history"); }
std::string memory_snapshot_pickle() { no_cuda("CUDA memory snapshot"); }
void stop_memory_history() {}

}  // namespace wxtrain::cuda
