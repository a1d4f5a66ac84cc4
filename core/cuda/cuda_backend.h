#pragma once
// What wxtrain does only on CUDA: the caching allocator's meter and its allocation history (the
// snapshot PyTorch's memory_viz reads). A CUDA LibTorch builds cuda_backend.cpp; a CPU LibTorch
// builds cuda_stub.cpp, whose functions say that this build has no CUDA, so no caller needs an #ifdef.
#include <cstddef>
#include <string>

#include <c10/core/Device.h>

#include "core/memory_meter.h"

namespace wxtrain::cuda {

// True in a build against a CUDA LibTorch (WXTRAIN_CUDA), whether or not a GPU is present.
bool built();

// The meter of cuda:<device> (the caching allocator's statistics); throws Error without CUDA or
// without that device.
MemoryMeter& memory_meter(c10::DeviceIndex device);

// Why cuda:<device> cannot be used (no CUDA in this build, no driver, no such device); empty when it can.
std::string unavailable_reason(c10::DeviceIndex device);

struct DeviceProperties {
  std::string name;            // as the driver reports it ("NVIDIA H100 80GB HBM3")
  int compute_capability = 0;  // major * 10 + minor (90 on an H100), as torch.cuda.get_device_capability
  int multiprocessors = 0;
  std::string runtime_version;  // the CUDA runtime's, "13.0"
  std::string driver_version;   // the newest CUDA the driver supports, "13.0"
};
DeviceProperties properties(c10::DeviceIndex device);

// cudaMemGetInfo: the device's memory and what is free of it (the contexts of every process and
// the caching allocator's reserve are not).
struct DeviceMemory {
  int64_t free = 0;
  int64_t total = 0;
};
DeviceMemory memory_info(c10::DeviceIndex device);

// The caching allocator's highest reserved bytes since the meter's last reset_peak() (the meter's
// own peak is of allocated bytes).
int64_t peak_reserved(c10::DeviceIndex device);

// Waits for all work on the device.
void synchronize(c10::DeviceIndex device);

// Starts recording the caching allocator's allocation history, as
// torch.cuda.memory._record_memory_history(max_entries=..., clear_history=True) does: every event
// with its C++ stack (stacks="all"; a C++ program has no Python frames). Drops an earlier history.
void start_memory_history(size_t max_entries);
// The snapshot torch.cuda.memory._dump_snapshot writes: segments, blocks and the recorded history,
// pickled for memory_viz.
std::string memory_snapshot_pickle();
// Stops recording and drops the history.
void stop_memory_history();

}  // namespace wxtrain::cuda
