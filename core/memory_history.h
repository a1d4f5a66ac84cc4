#pragma once
// The CPU allocator's allocation history, written as the snapshot PyTorch's memory_viz reads
// (https://pytorch.org/memory_viz, `python -m torch.cuda._memory_viz trace_plot FILE -o FILE.html`).
// PyTorch records this only for its CUDA caching allocator (torch.cuda.memory._record_memory_history
// and _dump_snapshot; wxtrain's CUDA side is core/cuda/cuda_backend.h); this is the same record for
// the counting CPU allocator of core/memory_meter.cpp, in the same pickle.
//
// While recording, the allocator reports every event, and they go into a ring buffer of at most
// `max_entries` entries (the oldest are overwritten, as in PyTorch's):
//   a fresh block from the system   segment_alloc (address, capacity), then alloc (address, bytes)
//   a block reused from the cache   alloc (address, bytes)
//   a free                          free_requested and free_completed (address, bytes), then
//                                   segment_free (address, capacity) unless the cache keeps it
//   release_cached()                segment_free for each cached block
//   a budget or host OOM            oom (bytes asked for; device_free: bytes left under the budget,
//                                   or available host memory)
// `bytes` is what the tensor asked for (what the meter's `allocated` counts), `capacity` what the
// block holds (rounded up to 4 KiB from 64 KiB on). Addresses are the tensors' data pointers, times
// microseconds since the epoch, stream 0, and the trace is device 0's.
//
// The snapshot's segments are the allocator's blocks when it is taken, each block its own segment
// (total_size = capacity): live blocks as active_allocated (requested_size = bytes), cached blocks
// as inactive. Blocks are known from the moment recording starts (the cache's blocks then included);
// the bytes of blocks allocated before that and still live are one active segment at address 2^47
// (above every user-space pointer), so the snapshot's active bytes are the meter's `allocated`.
// CPU events carry no stack traces: frames are the label set with set_context (wxtrain profile:
// the step and its phase), or empty.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

namespace wxtrain::memory_history {

enum class Action : uint8_t { alloc, free_requested, free_completed, segment_alloc, segment_free, oom };
const char* to_string(Action action);  // PyTorch's names: "alloc", "free_requested", ...

struct Entry {
  Action action = Action::alloc;
  uint32_t context = 0;  // index into contexts(); 0 = none
  uint64_t addr = 0;     // data pointer; for oom, device_free
  int64_t size = 0;
  int64_t time_us = 0;
};

// A source location shown as the stack of an event in memory_viz ("filename:line:name").
struct Frame {
  std::string filename;
  int64_t line = 0;
  std::string name;
};

namespace detail {
extern std::atomic<bool> g_recording;
}

// Whether the allocator reports events: one relaxed load, all the allocator pays when off.
inline bool recording() { return detail::g_recording.load(std::memory_order_relaxed); }

// Starts recording with a ring buffer of `max_entries` (> 0; throws ConfigError otherwise),
// dropping any earlier history. Install the CPU meter first (memory_meter(cpu)).
void start(size_t max_entries);
// Drops the recorded events and keeps recording; the blocks stay known (PyTorch's clear_history).
void clear();
// Stops recording and drops the history.
void stop();

// Labels the events that follow (and the blocks they allocate) with `frame`; an empty name clears.
void set_context(const Frame& frame);

// The recorded events, oldest first (at most max_entries).
std::vector<Entry> entries();
// The labels, indexed by Entry::context (index 0 is the empty label).
std::vector<Frame> contexts();

// The snapshot as PyTorch's _memory_snapshot_pickled builds it: {"segments": [...],
// "device_traces": [[...]]}. Throws Error when not recording.
c10::IValue snapshot();
// snapshot() pickled with LibTorch's own pickler (protocol 2, no type tags, as PyTorch's
// memory_snapshot.cpp writes it), the bytes torch.cuda.memory._dump_snapshot would write.
std::string snapshot_pickle();
// Any IValue pickled that way.
std::string pickle(const c10::IValue& value);

// The allocator's side: core/memory_meter.cpp calls these only while recording() (see above for
// when), never with one of its own locks held except the cache's in record_segment_free.
void record_alloc(const void* data, size_t bytes, size_t capacity, bool new_segment);
void record_free(const void* data, size_t bytes, size_t capacity);
void record_segment_free(const void* data, size_t capacity);
void record_oom(size_t bytes, int64_t device_free);
// Implemented by core/memory_meter.cpp: calls visit(data, capacity) for every block in the CPU
// allocator's cache, holding the cache's lock.
void for_each_cached_block(const std::function<void(const void* data, size_t capacity)>& visit);

}  // namespace wxtrain::memory_history
