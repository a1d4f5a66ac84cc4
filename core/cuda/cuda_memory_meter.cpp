// The CUDA memory meter (built with WXTRAIN_CUDA): the caching allocator's own statistics, so the
// numbers are what PyTorch's torch.cuda.memory_allocated / memory_reserved / max_memory_allocated
// report for the same program.
#include <map>
#include <memory>
#include <mutex>

#include <cuda_runtime_api.h>

#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include "core/error.h"
#include "core/memory_meter.h"

namespace wxtrain::detail {
namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;
constexpr size_t kAll = static_cast<size_t>(alloc::StatType::AGGREGATE);

class CudaMemoryMeter final : public MemoryMeter {
 public:
  explicit CudaMemoryMeter(int device) : device_(device) {
    at::globalContext().lazyInitCUDA();  // sizes the allocator's per-device tables
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
      throw Error("no CUDA device cuda:" + std::to_string(device) + " (" + std::to_string(count) + " visible)");
    }
  }
  std::string name() const override { return "cuda:" + std::to_string(device_) + " (caching allocator)"; }
  MemorySnapshot snapshot() const override {
    const alloc::DeviceStats stats = alloc::getDeviceStats(device_);
    MemorySnapshot s;
    s.allocated = stats.allocated_bytes[kAll].current;
    s.reserved = stats.reserved_bytes[kAll].current;
    s.peak = stats.allocated_bytes[kAll].peak;
    return s;
  }
  void reset_peak() override { alloc::resetPeakStats(device_); }
  // The caching allocator enforces a share of the device (on reserved bytes, as PyTorch's
  // set_per_process_memory_fraction does) and raises c10::OutOfMemoryError past it.
  void set_limit(int64_t bytes) override {
    const double total = static_cast<double>(capacity());
    const double fraction = bytes > 0 ? std::min(1.0, static_cast<double>(bytes) / total) : 1.0;
    alloc::setMemoryFraction(fraction, device_);
    limit_ = bytes;
  }
  int64_t limit() const override { return limit_; }
  int64_t capacity() const override {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    size_t free_bytes = 0, total_bytes = 0;
    const cudaError_t result = cudaMemGetInfo(&free_bytes, &total_bytes);
    if (result != cudaSuccess) {
      throw Error("cudaMemGetInfo on cuda:" + std::to_string(device_) + " failed: " + cudaGetErrorString(result));
    }
    return static_cast<int64_t>(total_bytes);
  }
  void release_cached() override { alloc::emptyCache(); }

 private:
  int device_;
  int64_t limit_ = 0;
};

}  // namespace

MemoryMeter& cuda_memory_meter(int device_index) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<CudaMemoryMeter>> meters;
  std::lock_guard<std::mutex> lock(mutex);
  auto& meter = meters[device_index];
  if (!meter) meter = std::make_unique<CudaMemoryMeter>(device_index);
  return *meter;
}

}  // namespace wxtrain::detail
