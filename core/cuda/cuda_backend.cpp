// The CUDA backend (a build against a CUDA LibTorch): the caching allocator's own statistics, so
// the numbers are what PyTorch's torch.cuda.memory_allocated / memory_reserved /
// max_memory_allocated report for the same program, and its allocation history for memory_viz.
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include <cuda_runtime_api.h>

#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/cuda/memory_snapshot.h>

#include "core/cuda/cuda_backend.h"
#include "core/error.h"

namespace wxtrain::cuda {
namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;
constexpr size_t kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

void require_device(c10::DeviceIndex device) {
  if (const std::string why = unavailable_reason(device); !why.empty()) {
    throw Error("no CUDA device cuda:" + std::to_string(device) + " (" + why + ")");
  }
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);  // sizes the allocator's per-device tables
}

class CudaMemoryMeter final : public MemoryMeter {
 public:
  explicit CudaMemoryMeter(c10::DeviceIndex device) : device_(device) { require_device(device); }
  std::string name() const override { return "cuda:" + std::to_string(device_) + " (caching allocator)"; }
  MemorySnapshot snapshot() const override {
    const auto stats = alloc::getDeviceStats(device_);
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
  int64_t capacity() const override { return memory_info(device_).total; }
  void release_cached() override { alloc::emptyCache(); }

 private:
  c10::DeviceIndex device_;
  int64_t limit_ = 0;
};

}  // namespace

bool built() { return true; }

MemoryMeter& memory_meter(c10::DeviceIndex device) {
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, std::unique_ptr<CudaMemoryMeter>> meters;
  std::lock_guard<std::mutex> lock(mutex);
  auto& meter = meters[device];
  if (!meter) meter = std::make_unique<CudaMemoryMeter>(device);
  return *meter;
}

std::string unavailable_reason(c10::DeviceIndex device) {
  int count = 0;
  const cudaError_t result = cudaGetDeviceCount(&count);
  if (result != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(result);
  if (device < 0 || device >= count)
    return "cuda:" + std::to_string(device) + " is not one of the " + std::to_string(count) + " visible devices";
  return "";
}

DeviceProperties properties(c10::DeviceIndex device) {
  cudaDeviceProp p{};
  const cudaError_t result = cudaGetDeviceProperties(&p, device);
  if (result != cudaSuccess) {
    throw Error("cudaGetDeviceProperties on cuda:" + std::to_string(device) + " failed: " + cudaGetErrorString(result));
  }
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  return {p.name, p.major * 10 + p.minor, p.multiProcessorCount, version(runtime), version(driver)};
}

DeviceMemory memory_info(c10::DeviceIndex device) {
  c10::cuda::CUDAGuard guard(device);
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t result = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (result != cudaSuccess) {
    throw Error("cudaMemGetInfo on cuda:" + std::to_string(device) + " failed: " + cudaGetErrorString(result));
  }
  return {static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
}

int64_t peak_reserved(c10::DeviceIndex device) { return alloc::getDeviceStats(device).reserved_bytes[kAll].peak; }

void synchronize(c10::DeviceIndex device) {
  c10::cuda::CUDAGuard guard(device);
  c10::cuda::device_synchronize();
}

void start_memory_history(size_t max_entries) {
  require_device(0);
  // torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="all",
  // max_entries=..., clear_history=True) as 2.11 spells it in C++ (torch/csrc/cuda/memory_snapshot.h):
  // enabled "state"|"all", context "state"|"alloc"|"all", stacks "python"|"all" (anything else
  // throws). stacks="all" adds C++ frames to the Python ones, and a C++ program has only those
  // ("python" would leave every event without frames). clearHistory drops what an earlier recording
  // left, so the snapshot holds this one alone. std::optional<std::string> arguments, not literals: a
  // bare "all" converts to bool first and would pick the legacy overload.
  torch::cuda::_record_memory_history(std::optional<std::string>(std::string("all")),
                                      std::optional<std::string>(std::string("all")), std::string("all"),
                                      max_entries, /*clearHistory=*/true);
}

std::string memory_snapshot_pickle() { return torch::cuda::_memory_snapshot_pickled(); }

// enabled=None: stops recording and clears the ring buffer (CUDACachingAllocator::recordHistory).
void stop_memory_history() { torch::cuda::_record_memory_history(std::nullopt); }

}  // namespace wxtrain::cuda
