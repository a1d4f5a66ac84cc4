// Ensembles in tune-batch and profile: `--search members` finds the most members per sample that
// train within the budget at the run's micro-batch, exactly as an exhaustive scan of real steps
// does, in at most 4 probes when the estimate is close; profile's CSV has the per-member columns.
// Budgets emulate a device for the counted tensors alone (TuneOptions::cpu_overhead off), as in
// test_tuner.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "autotune/batch_search.h"
#include "autotune/memory_profile.h"
#include "core/error.h"
#include "core/memory_meter.h"
#include "distributed/communicator.h"
#include "tiny_config.h"

namespace wxtrain::autotune {
namespace {

const torch::Device kCpu(torch::kCPU);
const bool kMeterInstalled = (memory_meter(kCpu), true);

std::shared_ptr<distributed::Communicator> local_comm(const RunConfig& c) {
  return distributed::make_communicator(distributed::World{}, c.distributed, kCpu);
}

// The tiny zoo model as an ensemble: `members` per sample, 2 noise channels, micro-batch `batch`.
RunConfig ensemble(const std::string& model, int64_t members, int64_t batch) {
  RunConfig c = testing::tiny_config(model);
  c.train.ensemble_members = members;
  c.train.noise_channels = 2;
  c.train.batch_size = batch;
  return c;
}

// A budget whose target lies halfway between the peaks at `members` and `members + 1` (by the line
// through two unlimited probes; the scan decides the real answer).
int64_t budget_near(const RunConfig& config, int64_t members) {
  BatchProber unlimited(config, models::model_shape(config), kCpu, local_comm(config), 0, INT64_MAX);
  const Probe p2 = unlimited.probe(config.train.batch_size, 2), p4 = unlimited.probe(config.train.batch_size, 4);
  const double slope = static_cast<double>(p4.peak - p2.peak) / 2.0;
  const double target = static_cast<double>(p2.peak) + slope * (static_cast<double>(members) - 1.5);
  return static_cast<int64_t>(target / (1.0 - config.memory.margin));
}

struct Scan {
  int64_t answer = 0;  // largest M with every member count from 2 up to M passing (0: not even 2)
  int64_t probes = 0;
  bool monotone = true;
};

Scan scan_members(const RunConfig& config, int64_t budget) {
  const int64_t target = static_cast<int64_t>(std::floor((1.0 - config.memory.margin) * static_cast<double>(budget)));
  BatchProber probe(config, models::model_shape(config), kCpu, local_comm(config), budget, target);
  Scan s;
  int64_t first_fail = 0;
  for (int64_t m = 2; m <= 64; ++m) {
    const Probe p = probe.probe(config.train.batch_size, m);
    ++s.probes;
    if (!first_fail && p.passed) s.answer = m;
    if (!first_fail && !p.passed) first_fail = m;
    if (first_fail && p.passed) s.monotone = false;
    if (first_fail && m >= first_fail + 1) break;
  }
  return s;
}

struct MembersCase {
  std::string model;
  std::vector<int64_t> near;  // budgets between these members and one more
};

class MembersSearchMatchesScan : public ::testing::TestWithParam<MembersCase> {};

// Each probe and scan step is a real training step of batch x members rows: the U-Net at two
// budgets, the ViT (slower per row) at one.
TEST_P(MembersSearchMatchesScan, AtSeveralBudgets) {
  const std::string model = GetParam().model;
  RunConfig config = ensemble(model, 4, 1);  // batch 1 (as AIFS-ENS trains): rows = members
  int close_estimates = 0;
  for (int64_t near : GetParam().near) {
    const int64_t budget = budget_near(config, near);
    config.memory.limit = budget;
    const Scan scan = scan_members(config, budget);
    ASSERT_TRUE(scan.monotone) << model << ": memory is not monotone in the members at budget " << budget;
    ASSERT_GE(scan.answer, 2);

    TuneOptions options;
    options.suggestions = false;
    options.cpu_overhead = false;
    options.search = SearchDimension::kMembers;
    const TuneReport r = tune_batch_report(config, kCpu, local_comm(config), options);
    EXPECT_EQ(r.search, SearchDimension::kMembers);
    EXPECT_EQ(r.members, scan.answer) << model << " budget " << budget << " (estimate " << r.estimated_members << ")";
    EXPECT_EQ(r.batch, 1) << "the batch stays the run's";
    for (const auto& p : r.probes) {
      EXPECT_EQ(p.batch, 1);
      EXPECT_GE(p.members, 2);
      EXPECT_EQ(p.leaked, 0) << "probe at " << p.members << " members";
    }
    const double off = std::abs(static_cast<double>(r.estimated_members - scan.answer));
    if (off <= std::max(1.0, 0.1 * static_cast<double>(scan.answer))) {
      ++close_estimates;
      EXPECT_LE(r.probes.size(), 4u) << model << " budget " << budget << ": estimate " << r.estimated_members
                                     << " answer " << scan.answer;
    }
    std::printf("[ %s ] budget %.2f MiB: members %lld (scan: %lld probes), estimate %lld, tuner %zu probes\n",
                model.c_str(), budget / 1048576.0, static_cast<long long>(scan.answer),
                static_cast<long long>(scan.probes), static_cast<long long>(r.estimated_members), r.probes.size());
  }
  EXPECT_GE(close_estimates, 1) << model;
}

INSTANTIATE_TEST_SUITE_P(Zoo, MembersSearchMatchesScan,
                         ::testing::Values(MembersCase{"unet", {3, 7}}, MembersCase{"vit", {5}}),
                         [](const ::testing::TestParamInfo<MembersCase>& info) { return info.param.model; });

TEST(MembersSearch, ADeterministicRunIsRefusedSayingWhy) {
  RunConfig config = testing::tiny_config("unet");
  config.memory.limit = int64_t{64} << 20;
  TuneOptions options;
  options.suggestions = false;
  options.search = SearchDimension::kMembers;
  try {
    tune_batch_report(config, kCpu, local_comm(config), options);
    FAIL() << "searched the members of a deterministic run";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.ensemble_members = 1"), std::string::npos) << e.what();
  }
}

// An ensemble's profile CSV: the members and each member's share of the peak and of the
// activations; with a threshold, each step judged PASS or FAIL.
TEST(ProfileMembers, CsvHasPerMemberColumnsAndAVerdictPerStep) {
  const RunConfig config = ensemble("unet", 3, 2);
  ProfileOptions options;
  options.steps = 2;
  options.cpu_overhead = false;
  const ProfileReport r = profile_memory(config, kCpu, nullptr, options);
  EXPECT_EQ(r.members, 3);
  const int64_t threshold = int64_t{1} << 40;
  std::istringstream lines(steps_csv(r, threshold));
  std::string header, line;
  std::getline(lines, header);
  EXPECT_EQ(header,
            "timestamp,step,allocated_GB,reserved_GB,peak_GB,members,peak_per_member_GB,activations_per_member_GB,"
            "judged_peak_GB,threshold_GB,result");
  int rows = 0;
  while (std::getline(lines, line)) {
    std::vector<std::string> cells;
    std::istringstream cols(line);
    for (std::string c; std::getline(cols, c, ',');) cells.push_back(c);
    ASSERT_EQ(cells.size(), 11u) << line;
    const auto& s = r.steps[static_cast<size_t>(rows)];
    EXPECT_EQ(cells[5], "3");
    EXPECT_NEAR(std::stod(cells[6]), static_cast<double>(s.peak()) / 3 / 1e9, 1e-6);
    EXPECT_NEAR(std::stod(cells[7]), static_cast<double>(s.peak() - s.allocated) / 3 / 1e9, 1e-6);
    EXPECT_EQ(cells[10], "PASS");
    ++rows;
  }
  EXPECT_EQ(rows, 2);
  // Under a threshold below the peak every step fails; without one the verdict columns are absent.
  EXPECT_NE(steps_csv(r, 1024).find(",FAIL\n"), std::string::npos);
  std::istringstream plain(steps_csv(r));
  std::getline(plain, header);
  EXPECT_EQ(header, "timestamp,step,allocated_GB,reserved_GB,peak_GB,members,peak_per_member_GB,activations_per_member_GB");
  // A deterministic run's CSV keeps its columns.
  ProfileReport deterministic = r;
  deterministic.members = 1;
  EXPECT_EQ(steps_csv(deterministic).substr(0, steps_csv(deterministic).find('\n')),
            "timestamp,step,allocated_GB,reserved_GB,peak_GB");
}

}  // namespace
}  // namespace wxtrain::autotune
