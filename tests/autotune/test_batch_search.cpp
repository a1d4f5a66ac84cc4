// The search alone, on modelled memory curves: exact answers for linear, curved and stepped
// memory with good and bad estimates, multiple_of and max_batch, the probe count when the
// estimate is close, and agreement with the doubling-then-bisect search.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "autotune/batch_search.h"
#include "core/error.h"

namespace wxtrain::autotune {
namespace {

// A device of `budget` bytes whose step peaks at memory(b); allocations past the budget fail with
// the budget as the last thing seen (as the counting allocator reports them).
struct ModelDevice {
  std::function<double(int64_t)> memory;
  int64_t budget = 0;
  int64_t target = 0;
  int probes = 0;
  Probe operator()(int64_t b) {
    ++probes;
    Probe p;
    p.batch = b;
    const double need = memory(b);
    p.oom = need > static_cast<double>(budget);
    p.peak = p.oom ? budget : static_cast<int64_t>(need);
    p.passed = !p.oom && p.peak <= target;
    return p;
  }
  // The answer by scanning every batch (memory need not be monotone here: the largest b whose
  // whole prefix passes, which is what any bracketing search can promise).
  int64_t scan(int64_t multiple_of, int64_t max_batch) {
    int64_t best = 0;
    for (int64_t b = multiple_of; b <= max_batch; b += multiple_of) {
      if (!(*this)(b).passed) break;
      best = b;
    }
    return best;
  }
};

ModelDevice linear(double fixed, double per_sample, int64_t budget, double margin = 0.1) {
  ModelDevice d;
  d.memory = [=](int64_t b) { return fixed + per_sample * static_cast<double>(b); };
  d.budget = budget;
  d.target = static_cast<int64_t>(std::floor((1 - margin) * static_cast<double>(budget)));
  return d;
}

SearchOptions options_for(const ModelDevice& d, int64_t start, double slope, int64_t multiple_of = 1,
                          int64_t max_batch = 4096) {
  SearchOptions o;
  o.target = d.target;
  o.budget = d.budget;
  o.start = start;
  o.slope = slope;
  o.multiple_of = multiple_of;
  o.max_batch = max_batch;
  return o;
}

TEST(SecantSearch, ExactOnLinearMemoryWithAccurateEstimateInAtMostFourProbes) {
  const double fixed = 300e6, per = 7.3e6;
  for (int64_t budget : {int64_t(400e6), int64_t(1e9), int64_t(2.5e9), int64_t(24e9)}) {
    ModelDevice d = linear(fixed, per, budget);
    const int64_t truth = d.scan(1, 4096);
    ASSERT_GT(truth, 0);
    // Estimates anywhere within 10% of the truth, slope off by up to 10%.
    for (double est_err : {-0.1, -0.05, 0.0, 0.05, 0.1})
      for (double slope_err : {-0.1, 0.0, 0.1}) {
        ModelDevice probe = d;
        probe.probes = 0;
        const int64_t start = static_cast<int64_t>(std::llround(truth * (1 + est_err)));
        SearchResult r = secant_search(options_for(d, start, per * (1 + slope_err)), std::ref(probe));
        EXPECT_EQ(r.batch, truth) << "budget " << budget << " start " << start;
        EXPECT_LE(r.probes.size(), 4u) << "budget " << budget << " start " << start << " slope x" << 1 + slope_err;
      }
  }
}

TEST(SecantSearch, ExactWithBadOrMissingEstimates) {
  ModelDevice d = linear(500e6, 3e6, int64_t(8e9));
  const int64_t truth = d.scan(1, 4096);
  for (int64_t start : {int64_t(0), int64_t(1), truth / 5, truth * 5, int64_t(4096)})
    for (double slope : {0.0, 3e5, 3e6, 3e7}) {
      ModelDevice probe = d;
      SearchResult r = secant_search(options_for(d, start, slope), std::ref(probe));
      EXPECT_EQ(r.batch, truth) << "start " << start << " slope " << slope;
      // Never worse than a bisection of the whole range plus a few secant steps.
      EXPECT_LE(r.probes.size(), 16u) << "start " << start << " slope " << slope;
    }
}

TEST(SecantSearch, ExactOnCurvedAndSteppedMemory) {
  std::vector<std::pair<std::string, std::function<double(int64_t)>>> curves = {
      {"quadratic", [](int64_t b) { return 1e8 + 2e6 * b + 4e4 * double(b) * b; }},
      {"sqrt", [](int64_t b) { return 1e8 + 5e7 * std::sqrt(double(b)); }},
      {"steps of 8", [](int64_t b) { return 2e8 + 4e7 * double((b + 7) / 8); }},
      {"flat then steep", [](int64_t b) { return b < 100 ? 1e8 + 1e3 * b : 1e8 + 1e7 * double(b - 100); }},
  };
  for (auto& [name, curve] : curves)
    for (int64_t budget : {int64_t(6e8), int64_t(2e9)})
      for (double slope : {0.0, 1e6, 1e7}) {
        ModelDevice d;
        d.memory = curve;
        d.budget = budget;
        d.target = static_cast<int64_t>(0.9 * budget);
        const int64_t truth = d.scan(1, 4096);
        for (int64_t start : {int64_t(0), std::max<int64_t>(1, truth), truth * 3 + 1}) {
          ModelDevice probe = d;
          SearchResult r = secant_search(options_for(d, start, slope), std::ref(probe));
          EXPECT_EQ(r.batch, truth) << name << " budget " << budget << " start " << start << " slope " << slope;
          EXPECT_LE(r.probes.size(), 24u) << name;
        }
      }
}

TEST(SecantSearch, HonoursMultipleOfAndMaxBatch) {
  ModelDevice d = linear(200e6, 5e6, int64_t(1e9));
  const int64_t truth1 = d.scan(1, 4096);
  for (int64_t m : {2, 3, 8, 16}) {
    ModelDevice probe = d;
    SearchResult r = secant_search(options_for(d, truth1, 5e6, m), std::ref(probe));
    EXPECT_EQ(r.batch, truth1 / m * m) << "multiple_of " << m;
    for (const auto& p : r.probes) EXPECT_EQ(p.batch % m, 0) << "probed " << p.batch << " with multiple_of " << m;
  }
  // max_batch below the memory limit: the answer is max_batch (rounded to the multiple), never above.
  ModelDevice probe = d;
  SearchResult r = secant_search(options_for(d, truth1, 5e6, 4, 30), std::ref(probe));
  EXPECT_EQ(r.batch, 28);
  for (const auto& p : r.probes) EXPECT_LE(p.batch, 30);
  EXPECT_THROW(secant_search(options_for(d, 0, 0, 8, 4), std::ref(probe)), ConfigError);
}

TEST(SecantSearch, ReportsZeroWhenNothingFits) {
  ModelDevice d = linear(950e6, 5e6, int64_t(1e9));  // fixed part alone is above the 900 MB target
  SearchResult r = secant_search(options_for(d, 10, 5e6), std::ref(d));
  EXPECT_EQ(r.batch, 0);
  EXPECT_EQ(r.probes.back().batch, 1);
}

TEST(SecantSearch, UsesFewerProbesThanDoublingWithAGoodEstimate) {
  size_t secant_total = 0, doubling_total = 0;
  for (int64_t budget = int64_t(1e9); budget <= int64_t(40e9); budget += int64_t(3e9)) {
    ModelDevice d = linear(700e6, 11e6, budget);
    const int64_t truth = d.scan(1, 4096);
    ModelDevice a = d, b = d;
    SearchResult s = secant_search(options_for(d, truth + truth / 20, 11e6 * 1.05), std::ref(a));
    SearchResult l = doubling_search(options_for(d, 0, 0), std::ref(b));
    EXPECT_EQ(s.batch, truth);
    EXPECT_EQ(l.batch, truth);
    secant_total += s.probes.size();
    doubling_total += l.probes.size();
  }
  EXPECT_LT(secant_total * 3, doubling_total);
}

}  // namespace
}  // namespace wxtrain::autotune
