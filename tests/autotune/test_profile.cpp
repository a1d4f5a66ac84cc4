// profile: per-step records from the real step, the sampled timeline with its phase boundary,
// the CSV, and the threshold verdict and size parsing that decide the exit code.
#include <gtest/gtest.h>

#include <sstream>

#include "autotune/memory_profile.h"
#include "core/error.h"
#include "core/memory_meter.h"
#include "tiny_config.h"

namespace wxtrain::autotune {
namespace {

const torch::Device kCpu(torch::kCPU);
const bool kMeterInstalled = (memory_meter(kCpu), true);

TEST(Profile, RecordsEveryStepAndATimelineWithPhases) {
  RunConfig config = testing::tiny_config("vit");
  config.train.batch_size = 6;
  ProfileOptions options;
  options.steps = 3;
  const int64_t before = memory_meter(kCpu).snapshot().allocated;
  const ProfileReport r = profile_memory(config, kCpu, nullptr, options);
  ASSERT_EQ(r.steps.size(), 3u);
  EXPECT_EQ(r.batch, 6);
  EXPECT_EQ(r.baseline, before);
  for (const auto& s : r.steps) {
    EXPECT_GT(s.peak_forward_backward, r.states) << "activations live during forward/backward";
    EXPECT_GE(s.peak(), s.allocated);
    EXPECT_GE(s.reserved, s.allocated);  // the CPU allocator caches freed blocks too
    EXPECT_GT(s.seconds, 0);
  }
  // Between steps only the states (and any lazily created optimizer state) remain: the same after
  // every step.
  EXPECT_GE(r.steady_allocated(), r.states);
  EXPECT_EQ(r.steps[0].allocated, r.steps[2].allocated);
  EXPECT_EQ(r.steady_allocated(), r.steps[2].allocated);
  EXPECT_EQ(r.peak(), std::max(r.peak_forward_backward(), r.peak_optimizer()));

  const StepTimeline& t = r.timeline;
  EXPECT_EQ(t.step, 3);
  ASSERT_GT(t.ms.size(), 3u);
  ASSERT_EQ(t.ms.size(), t.allocated.size());
  EXPECT_GT(t.optimizer_start_ms, 0);
  EXPECT_LT(t.optimizer_start_ms, t.end_ms);
  int64_t sampled_peak = 0;
  for (int64_t a : t.allocated) sampled_peak = std::max(sampled_peak, a);
  EXPECT_LE(sampled_peak, r.steps[2].peak());
  EXPECT_GT(sampled_peak, r.steps[2].allocated) << "the samples should catch activations above the resting level";
  EXPECT_EQ(memory_meter(kCpu).snapshot().allocated, before) << "profile released its model";

  const std::string csv = steps_csv(r);
  std::istringstream lines(csv);
  std::string header, line;
  std::getline(lines, header);
  EXPECT_EQ(header, "timestamp,step,allocated_GB,reserved_GB,peak_GB");
  int rows = 0;
  while (std::getline(lines, line)) ++rows;
  EXPECT_EQ(rows, 3);
}

TEST(Profile, RejectsNonPositiveSteps) {
  ProfileOptions options;
  options.steps = 0;
  EXPECT_THROW(profile_memory(testing::tiny_config("unet"), kCpu, nullptr, options), ConfigError);
}

TEST(Threshold, PassAtOrBelowFailAbove) {
  const int64_t gib = int64_t(1) << 30;
  ThresholdVerdict below = check_threshold(gib, 2 * gib);
  EXPECT_TRUE(below.pass);
  EXPECT_EQ(below.headroom, gib);
  EXPECT_EQ(below.message, "PASS: peak 1.00 GiB <= threshold 2.00 GiB (1.00 GiB, 50.0% headroom)");
  EXPECT_TRUE(check_threshold(2 * gib, 2 * gib).pass);
  ThresholdVerdict above = check_threshold(3 * gib, 2 * gib);
  EXPECT_FALSE(above.pass);
  EXPECT_EQ(above.headroom, -gib);
  EXPECT_EQ(above.message, "FAIL: peak 3.00 GiB > threshold 2.00 GiB (over by 1.00 GiB, 50.0% of the threshold)");
}

TEST(Threshold, SizeArgumentsAreParsedOrNamed) {
  EXPECT_EQ(parse_size_argument("--threshold", "22GiB"), int64_t(22) << 30);
  EXPECT_EQ(parse_size_argument("--threshold", "1KiB"), 1024);
  for (const std::string bad : {"22 GiBs", "lots", "", "-1GiB", "0"}) {
    try {
      parse_size_argument("--threshold", bad);
      FAIL() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--threshold"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("expected a positive size"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace wxtrain::autotune
