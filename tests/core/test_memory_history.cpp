// The CPU allocator's history (core/memory_history.h): the events of real tensor allocations and
// frees in order, with their addresses and sizes, cache reuse, the ring buffer's bound, and the
// snapshot memory_viz reads (segments = live and cached blocks, the trace), pickled by LibTorch.
#include <gtest/gtest.h>

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include "core/error.h"
#include "core/memory_history.h"
#include "core/memory_meter.h"

using namespace wxtrain;
namespace mh = wxtrain::memory_history;

namespace {

MemoryMeter& cpu_meter() { return memory_meter(torch::Device(torch::kCPU)); }

uint64_t addr(const torch::Tensor& t) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(t.data_ptr())); }

struct Expected {
  mh::Action action;
  uint64_t addr;
  int64_t size;
};

void expect_entries(const std::vector<mh::Entry>& got, const std::vector<Expected>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_STREQ(mh::to_string(got[i].action), mh::to_string(want[i].action)) << "entry " << i;
    EXPECT_EQ(got[i].addr, want[i].addr) << "entry " << i << " (" << mh::to_string(want[i].action) << ")";
    EXPECT_EQ(got[i].size, want[i].size) << "entry " << i << " (" << mh::to_string(want[i].action) << ")";
    if (i > 0) {
      EXPECT_GE(got[i].time_us, got[i - 1].time_us) << "entry " << i;
    }
  }
}

c10::Dict<c10::IValue, c10::IValue> find_segment(const c10::IValue& snapshot, uint64_t address) {
  for (const c10::IValue& s : snapshot.toGenericDict().at("segments").toListRef()) {
    auto segment = s.toGenericDict();
    if (static_cast<uint64_t>(segment.at("address").toInt()) == address) return segment;
  }
  ADD_FAILURE() << "no segment at address " << address;
  return c10::Dict<c10::IValue, c10::IValue>(c10::AnyType::get(), c10::AnyType::get());
}

class MemoryHistory : public ::testing::Test {
 protected:
  void SetUp() override {
    // The cache keeps no more than the highest `allocated` seen: make that 16 MiB above now, so the
    // blocks freed below are cached whichever tests ran before (ctest runs each alone).
    MemoryMeter& meter = cpu_meter();  // installs the counting allocator first
    { torch::Tensor high_water = torch::empty({16 << 20}, torch::kUInt8); }
    meter.release_cached();  // fresh blocks come from the system: segment_alloc events
  }
  void TearDown() override {
    mh::stop();
    cpu_meter().set_limit(0);
  }
};

constexpr int64_t kMiB = 1 << 20;

TEST_F(MemoryHistory, RecordsAllocationsFreesAndCacheReuseInOrder) {
  mh::start(1000);
  uint64_t big_addr = 0, small_addr = 0;
  {
    torch::Tensor big = torch::empty({1024, 1024}, torch::kFloat32);  // 4 MiB: a fresh, cacheable block
    torch::Tensor small = torch::empty({100}, torch::kFloat32);       // 400 B: malloc'd and freed
    big_addr = addr(big);
    small_addr = addr(small);
  }  // small goes first (reverse order), back to the system; big into the cache
  uint64_t again_addr = 0;
  {
    torch::Tensor again = torch::empty({512, 1024}, torch::kFloat64);  // 4 MiB again: the cached block
    again_addr = addr(again);
  }
  EXPECT_EQ(again_addr, big_addr);
  cpu_meter().release_cached();  // the cached block goes back: segment_free
  using A = mh::Action;
  expect_entries(mh::entries(), {{A::segment_alloc, big_addr, 4 * kMiB},
                                 {A::alloc, big_addr, 4 * kMiB},
                                 {A::segment_alloc, small_addr, 400},
                                 {A::alloc, small_addr, 400},
                                 {A::free_requested, small_addr, 400},
                                 {A::free_completed, small_addr, 400},
                                 {A::segment_free, small_addr, 400},
                                 {A::free_requested, big_addr, 4 * kMiB},
                                 {A::free_completed, big_addr, 4 * kMiB},
                                 {A::alloc, big_addr, 4 * kMiB},
                                 {A::free_requested, big_addr, 4 * kMiB},
                                 {A::free_completed, big_addr, 4 * kMiB},
                                 {A::segment_free, big_addr, 4 * kMiB}});
}

TEST_F(MemoryHistory, SizesAreRequestedBytesAndSegmentsTheBlocksCapacity) {
  mh::start(100);
  uint64_t a = 0;
  {
    torch::Tensor t = torch::empty({100000}, torch::kUInt8);  // 100000 B: a block of 102400 (4 KiB granules)
    a = addr(t);
  }
  using A = mh::Action;
  expect_entries(mh::entries(), {{A::segment_alloc, a, 102400},
                                 {A::alloc, a, 100000},
                                 {A::free_requested, a, 100000},
                                 {A::free_completed, a, 100000}});
}

// PyTorch's ring buffer: the newest max_entries events, oldest first, also across the wrap.
TEST_F(MemoryHistory, RingBufferKeepsTheNewestEntries) {
  for (size_t max_entries : {5u, 7u}) {
    mh::start(max_entries);
    std::vector<uint64_t> addrs;
    for (int64_t i = 1; i <= 10; ++i) {  // 5 events each: segment_alloc, alloc, 2 frees, segment_free
      torch::Tensor t = torch::empty({16 * i}, torch::kFloat32);  // 64 i bytes, never cached
      addrs.push_back(addr(t));
    }
    using A = mh::Action;
    std::vector<Expected> last_two = {{A::segment_alloc, addrs[8], 576}, {A::alloc, addrs[8], 576},
                                      {A::free_requested, addrs[8], 576}, {A::free_completed, addrs[8], 576},
                                      {A::segment_free, addrs[8], 576}, {A::segment_alloc, addrs[9], 640},
                                      {A::alloc, addrs[9], 640}, {A::free_requested, addrs[9], 640},
                                      {A::free_completed, addrs[9], 640}, {A::segment_free, addrs[9], 640}};
    expect_entries(mh::entries(), std::vector<Expected>(last_two.end() - static_cast<std::ptrdiff_t>(max_entries),
                                                        last_two.end()));
    mh::clear();
    EXPECT_TRUE(mh::entries().empty()) << "clear() drops the events";
    EXPECT_TRUE(mh::recording()) << "and keeps recording";
  }
}

TEST_F(MemoryHistory, OffRecordsNothing) {
  mh::start(10);
  mh::stop();
  EXPECT_FALSE(mh::recording());
  { torch::Tensor t = torch::empty({1024, 1024}); }
  EXPECT_TRUE(mh::entries().empty());
  EXPECT_THROW(mh::snapshot(), Error);
  EXPECT_THROW(mh::start(0), ConfigError);
}

// The segments are the blocks when the snapshot is taken: live ones active (with the bytes asked
// for), cached ones inactive, the cache's blocks from before recording included; the live bytes of
// blocks allocated before recording are one segment, so the active bytes are the meter's.
TEST_F(MemoryHistory, SnapshotSegmentsAreTheLiveAndCachedBlocks) {
  uint64_t cached_before = 0;
  {
    torch::Tensor t = torch::empty({64 * 1024}, torch::kFloat32);  // 256 KiB, cached before recording
    cached_before = addr(t);
  }
  torch::Tensor earlier = torch::empty({300}, torch::kFloat32);  // live from before recording
  torch::Tensor freed_earlier = torch::empty({500}, torch::kFloat32);
  const uint64_t freed_earlier_addr = addr(freed_earlier);
  mh::start(100);
  freed_earlier = torch::Tensor();  // a block recording never saw allocated: its free is recorded
  torch::Tensor live = torch::empty({256, 1024}, torch::kFloat32);  // 1 MiB
  uint64_t cached = 0;
  {
    torch::Tensor t = torch::empty({128, 1024}, torch::kFloat32);  // 512 KiB, then cached
    cached = addr(t);
  }
  const c10::IValue snap = mh::snapshot();
  const int64_t allocated = cpu_meter().snapshot().allocated;

  auto s = find_segment(snap, addr(live));
  EXPECT_EQ(s.at("device").toInt(), 0);
  EXPECT_EQ(s.at("total_size").toInt(), kMiB);
  EXPECT_EQ(s.at("allocated_size").toInt(), kMiB);
  EXPECT_EQ(s.at("requested_size").toInt(), kMiB);
  EXPECT_EQ(s.at("stream").toInt(), 0);
  auto blocks = s.at("blocks").toList();
  ASSERT_EQ(blocks.size(), 1u);
  auto b = blocks.get(0).toGenericDict();
  EXPECT_EQ(b.at("state").toStringRef(), "active_allocated");
  EXPECT_EQ(b.at("size").toInt(), kMiB);
  EXPECT_EQ(b.at("requested_size").toInt(), kMiB);
  EXPECT_EQ(static_cast<uint64_t>(b.at("address").toInt()), addr(live));

  for (uint64_t a : {cached, cached_before}) {
    auto c = find_segment(snap, a);
    EXPECT_EQ(c.at("allocated_size").toInt(), 0);
    auto cb = c.at("blocks").toList().get(0).toGenericDict();
    EXPECT_EQ(cb.at("state").toStringRef(), "inactive");
    EXPECT_EQ(cb.at("size").toInt(), c.at("total_size").toInt());
  }
  EXPECT_EQ(find_segment(snap, cached).at("total_size").toInt(), 512 * 1024);
  EXPECT_EQ(find_segment(snap, cached_before).at("total_size").toInt(), 256 * 1024);

  int64_t active = 0;
  for (const c10::IValue& seg : snap.toGenericDict().at("segments").toListRef()) {
    for (const c10::IValue& blk : seg.toGenericDict().at("blocks").toListRef()) {
      auto d = blk.toGenericDict();
      if (d.at("state").toStringRef() == "active_allocated") active += d.at("requested_size").toInt();
    }
  }
  EXPECT_EQ(active, allocated) << "the snapshot's active bytes are the meter's allocated bytes";
  auto before = find_segment(snap, uint64_t{1} << 47);
  EXPECT_EQ(before.at("requested_size").toInt(), allocated - kMiB) << "live blocks from before recording";
  EXPECT_GE(before.at("requested_size").toInt(), 1200);

  const auto traces = snap.toGenericDict().at("device_traces").toList();
  ASSERT_EQ(traces.size(), 1u);
  const auto trace = traces.get(0).toList();
  const auto entries = mh::entries();
  ASSERT_EQ(trace.size(), entries.size());
  auto first = trace.get(0).toGenericDict();
  EXPECT_EQ(first.at("action").toStringRef(), "free_requested");
  EXPECT_EQ(static_cast<uint64_t>(first.at("addr").toInt()), freed_earlier_addr);
  EXPECT_EQ(first.at("size").toInt(), 2000);
  EXPECT_EQ(first.at("stream").toInt(), 0);
  EXPECT_EQ(first.at("time_us").toInt(), entries[0].time_us);
  EXPECT_TRUE(first.at("frames").toList().empty());

  // LibTorch reads its own pickle back as the same dictionaries.
  const std::string bytes = mh::snapshot_pickle();
  ASSERT_GT(bytes.size(), 2u);
  EXPECT_EQ(bytes.substr(0, 2), std::string("\x80\x02", 2)) << "pickle protocol 2";
  EXPECT_EQ(bytes.back(), '.') << "STOP";
  const c10::IValue back = torch::jit::unpickle(bytes.data(), bytes.size());
  EXPECT_EQ(back.toGenericDict().at("segments").toList().size(), snap.toGenericDict().at("segments").toList().size());
  auto back_first = back.toGenericDict().at("device_traces").toList().get(0).toList().get(0).toGenericDict();
  EXPECT_EQ(back_first.at("action").toStringRef(), "free_requested");
  EXPECT_EQ(back_first.at("addr").toInt(), first.at("addr").toInt());
}

TEST_F(MemoryHistory, ContextLabelsEventsAndBlocks) {
  mh::start(100);
  mh::set_context({"wxtrain profile step", 3, "optimizer"});
  torch::Tensor t = torch::empty({1000}, torch::kFloat32);
  mh::set_context({});
  { torch::Tensor u = torch::empty({10}, torch::kFloat32); }
  const auto entries = mh::entries();
  ASSERT_EQ(entries.size(), 7u);  // t: segment_alloc, alloc; u: those, two frees, segment_free
  EXPECT_EQ(entries[1].context, 1u);
  EXPECT_EQ(entries[3].context, 0u);
  const auto labels = mh::contexts();
  ASSERT_EQ(labels.size(), 2u);
  EXPECT_EQ(labels[1].name, "optimizer");

  const c10::IValue snap = mh::snapshot();
  auto trace = snap.toGenericDict().at("device_traces").toList().get(0).toList();
  auto frames = trace.get(1).toGenericDict().at("frames").toList();
  ASSERT_EQ(frames.size(), 1u);
  auto frame = frames.get(0).toGenericDict();
  EXPECT_EQ(frame.at("filename").toStringRef(), "wxtrain profile step");
  EXPECT_EQ(frame.at("line").toInt(), 3);
  EXPECT_EQ(frame.at("name").toStringRef(), "optimizer");
  auto block = find_segment(snap, addr(t)).at("blocks").toList().get(0).toGenericDict();
  EXPECT_EQ(block.at("frames").toList().size(), 1u) << "a block keeps the label it was allocated under";
}

TEST_F(MemoryHistory, RecordsBudgetOutOfMemory) {
  MemoryMeter& meter = cpu_meter();
  const int64_t before = meter.snapshot().allocated;
  meter.set_limit(before + 4 * kMiB);
  mh::start(100);
  EXPECT_THROW(torch::empty({2 * kMiB}, torch::kFloat32), c10::OutOfMemoryError);  // 8 MiB
  const auto entries = mh::entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_STREQ(mh::to_string(entries[0].action), "oom");
  EXPECT_EQ(entries[0].size, 8 * kMiB);
  EXPECT_EQ(static_cast<int64_t>(entries[0].addr), 4 * kMiB) << "device_free: what the budget had left";
  auto oom = mh::snapshot().toGenericDict().at("device_traces").toList().get(0).toList().get(0).toGenericDict();
  EXPECT_EQ(oom.at("device_free").toInt(), 4 * kMiB);
  EXPECT_FALSE(oom.contains("addr"));
}

}  // namespace
