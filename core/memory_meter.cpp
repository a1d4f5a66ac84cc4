#include "core/memory_meter.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <unistd.h>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include "core/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/memory_history.h"
#include "core/units.h"

namespace wxtrain {
namespace {

constexpr size_t kHeader = 64;  // keeps 64-byte alignment of the data; holds the size and capacity

// Freed blocks of at least kCacheMin bytes are kept, by capacity, for the next allocation of that
// capacity, as the CUDA caching allocator keeps its segments. A training step allocates the same
// sizes every step, and a fresh large block from the system costs a page fault per 4 KiB on first
// touch: ~15% of a storm U-Net step on this CPU before the cache. Capacities are rounded up to
// kCacheGranule so sizes that differ by a few bytes share blocks. The cache never holds more than
// the highest `allocated` seen (reserved <= twice the working set); release_cached() empties it.
constexpr size_t kCacheMin = 64 * 1024;
constexpr size_t kCacheGranule = 4096;

std::atomic<int64_t> g_allocated{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_high_water{0};  // the highest `allocated` ever, never reset
std::atomic<int64_t> g_limit{0};

struct BlockCache {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;  // capacity -> blocks (header pointers)
  int64_t bytes = 0;                                           // guarded by mutex
};

BlockCache& block_cache() {
  static auto* cache = new BlockCache();  // never destroyed: deleters may run during static teardown
  return *cache;
}
std::atomic<int64_t> g_cached{0};  // mirrors block_cache().bytes for lock-free snapshots

struct Header {
  size_t size;      // bytes requested: what `allocated` counts
  size_t capacity;  // bytes usable behind the header: what the block can be reused for
  bool counted;     // false: allocated inside an UncountedScope (never counted, never cached)
};

thread_local bool t_uncounted = false;  // inside an UncountedScope on this thread

void raise_max(std::atomic<int64_t>& value, int64_t now) {
  int64_t seen = value.load(std::memory_order_relaxed);
  while (now > seen && !value.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

size_t capacity_for(size_t n) { return n < kCacheMin ? n : (n + kCacheGranule - 1) / kCacheGranule * kCacheGranule; }

void* take_cached(size_t capacity) {
  if (capacity < kCacheMin) return nullptr;
  BlockCache& cache = block_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto it = cache.free_blocks.find(capacity);
  if (it == cache.free_blocks.end() || it->second.empty()) return nullptr;
  void* base = it->second.back();
  it->second.pop_back();
  cache.bytes -= static_cast<int64_t>(capacity);
  g_cached.store(cache.bytes, std::memory_order_relaxed);
  return base;
}

bool give_to_cache(void* base, size_t capacity) {
  if (capacity < kCacheMin) return false;
  BlockCache& cache = block_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  if (cache.bytes + static_cast<int64_t>(capacity) > g_high_water.load(std::memory_order_relaxed)) return false;
  cache.free_blocks[capacity].push_back(base);
  cache.bytes += static_cast<int64_t>(capacity);
  g_cached.store(cache.bytes, std::memory_order_relaxed);
  return true;
}

void release_cache() {
  BlockCache& cache = block_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  const bool recording = memory_history::recording();
  for (auto& [capacity, blocks] : cache.free_blocks) {
    for (void* base : blocks) {
      if (recording) memory_history::record_segment_free(static_cast<char*>(base) + kHeader, capacity);
      std::free(base);
    }
  }
  cache.free_blocks.clear();
  cache.bytes = 0;
  g_cached.store(0, std::memory_order_relaxed);
}

void counting_delete(void* data) {
  if (!data) return;
  char* base = static_cast<char*>(data) - kHeader;
  const Header header = *reinterpret_cast<Header*>(base);
  if (!header.counted) {
    std::free(base);
    return;
  }
  g_allocated.fetch_sub(static_cast<int64_t>(header.size), std::memory_order_relaxed);
  // The history hears of a free before the block can be handed out again (core/memory_history.h).
  const bool recording = memory_history::recording();
  if (recording) memory_history::record_free(data, header.size, header.capacity);
  if (!give_to_cache(base, header.capacity)) {
    if (recording) memory_history::record_segment_free(data, header.capacity);
    std::free(base);
  }
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (n == 0) return {nullptr, nullptr, &counting_delete, cpu};
    if (t_uncounted) {
      void* base = nullptr;
      if (posix_memalign(&base, kHeader, n + kHeader) != 0)
        TORCH_CHECK_WITH(OutOfMemoryError, false, "out of host memory allocating ", format_bytes(n));
      *static_cast<Header*>(base) = {n, n, false};
      void* data = static_cast<char*>(base) + kHeader;
      return {data, data, &counting_delete, cpu};
    }
    const int64_t bytes = static_cast<int64_t>(n);
    const int64_t now = g_allocated.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    const int64_t limit = g_limit.load(std::memory_order_relaxed);
    if (limit > 0 && now > limit) {
      g_allocated.fetch_sub(bytes, std::memory_order_relaxed);
      if (memory_history::recording()) memory_history::record_oom(n, limit - (now - bytes));
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU memory budget exceeded: tried to allocate ",
                       format_bytes(static_cast<double>(n)), " with ", format_bytes(now - bytes),
                       " in use and a budget of ", format_bytes(limit), " (memory.limit / --memory-limit)");
    }
    raise_max(g_peak, now);
    raise_max(g_high_water, now);
    const size_t capacity = capacity_for(n);
    void* base = take_cached(capacity);
    const bool fresh = !base;
    if (fresh && posix_memalign(&base, kHeader, capacity + kHeader) != 0) {
      release_cache();  // the system may have room once the cache is returned
      if (posix_memalign(&base, kHeader, capacity + kHeader) != 0) {
        g_allocated.fetch_sub(bytes, std::memory_order_relaxed);
        if (memory_history::recording())
          memory_history::record_oom(n, static_cast<int64_t>(sysconf(_SC_AVPHYS_PAGES)) * sysconf(_SC_PAGE_SIZE));
        TORCH_CHECK_WITH(OutOfMemoryError, false, "out of host memory allocating ", format_bytes(n));
      }
    }
    *static_cast<Header*>(base) = {n, capacity, true};
    void* data = static_cast<char*>(base) + kHeader;
    if (memory_history::recording()) memory_history::record_alloc(data, n, capacity, /*new_segment=*/fresh);
    return {data, data, &counting_delete, cpu};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &counting_delete; }
  void copy_data(void* dest, const void* src, size_t count) const override { default_copy_data(dest, src, count); }
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
    s.reserved = s.allocated + g_cached.load(std::memory_order_relaxed);
    s.peak = std::max(g_peak.load(std::memory_order_relaxed), s.allocated);
    return s;
  }
  void reset_peak() override { g_peak.store(g_allocated.load(std::memory_order_relaxed)); }
  void set_limit(int64_t bytes) override { g_limit.store(bytes); }
  int64_t limit() const override { return g_limit.load(); }
  void release_cached() override { release_cache(); }
  int64_t capacity() const override {
    return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
  }
};

}  // namespace

void memory_history::for_each_cached_block(const std::function<void(const void* data, size_t capacity)>& visit) {
  BlockCache& cache = block_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  for (const auto& [capacity, blocks] : cache.free_blocks) {
    for (void* base : blocks) visit(static_cast<char*>(base) + kHeader, capacity);
  }
}

UncountedScope::UncountedScope(bool active) : previous_(t_uncounted) { t_uncounted = previous_ || active; }

UncountedScope::~UncountedScope() { t_uncounted = previous_; }

MemoryMeter& memory_meter(const c10::Device& device) {
  if (device.is_cpu()) {
    static CpuMemoryMeter meter;
    return meter;
  }
  if (device.is_cuda()) return cuda::memory_meter(device.has_index() ? device.index() : 0);
  throw Error("no memory meter for device " + device.str());
}

}  // namespace wxtrain
