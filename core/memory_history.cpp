#include "core/memory_history.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <unordered_map>

#include <c10/core/Device.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include "core/error.h"
#include "core/memory_meter.h"

namespace wxtrain::memory_history {

namespace detail {
std::atomic<bool> g_recording{false};
}

namespace {

// Blocks allocated before recording started and still live are one segment here: above the 47-bit
// user address space of x86-64 and aarch64, so no real block overlaps it, and below 2^53, so
// memory_viz's JavaScript reads it exactly.
constexpr uint64_t kEarlierBlocksAddress = uint64_t{1} << 47;

struct Block {
  size_t bytes = 0;  // requested; 0 while cached
  size_t capacity = 0;
  bool active = false;
  uint32_t context = 0;
};

struct State {
  std::mutex mutex;
  std::vector<Entry> ring;  // PyTorch's RingBuffer: fills up, then overwrites from `next`
  size_t max_entries = 0;
  size_t next = 0;
  std::unordered_map<uint64_t, Block> blocks;  // live and cached blocks, by data address
  std::vector<Frame> contexts{Frame{}};
  uint32_t context = 0;
};

State& state() {
  static auto* s = new State();  // never destroyed: deleters may run during static teardown
  return *s;
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t address(const void* data) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(data)); }

// Under the state's lock.
void push(State& s, Action action, uint64_t addr, int64_t size, int64_t time_us) {
  const Entry e{action, s.context, addr, size, time_us};
  if (s.ring.size() < s.max_entries) {
    s.ring.push_back(e);
  } else {
    s.ring[s.next] = e;
    if (++s.next == s.max_entries) s.next = 0;
  }
}

std::vector<Entry> ordered(const State& s) {
  std::vector<Entry> out;
  out.reserve(s.ring.size());
  out.insert(out.end(), s.ring.begin() + static_cast<std::ptrdiff_t>(s.next), s.ring.end());
  out.insert(out.end(), s.ring.begin(), s.ring.begin() + static_cast<std::ptrdiff_t>(s.next));
  return out;
}

c10::Dict<c10::IValue, c10::IValue> new_dict() {
  return c10::Dict<c10::IValue, c10::IValue>(c10::AnyType::get(), c10::AnyType::get());
}
c10::List<c10::IValue> new_list() { return c10::List<c10::IValue>(c10::AnyType::get()); }

}  // namespace

const char* to_string(Action action) {
  switch (action) {
    case Action::alloc: return "alloc";
    case Action::free_requested: return "free_requested";
    case Action::free_completed: return "free_completed";
    case Action::segment_alloc: return "segment_alloc";
    case Action::segment_free: return "segment_free";
    case Action::oom: return "oom";
  }
  return "unknown";
}

void start(size_t max_entries) {
  if (max_entries == 0) throw ConfigError("memory history: the number of entries to keep must be positive");
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.ring.clear();
    s.ring.reserve(std::min<size_t>(max_entries, size_t{1} << 16));
    s.max_entries = max_entries;
    s.next = 0;
    s.blocks.clear();
    s.contexts.assign(1, Frame{});
    s.context = 0;
    detail::g_recording.store(true);
  }
  // The cache's blocks, under its lock (cache, then history: the order release_cached takes them in);
  // a block that came or went since recording began is already known and left as it is.
  for_each_cached_block([&s](const void* data, size_t capacity) {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.blocks.try_emplace(address(data), Block{0, capacity, false, 0});
  });
}

void clear() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.ring.clear();
  s.next = 0;
}

void stop() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  detail::g_recording.store(false);
  std::vector<Entry>().swap(s.ring);
  s.max_entries = 0;
  s.next = 0;
  s.blocks.clear();
  s.contexts.assign(1, Frame{});
  s.context = 0;
}

void set_context(const Frame& frame) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (frame.name.empty()) {
    s.context = 0;
    return;
  }
  for (size_t i = 1; i < s.contexts.size(); ++i) {
    const Frame& f = s.contexts[i];
    if (f.name == frame.name && f.filename == frame.filename && f.line == frame.line) {
      s.context = static_cast<uint32_t>(i);
      return;
    }
  }
  s.contexts.push_back(frame);
  s.context = static_cast<uint32_t>(s.contexts.size() - 1);
}

std::vector<Entry> entries() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return ordered(s);
}

std::vector<Frame> contexts() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.contexts;
}

void record_alloc(const void* data, size_t bytes, size_t capacity, bool new_segment) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!recording()) return;
  const int64_t t = now_us();
  const uint64_t addr = address(data);
  if (new_segment) push(s, Action::segment_alloc, addr, static_cast<int64_t>(capacity), t);
  push(s, Action::alloc, addr, static_cast<int64_t>(bytes), t);
  s.blocks[addr] = Block{bytes, capacity, true, s.context};
}

void record_free(const void* data, size_t bytes, size_t capacity) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!recording()) return;
  const int64_t t = now_us();
  const uint64_t addr = address(data);
  push(s, Action::free_requested, addr, static_cast<int64_t>(bytes), t);
  push(s, Action::free_completed, addr, static_cast<int64_t>(bytes), t);
  Block& b = s.blocks[addr];  // a block from before recording is known from here on
  b = Block{0, capacity, false, b.context};
}

void record_segment_free(const void* data, size_t capacity) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!recording()) return;
  const uint64_t addr = address(data);
  push(s, Action::segment_free, addr, static_cast<int64_t>(capacity), now_us());
  s.blocks.erase(addr);
}

void record_oom(size_t bytes, int64_t device_free) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!recording()) return;
  push(s, Action::oom, static_cast<uint64_t>(std::max<int64_t>(device_free, 0)), static_cast<int64_t>(bytes), now_us());
}

c10::IValue snapshot() {
  State& s = state();
  std::vector<Entry> trace;
  std::vector<std::pair<uint64_t, Block>> blocks;
  std::vector<Frame> labels;
  int64_t allocated = 0;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!recording()) throw Error("no CPU memory history: recording was not started");
    trace = ordered(s);
    blocks.assign(s.blocks.begin(), s.blocks.end());
    labels = s.contexts;
    allocated = memory_meter(c10::Device(c10::DeviceType::CPU)).snapshot().allocated;
  }
  std::sort(blocks.begin(), blocks.end(), [](const auto& a, const auto& b) { return a.first < b.first; });

  // Keys and frames as IValues made once: the pickler writes each repeated one as a memo reference.
  const c10::IValue device_s("device"), address_s("address"), total_size_s("total_size"),
      allocated_size_s("allocated_size"), active_size_s("active_size"), requested_size_s("requested_size"),
      stream_s("stream"), segment_type_s("segment_type"), segment_pool_id_s("segment_pool_id"),
      is_expandable_s("is_expandable"), frames_s("frames"), blocks_s("blocks"), size_s("size"), state_s("state"),
      active_allocated_s("active_allocated"), inactive_s("inactive"), large_s("large"), small_s("small"),
      action_s("action"), addr_s("addr"), device_free_s("device_free"), time_us_s("time_us");
  std::vector<c10::IValue> frames;  // by context index; 0: no frames
  for (size_t i = 0; i < labels.size(); ++i) {
    auto list = new_list();
    if (i > 0) {
      auto frame = new_dict();
      frame.insert("filename", labels[i].filename);
      frame.insert("line", labels[i].line);
      frame.insert("name", labels[i].name);
      list.push_back(frame);
    }
    frames.emplace_back(list);
  }
  const c10::IValue pool_id(std::make_tuple(int64_t{0}, int64_t{0}));

  auto segments = new_list();
  auto add_segment = [&](uint64_t addr, const Block& b) {
    const auto total = static_cast<int64_t>(b.capacity);
    const int64_t in_use = b.active ? total : 0;
    const c10::IValue& f = frames.at(b.context < frames.size() ? b.context : 0);
    auto block = new_dict();
    block.insert(address_s, static_cast<int64_t>(addr));
    block.insert(size_s, total);
    block.insert(requested_size_s, static_cast<int64_t>(b.bytes));
    block.insert(state_s, b.active ? active_allocated_s : inactive_s);
    block.insert(frames_s, f);
    auto block_list = new_list();
    block_list.push_back(block);
    auto segment = new_dict();
    segment.insert(device_s, int64_t{0});
    segment.insert(address_s, static_cast<int64_t>(addr));
    segment.insert(total_size_s, total);
    segment.insert(allocated_size_s, in_use);
    segment.insert(active_size_s, in_use);
    segment.insert(requested_size_s, static_cast<int64_t>(b.bytes));
    segment.insert(stream_s, int64_t{0});
    segment.insert(segment_type_s, total > (int64_t{1} << 20) ? large_s : small_s);
    segment.insert(segment_pool_id_s, pool_id);
    segment.insert(is_expandable_s, false);
    segment.insert(frames_s, f);
    segment.insert(blocks_s, block_list);
    segments.push_back(segment);
  };
  int64_t known = 0;
  for (const auto& [addr, b] : blocks) {
    if (b.active) known += static_cast<int64_t>(b.bytes);
    add_segment(addr, b);
  }
  if (allocated > known) {
    const auto earlier = static_cast<size_t>(allocated - known);
    add_segment(kEarlierBlocksAddress, Block{earlier, earlier, true, 0});
  }

  auto events = new_list();
  for (const Entry& e : trace) {
    auto entry = new_dict();
    entry.insert(action_s, to_string(e.action));
    entry.insert(e.action == Action::oom ? device_free_s : addr_s, static_cast<int64_t>(e.addr));
    entry.insert(size_s, e.size);
    entry.insert(stream_s, int64_t{0});
    entry.insert(frames_s, frames.at(e.context < frames.size() ? e.context : 0));
    entry.insert(time_us_s, e.time_us);
    events.push_back(entry);
  }
  auto device_traces = new_list();
  device_traces.push_back(events);

  auto result = new_dict();
  result.insert("segments", segments);
  result.insert("device_traces", device_traces);
  return result;
}

std::string pickle(const c10::IValue& value) {
  std::string out;
  {
    // No tensor table, no type tags: plain Python dicts, lists and ints that pickle.load and
    // memory_viz's own unpickler read without torch (PyTorch's memory_snapshot.cpp does the same).
    torch::jit::Pickler pickler([&out](const char* data, size_t size) { out.append(data, size); }, nullptr, nullptr,
                                nullptr, nullptr, /*tag_aggregates=*/false);
    pickler.protocol();
    pickler.pushIValue(value);
    pickler.stop();
  }
  return out;
}

std::string snapshot_pickle() { return pickle(snapshot()); }

}  // namespace wxtrain::memory_history
