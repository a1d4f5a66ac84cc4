// The CPU overhead model (estimator/cpu_overhead.h): a fixed part measured in the process and a
// per-sample share of the counted growth, and how Estimate adds it to the CPU figures without
// touching the counted ones (breakdown() stays what the counting allocator sees, which
// test_estimate.cpp checks exactly against the meter).
#include <gtest/gtest.h>

#include "core/memory_meter.h"
#include "estimator/cpu_overhead.h"
#include "estimator/estimate.h"

using namespace wxtrain::estimator;

namespace {

constexpr double MiB = 1024.0 * 1024.0;

// An estimate built by hand: 100 MiB of states, 2 MiB of activations per sample above 1 MiB.
Estimate hand_made(double process_resident) {
  Estimate e;
  e.states.params = 40 * MiB;
  e.states.grads = 20 * MiB;
  e.states.optimizer = 40 * MiB;
  e.activations.forward_backward = Line{1 * MiB, 2 * MiB};
  e.activations.optimizer = Line{0, 0};
  e.process_resident = process_resident;
  return e;
}

}  // namespace

TEST(CpuOverhead, FixedPartIsTheMeasuredResidentSetPerSamplePartAShareOfTheCountedSlope) {
  const CpuOverhead o = cpu_overhead(500 * MiB, 4 * MiB);
  EXPECT_DOUBLE_EQ(o.process, 500 * MiB);
  EXPECT_DOUBLE_EQ(o.per_sample, kUnseenPerSampleShare * 4 * MiB);
  EXPECT_DOUBLE_EQ(o.at(0), 500 * MiB);
  EXPECT_DOUBLE_EQ(o.at(10), 500 * MiB + 10 * kUnseenPerSampleShare * 4 * MiB);
  // A negative reading (the allocator's cache above the resident set) or slope adds nothing.
  const CpuOverhead none = cpu_overhead(-1, -1);
  EXPECT_EQ(none.process, 0);
  EXPECT_EQ(none.per_sample, 0);
}

TEST(CpuOverhead, EstimateAddsItAsASeparateLineAndKeepsTheCountedFigures) {
  const Estimate e = hand_made(500 * MiB);
  const Breakdown counted = e.breakdown(8, std::nullopt);
  const Breakdown cpu = e.cpu_breakdown(8);
  EXPECT_DOUBLE_EQ(counted.overhead, 0);
  EXPECT_DOUBLE_EQ(counted.total(), 100 * MiB + 17 * MiB);
  EXPECT_DOUBLE_EQ(cpu.allocated(), counted.allocated());
  EXPECT_DOUBLE_EQ(cpu.overhead, 500 * MiB + 8 * kUnseenPerSampleShare * 2 * MiB);
  EXPECT_DOUBLE_EQ(cpu.total(), counted.total() + cpu.overhead);
}

TEST(CpuOverhead, MaxBatchLeavesRoomForIt) {
  const Estimate e = hand_made(500 * MiB);
  // Counted alone, 1 GiB holds (1024 - 100 - 1) / 2 = 461 samples.
  EXPECT_EQ(e.max_batch(1024 * MiB, std::nullopt), 461);
  EXPECT_EQ(e.cpu_max_batch(1024 * MiB, CpuOverhead{}), 461);
  // With 500 MiB outside the allocator and 3% of 2 MiB per sample: 423 / 2.06 = 205.3.
  EXPECT_EQ(e.cpu_max_batch(1024 * MiB, e.cpu_overhead()), 205);
  // Less room than the fixed part: nothing fits.
  EXPECT_EQ(e.cpu_max_batch(400 * MiB, e.cpu_overhead()), 0);
}

TEST(CpuOverhead, ProcessResidentOutsideTheAllocatorIsMeasured) {
  wxtrain::memory_meter(c10::Device(c10::kCPU));  // the counting allocator, as the CLI installs it
  const double resident = process_resident_outside_allocator();
  // A test process holding LibTorch holds tens of MiB of its pages at least, and less than 64 GiB.
  EXPECT_GT(resident, 10 * MiB);
  EXPECT_LT(resident, 64.0 * 1024 * MiB);
}
