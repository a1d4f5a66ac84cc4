// The tuner on real training steps under the counting allocator's budget: its answer equals an
// exhaustive scan's for unet, vit and gnn at several budgets, multiple_of is honoured, a close
// estimate means at most 4 probes, and probes leave no memory behind. The budgets here emulate a
// device of a few MiB for the counted tensors alone, so these tuners run with
// TuneOptions::cpu_overhead off (the scans' probers count the tensors alone too); the last tests
// check what the CPU overhead (estimator/cpu_overhead.h) changes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "autotune/batch_search.h"
#include "core/error.h"
#include "core/memory_meter.h"
#include "distributed/communicator.h"
#include "tiny_config.h"

namespace wxtrain::autotune {
namespace {

const torch::Device kCpu(torch::kCPU);
MemoryMeter& meter() { return memory_meter(kCpu); }
// The counting allocator must be in place before any tensor exists.
const bool kMeterInstalled = (meter(), true);

std::shared_ptr<distributed::Communicator> local_comm(const RunConfig& c) {
  return distributed::make_communicator(distributed::World{}, c.distributed, kCpu);
}

int64_t target_of(int64_t budget, double margin) {
  return static_cast<int64_t>(std::floor((1.0 - margin) * static_cast<double>(budget)));
}

// A budget whose target sits halfway between the peaks at `batch` and `batch + 1`, from two
// probes and the line through them (the scan below decides the real answer).
int64_t budget_near(const RunConfig& config, int64_t batch) {
  const auto shape = models::model_shape(config);
  BatchProber unlimited(config, shape, kCpu, local_comm(config), 0, INT64_MAX);
  const Probe p1 = unlimited(1), p3 = unlimited(3);
  const double slope = static_cast<double>(p3.peak - p1.peak) / 2.0;
  const double target = static_cast<double>(p1.peak) + slope * (static_cast<double>(batch) - 0.5);
  return static_cast<int64_t>(target / (1.0 - config.memory.margin));
}

struct Scan {
  int64_t answer = 0;     // largest b with every batch up to b passing
  int64_t probes = 0;
  bool monotone = true;   // no pass after the first failure (checked a few batches beyond)
};

Scan exhaustive_scan(const RunConfig& config, int64_t budget, int64_t multiple_of = 1) {
  const auto shape = models::model_shape(config);
  BatchProber probe(config, shape, kCpu, local_comm(config), budget, target_of(budget, config.memory.margin));
  Scan s;
  int64_t first_fail = 0;
  for (int64_t b = multiple_of; b <= 4096; b += multiple_of) {
    const Probe p = probe(b);
    ++s.probes;
    if (!first_fail && p.passed) s.answer = b;
    if (!first_fail && !p.passed) first_fail = b;
    if (first_fail && p.passed) s.monotone = false;
    if (first_fail && b >= first_fail + 3 * multiple_of) break;
  }
  return s;
}

class TunerMatchesScan : public ::testing::TestWithParam<std::string> {};

TEST_P(TunerMatchesScan, AtSeveralBudgets) {
  RunConfig config = testing::tiny_config(GetParam());
  int close_estimates = 0;
  for (int64_t near : {3, 9, 17}) {
    const int64_t budget = budget_near(config, near);
    config.memory.limit = budget;
    const Scan scan = exhaustive_scan(config, budget);
    ASSERT_TRUE(scan.monotone) << GetParam() << ": memory is not monotone in the batch size at budget " << budget;
    ASSERT_GT(scan.answer, 0);

    TuneOptions options;
    options.suggestions = false;
    options.cpu_overhead = false;
    const TuneReport r = tune_batch_report(config, kCpu, local_comm(config), options);
    EXPECT_EQ(r.batch, scan.answer) << GetParam() << " budget " << budget << " (estimate " << r.estimated_batch << ")";
    EXPECT_EQ(r.budget, budget);
    EXPECT_EQ(r.target, target_of(budget, 0.1));
    EXPECT_EQ(r.effective_batch, r.batch);
    for (const auto& p : r.probes) EXPECT_EQ(p.leaked, 0) << "probe at " << p.batch;
    const bool close = std::abs(static_cast<double>(r.estimated_batch - scan.answer)) <= 0.1 * static_cast<double>(scan.answer);
    if (close) {
      ++close_estimates;
      EXPECT_LE(r.probes.size(), 4u) << GetParam() << " budget " << budget << ": estimate " << r.estimated_batch
                                     << " answer " << scan.answer;
    }
    std::printf("[ %s ] budget %.1f MiB: answer %lld (scan %lld probes), estimate %lld, tuner %zu probes\n",
                GetParam().c_str(), budget / 1048576.0, static_cast<long long>(scan.answer),
                static_cast<long long>(scan.probes), static_cast<long long>(r.estimated_batch), r.probes.size());
  }
  // The estimator traces the same step, so on these grids it is close at least once per model.
  EXPECT_GE(close_estimates, 1) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Zoo, TunerMatchesScan, ::testing::Values("unet", "vit", "gnn"));

// Under distributed.model_parallel = 2 in one process every probe is rank 0's step of a group of
// two (its band of 17 of the 33 rows, the halos over the stand-in group): the tuner's answer is the
// exhaustive scan's, and above what one process holding the whole grid fits in the same budget.
TEST(Tuner, ModelParallelTwoMatchesScan) {
  RunConfig whole = testing::tiny_config("gnn");
  const int64_t budget = budget_near(whole, 6);
  whole.memory.limit = budget;
  RunConfig config = whole;
  config.distributed.model_parallel = 2;
  const Scan scan = exhaustive_scan(config, budget);
  ASSERT_TRUE(scan.monotone) << "memory is not monotone in the batch size at budget " << budget;
  TuneOptions options;
  options.suggestions = false;
  options.cpu_overhead = false;
  const TuneReport r = tune_batch_report(config, kCpu, local_comm(config), options);
  EXPECT_EQ(r.batch, scan.answer) << "budget " << budget << " (estimate " << r.estimated_batch << ")";
  EXPECT_EQ(r.effective_batch, r.batch) << "the two ranks of a group share their samples: one group";
  for (const auto& p : r.probes) EXPECT_EQ(p.leaked, 0) << "probe at " << p.batch;
  const TuneReport one = tune_batch_report(whole, kCpu, local_comm(whole), options);
  std::printf("[ gnn ] budget %.1f MiB: model_parallel 2 answer %lld (scan %lld probes, estimate %lld, tuner %zu "
              "probes); one process %lld\n",
              budget / 1048576.0, static_cast<long long>(scan.answer), static_cast<long long>(scan.probes),
              static_cast<long long>(r.estimated_batch), r.probes.size(), static_cast<long long>(one.batch));
  EXPECT_GT(r.batch, one.batch) << "a band of the grid holds no more samples than the whole grid";
}

TEST(Tuner, HonoursMultipleOf) {
  RunConfig config = testing::tiny_config("unet");
  const int64_t budget = budget_near(config, 14);
  config.memory.limit = budget;
  config.memory.multiple_of = 4;
  const Scan scan = exhaustive_scan(config, budget, 4);
  TuneOptions options;
  options.suggestions = false;
  options.cpu_overhead = false;
  const TuneReport r = tune_batch_report(config, kCpu, local_comm(config), options);
  EXPECT_EQ(r.batch, scan.answer);
  EXPECT_EQ(r.batch % 4, 0);
  for (const auto& p : r.probes) EXPECT_EQ(p.batch % 4, 0);
}

TEST(Tuner, HonoursMaxBatchAndReportsEffectiveBatch) {
  RunConfig config = testing::tiny_config("gnn");
  config.memory.limit = budget_near(config, 40);
  config.memory.max_batch = 5;
  config.train.accumulation = 3;
  TuneOptions options;
  options.suggestions = false;
  options.cpu_overhead = false;
  const TuneReport r = tune_batch_report(config, kCpu, local_comm(config), options);
  EXPECT_EQ(r.batch, 5);
  EXPECT_EQ(r.effective_batch, 15);
  for (const auto& p : r.probes) EXPECT_LE(p.batch, 5);
}

TEST(Tuner, SuggestsWhatWouldAllowMore) {
  RunConfig config = testing::tiny_config("unet");
  config.memory.limit = budget_near(config, 8);
  TuneOptions options;
  options.cpu_overhead = false;
  const TuneReport r = tune_batch_report(config, kCpu, local_comm(config), options);
  ASSERT_EQ(r.suggestions.size(), 2u);  // checkpointing and bf16; ZeRO needs more than one rank
  EXPECT_EQ(r.suggestions[0].change, "train.checkpointing = true");
  EXPECT_GT(r.suggestions[0].max_batch, r.estimated_batch);
  EXPECT_EQ(r.suggestions[1].change, "train.precision = \"bf16\"");
  EXPECT_GE(r.suggestions[1].max_batch, r.estimated_batch);
  std::printf("[ suggest ] estimated %lld; checkpointing: %lld; bf16: %lld\n", static_cast<long long>(r.estimated_batch),
              static_cast<long long>(r.suggestions[0].max_batch), static_cast<long long>(r.suggestions[1].max_batch));
}

TEST(Tuner, NothingFitsIsAnErrorThatSaysWhatToTry) {
  RunConfig config = testing::tiny_config("vit");
  const auto shape = models::model_shape(config);
  BatchProber unlimited(config, shape, kCpu, local_comm(config), 0, INT64_MAX);
  const int64_t before = meter().snapshot().allocated;
  const Probe p1 = unlimited(1);
  config.memory.limit = (before + (p1.peak - before) / 2) * 10 / 9;  // target halfway to the peak at batch 1
  try {
    TuneOptions options;
    options.cpu_overhead = false;
    tune_batch_report(config, kCpu, local_comm(config), options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("even a micro-batch of 1 does not fit"), std::string::npos) << what;
    EXPECT_NE(what.find("checkpointing"), std::string::npos) << what;
  }
}

TEST(Tuner, TwentyProbesLeaveNoMemoryBehind) {
  for (const std::string model : {"unet", "vit", "gnn"}) {
    RunConfig config = testing::tiny_config(model, model == "unet" ? "bf16-mixed" : "fp32");
    const int64_t budget = budget_near(config, 6);
    const auto shape = models::model_shape(config);
    BatchProber probe(config, shape, kCpu, local_comm(config), budget, target_of(budget, 0.1));
    meter().release_cached();
    const int64_t start = meter().snapshot().allocated;
    int ooms = 0, passes = 0;
    for (int i = 0; i < 20; ++i) {
      const int64_t b = 1 + (i * 7) % 19;  // passes, margin failures and OOMs mixed
      const Probe p = probe(b);
      ooms += p.oom;
      passes += p.passed;
      EXPECT_EQ(p.leaked, 0) << model << " probe " << i << " at batch " << b;
      ASSERT_EQ(meter().snapshot().allocated, start) << model << " after probe " << i << " at batch " << b;
    }
    EXPECT_GT(ooms, 0) << model;
    EXPECT_GT(passes, 0) << model;
    EXPECT_EQ(meter().limit(), 0) << "the probe's budget must not outlive it";
  }
}

// With the CPU overhead a probe's allowance is the budget less it: the meter's limit is lowered by
// the overhead at that batch, and a probe passes only when peak + overhead is under the target.
TEST(Tuner, CpuOverheadIsCountedAgainstTheBudget) {
  RunConfig config = testing::tiny_config("unet");
  const int64_t budget = budget_near(config, 12);
  const auto shape = models::model_shape(config);
  BatchProber plain(config, shape, kCpu, local_comm(config), budget, target_of(budget, 0.1));
  BatchProber with(config, shape, kCpu, local_comm(config), budget, target_of(budget, 0.1));
  const Probe p6 = plain(6);
  ASSERT_TRUE(p6.passed);
  // An overhead that leaves batch 6 just short of the target.
  const int64_t room = target_of(budget, 0.1) - p6.peak;
  with.set_overhead({static_cast<double>(room) - 6.0 * 64, 64});  // 64 bytes per sample
  const Probe q6 = with(6);
  EXPECT_EQ(q6.overhead, room);
  EXPECT_EQ(q6.peak, p6.peak);
  EXPECT_TRUE(q6.passed) << "peak + overhead equals the target";
  const Probe q7 = with(7);
  EXPECT_EQ(q7.overhead, room + 64);
  EXPECT_FALSE(q7.passed);
  EXPECT_EQ(q7.passed, q7.need() <= target_of(budget, 0.1));
}

// The process's own resident set outside the allocator (hundreds of MiB of LibTorch) does not fit
// a 64 MiB budget: the tuner says so before probing, naming it.
TEST(Tuner, CpuOverheadAboveTheBudgetIsAnErrorThatNamesIt) {
  RunConfig config = testing::tiny_config("unet");
  config.memory.limit = 64LL << 20;
  try {
    tune_batch_report(config, kCpu, local_comm(config));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("outside the allocator"), std::string::npos) << what;
    EXPECT_NE(what.find("raise memory.limit"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace wxtrain::autotune
