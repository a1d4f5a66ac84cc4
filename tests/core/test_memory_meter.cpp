#include <gtest/gtest.h>

#include <torch/torch.h>

#include "core/memory_meter.h"

using namespace wxtrain;

namespace {
MemoryMeter& cpu_meter() { return memory_meter(torch::Device(torch::kCPU)); }
}  // namespace

TEST(CpuMemoryMeter, CountsLiveTensorBytesAndPeak) {
  MemoryMeter& meter = cpu_meter();
  const int64_t before = meter.snapshot().allocated;
  PeakScope scope(meter);
  {
    torch::Tensor a = torch::empty({1024, 1024}, torch::kFloat32);  // 4 MiB
    EXPECT_EQ(meter.snapshot().allocated - before, 4 << 20);
    torch::Tensor b = torch::empty({512, 1024}, torch::kFloat64);   // 4 MiB
    EXPECT_EQ(meter.snapshot().allocated - before, 8 << 20);
  }
  EXPECT_EQ(meter.snapshot().allocated, before);
  EXPECT_EQ(scope.peak_increase(), 8 << 20);
}

// Freed large blocks stay with the allocator for the next allocation of their size (no fresh
// pages to fault in), show in `reserved`, and go back to the system on release_cached().
TEST(CpuMemoryMeter, CachesFreedBlocksForReuseAndReleasesThem) {
  MemoryMeter& meter = cpu_meter();
  meter.release_cached();
  const MemorySnapshot start = meter.snapshot();
  ASSERT_EQ(start.reserved, start.allocated);
  void* first = nullptr;
  {
    torch::Tensor a = torch::empty({1024, 1024}, torch::kFloat32);  // 4 MiB
    first = a.data_ptr();
  }
  EXPECT_EQ(meter.snapshot().allocated, start.allocated);
  EXPECT_EQ(meter.snapshot().reserved - meter.snapshot().allocated, 4 << 20);  // cached, not freed
  {
    torch::Tensor b = torch::empty({512, 1024}, torch::kFloat64);  // 4 MiB again: the same block
    EXPECT_EQ(b.data_ptr(), first);
    EXPECT_EQ(meter.snapshot().reserved, meter.snapshot().allocated);
    EXPECT_EQ(meter.snapshot().allocated - start.allocated, 4 << 20);
  }
  torch::Tensor small = torch::empty({100}, torch::kFloat32);  // small blocks go straight to malloc
  EXPECT_EQ(meter.snapshot().reserved - meter.snapshot().allocated, 4 << 20);
  meter.release_cached();
  EXPECT_EQ(meter.snapshot().reserved, meter.snapshot().allocated);
}

TEST(CpuMemoryMeter, BudgetRaisesOutOfMemoryAndRecovers) {
  MemoryMeter& meter = cpu_meter();
  const int64_t before = meter.snapshot().allocated;
  meter.set_limit(before + (16 << 20));
  torch::Tensor small = torch::empty({1 << 20}, torch::kFloat32);  // 4 MiB: fits
  bool raised = false;
  try {
    torch::Tensor big = torch::empty({8 << 20}, torch::kFloat32);  // 32 MiB: over budget
  } catch (const c10::OutOfMemoryError& e) {
    raised = true;
    EXPECT_NE(std::string(e.what()).find("CPU memory budget exceeded"), std::string::npos);
  }
  EXPECT_TRUE(raised);
  // The failed allocation is not counted and the budget still lets small work through.
  EXPECT_EQ(meter.snapshot().allocated - before, 4 << 20);
  meter.set_limit(0);
  torch::Tensor big = torch::empty({8 << 20}, torch::kFloat32);
  EXPECT_EQ(meter.snapshot().allocated - before, 36 << 20);
}

TEST(CpuMemoryMeter, TracksAutogradAndThreads) {
  MemoryMeter& meter = cpu_meter();
  const int64_t before = meter.snapshot().allocated;
  {
    auto w = torch::randn({256, 256}, torch::requires_grad());
    auto y = torch::matmul(torch::randn({64, 256}), w).relu().sum();
    y.backward();
    EXPECT_GE(meter.snapshot().allocated - before, 2 * 256 * 256 * 4);  // w and its grad
  }
  EXPECT_EQ(meter.snapshot().allocated, before);
  EXPECT_GT(meter.capacity(), int64_t{1} << 30);
}
