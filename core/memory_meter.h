#pragma once
// One meter for device memory, read the same way by the estimator (calibration), the tuner (OOM),
// the profiler (per-step log) and the trainer (progress bar).
//
// CPU: a byte-counting allocator installed as LibTorch's CPU allocator. Each block carries a
// 64-byte header holding its size in front of the data, so data == context (raw allocations in
// LibTorch require that) and the deleter can find the size. Freed blocks of 64 KiB and more are
// cached for reuse, as on CUDA (no page faults on memory a step used before); `reserved` counts
// them and release_cached() frees them. An optional budget makes allocations past it throw
// c10::OutOfMemoryError, which emulates a "24 GiB device" on any machine; it applies to
// `allocated`, the bytes live tensors hold.
// CUDA: the caching allocator's statistics (core/cuda/cuda_backend.h).
#include <cstdint>
#include <memory>
#include <string>

#include <c10/core/Device.h>

namespace wxtrain {

struct MemorySnapshot {
  int64_t allocated = 0;  // bytes held by live tensors now
  int64_t reserved = 0;   // bytes held from the system: allocated plus the allocator's cache
  int64_t peak = 0;       // highest `allocated` since the last reset_peak()
};

class MemoryMeter {
 public:
  virtual ~MemoryMeter() = default;
  virtual std::string name() const = 0;
  virtual MemorySnapshot snapshot() const = 0;
  virtual void reset_peak() = 0;
  // A budget in bytes (0 = none): allocations past it raise c10::OutOfMemoryError.
  virtual void set_limit(int64_t bytes) = 0;
  virtual int64_t limit() const = 0;
  // The device's physical memory (CPU: RAM); what "fits" means when no limit is set.
  virtual int64_t capacity() const = 0;
  // Return cached blocks to the system (CUDA: empty_cache).
  virtual void release_cached() {}
};

// The meter for `device`. For the CPU this installs the counting allocator on first use, so call
// it before creating the tensors you want counted (the CLI does so at start-up).
MemoryMeter& memory_meter(const c10::Device& device);

// CPU counting allocator: what this thread allocates inside the scope is not counted (`allocated`,
// `peak`, the budget, the memory history) and its blocks bypass the cache. For one thing only: the
// host-only workspace of a CPU step that stands for a GPU's (the estimator's GPU-standing trace,
// ops/conv2d.h), memory the device the trace stands for never allocates. A CPU run's own
// allocations are always counted. Blocks allocated inside stay uncounted when freed outside.
class UncountedScope {
 public:
  explicit UncountedScope(bool active = true);
  ~UncountedScope();
  UncountedScope(const UncountedScope&) = delete;
  UncountedScope& operator=(const UncountedScope&) = delete;

 private:
  bool previous_;
};

// Measures the peak of a region relative to the meter's state when the scope began.
class PeakScope {
 public:
  explicit PeakScope(MemoryMeter& meter) : meter_(meter) {
    meter_.reset_peak();
    start_ = meter_.snapshot().allocated;
  }
  int64_t start() const { return start_; }
  int64_t peak() const { return meter_.snapshot().peak; }
  int64_t peak_increase() const { return peak() - start_; }

 private:
  MemoryMeter& meter_;
  int64_t start_;
};

}  // namespace wxtrain
