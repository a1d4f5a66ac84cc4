#include "core/memory_meter.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include <unistd.h>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include "core/error.h"
#include "core/units.h"

namespace wxtrain {
namespace {

constexpr size_t kHeader = 64;  // keeps 64-byte alignment of the data and room for the size

std::atomic<int64_t> g_allocated{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_limit{0};

void raise_peak(int64_t now) {
  int64_t seen = g_peak.load(std::memory_order_relaxed);
  while (now > seen && !g_peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

void counting_delete(void* data) {
  if (!data) return;
  char* base = static_cast<char*>(data) - kHeader;
  g_allocated.fetch_sub(static_cast<int64_t>(*reinterpret_cast<size_t*>(base)), std::memory_order_relaxed);
  std::free(base);
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (n == 0) return {nullptr, nullptr, &counting_delete, cpu};
    const int64_t bytes = static_cast<int64_t>(n);
    const int64_t now = g_allocated.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    const int64_t limit = g_limit.load(std::memory_order_relaxed);
    if (limit > 0 && now > limit) {
      g_allocated.fetch_sub(bytes, std::memory_order_relaxed);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU memory budget exceeded: tried to allocate ",
                       format_bytes(static_cast<double>(n)), " with ", format_bytes(now - bytes),
                       " in use and a budget of ", format_bytes(limit), " (memory.limit / --memory-limit)");
    }
    raise_peak(now);
    void* base = nullptr;
    if (posix_memalign(&base, kHeader, n + kHeader) != 0) {
      g_allocated.fetch_sub(bytes, std::memory_order_relaxed);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "out of host memory allocating ", format_bytes(n));
    }
    *static_cast<size_t*>(base) = n;
    void* data = static_cast<char*>(base) + kHeader;
    return {data, data, &counting_delete, cpu};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &counting_delete; }
};

class CpuMemoryMeter final : public MemoryMeter {
 public:
  CpuMemoryMeter() {
    static CountingCpuAllocator allocator;
    // Priority above the default allocator's so nothing later replaces ours.
    c10::SetCPUAllocator(&allocator, /*priority=*/100);
  }
  std::string name() const override { return "cpu (counting allocator)"; }
  MemorySnapshot snapshot() const override {
    MemorySnapshot s;
    s.allocated = g_allocated.load(std::memory_order_relaxed);
    s.reserved = s.allocated;
    s.peak = std::max(g_peak.load(std::memory_order_relaxed), s.allocated);
    return s;
  }
  void reset_peak() override { g_peak.store(g_allocated.load(std::memory_order_relaxed)); }
  void set_limit(int64_t bytes) override { g_limit.store(bytes); }
  int64_t limit() const override { return g_limit.load(); }
  int64_t capacity() const override {
    return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
  }
};

}  // namespace

MemoryMeter& memory_meter(const c10::Device& device) {
  if (device.is_cpu()) {
    static CpuMemoryMeter meter;
    return meter;
  }
#ifdef WXTRAIN_WITH_CUDA
  if (device.is_cuda()) return detail::cuda_memory_meter(device.has_index() ? device.index() : 0);
#endif
  throw Error("no memory meter for device " + device.str() +
              (device.is_cuda() ? ": wxtrain was built without CUDA (cmake -DWXTRAIN_CUDA=ON)" : ""));
}

}  // namespace wxtrain
