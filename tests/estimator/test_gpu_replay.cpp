// The one GPU check so far, replayed on the CPU: the H100 measurements kept in
// bench/results/gpu_check_h100_2026-11-24/ (accuracy.jsonl, fit.jsonl; docs/benchmarks.md, "The first
// GPU check") against the estimate wxtrain makes today for each of their cases. The estimate is
// recomputed here, the measurements are what the GPU did, so a change to the estimator that moves it
// away from what a GPU holds fails here, without a GPU. The targets are the GPU check's own: the
// per-rank totals within a median |error| of 3% and a worst of 8%, and no predicted largest batch
// above the one that really trained.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config.h"
#include "core/memory_meter.h"
#include "data/dataset.h"
#include "estimator/error_band.h"
#include "estimator/estimate.h"
#include "estimator/gpu_catalog.h"

using namespace wxtrain;
using namespace wxtrain::estimator;
using nlohmann::json;

namespace {

const std::string kResults = std::string(WXTRAIN_SOURCE_DIR) + "/bench/results/gpu_check_h100_2026-11-24/";

std::vector<json> read_lines(const std::string& name) {
  std::ifstream in(kResults + name);
  EXPECT_TRUE(in.good()) << "cannot read " << kResults + name;
  std::vector<json> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

// A case of the check as the GPU check ran it (bench/gpu_check.cpp, load_run): the storm config of
// that model, its precision and checkpointing, estimated for a GPU (train.device = "cuda").
struct Case {
  std::string model, precision;
  bool checkpointing = false;
  bool operator<(const Case& o) const {
    return std::tie(model, precision, checkpointing) < std::tie(o.model, o.precision, o.checkpointing);
  }
};

Case case_of(const json& j) { return {j.at("model"), j.at("precision"), j.at("checkpointing")}; }

// The storm config of a model, its grid read from the data once (bench/gpu_check.cpp, load_run).
const RunConfig& storm_run(const std::string& model) {
  static std::map<std::string, RunConfig> runs;
  auto it = runs.find(model);
  if (it != runs.end()) return it->second;
  RunConfig config = load_config(std::string(WXTRAIN_SOURCE_DIR) + "/configs/storm_" + model + ".toml",
                                 {"train.device=cuda"});  // the estimate is for a GPU
  const data::Dataset dataset(config.data);
  data::take_grid(config, dataset);
  return runs.emplace(model, config).first->second;
}

// One estimate per case, traced once (the twelve traces are most of the test's time).
const Estimate& estimate_for(const Case& c) {
  static std::map<Case, Estimate> cache;
  auto it = cache.find(c);
  if (it != cache.end()) return it->second;
  memory_meter(torch::Device(torch::kCPU));
  RunConfig config = storm_run(c.model);
  config.train.precision = parse_precision(c.precision);
  config.train.checkpointing = c.checkpointing;
  return cache.emplace(c, estimate(config, models::model_shape(config), {})).first->second;
}

// The H100 the measurements were made on, as the estimator describes a GPU.
GpuSpec measured_gpu() {
  const json device = read_lines("device.json").at(0);
  const std::string cc = device.at("capability");  // "9.0"
  return {"H100", device.at("name"), device.at("total_bytes"), false, (cc[0] - '0') * 10 + (cc[2] - '0')};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Replayed {
  Case c;
  int64_t batch;
  double predicted, measured;
  double error() const { return (predicted - measured) / measured; }
};

std::vector<Replayed> replay_accuracy() {
  const GpuSpec gpu = measured_gpu();
  std::vector<Replayed> out;
  for (const json& j : read_lines("accuracy.jsonl")) {
    if (j.at("measured").at("oom")) continue;
    const Case c = case_of(j);
    const int64_t batch = j.at("batch");
    out.push_back({c, batch, estimate_for(c).breakdown(batch, gpu).total(), j.at("measured").at("total").get<double>()});
  }
  return out;
}

// Where the measured total is off the estimate for a cause found but not modelled
// (docs/estimator.md, "Against a GPU"): the U-Net in fp32 at batch 64. cuDNN's TF32 engines took
// 235 MB of workspace (and the caching allocator kept its segment) because 80 GB were free; it gives
// way where memory is short, and the fits below show it does not decide one. The bf16-mixed U-Net at
// batch 64 was left out too while the trace on a CPU without AVX-512 counted slow_conv2d's im2col
// columns; its convolutions now go through ops::conv2d (ops/conv2d.h), which counts none in the
// GPU-standing trace, and the two cases are held to the 8% with the 32 others (-0.2%, -3.2% here).
bool known_off(const Replayed& r) { return r.c.model == "unet" && r.batch == 64 && r.c.precision == "fp32"; }

}  // namespace

TEST(GpuReplay, TotalsOnTheH100WithinTheCheckTargets) {
  const std::vector<Replayed> cases = replay_accuracy();
  ASSERT_EQ(cases.size(), 36u);
  std::vector<double> errors;
  const Replayed* worst = nullptr;
  int known = 0;
  for (const Replayed& r : cases) {
    errors.push_back(std::fabs(r.error()));
    std::printf("  %-5s %-10s ckpt %-3s batch %3lld: predicted %8.1f MiB, measured %8.1f MiB, %+6.2f%%\n",
                r.c.model.c_str(), r.c.precision.c_str(), r.c.checkpointing ? "on" : "off",
                static_cast<long long>(r.batch), r.predicted / 1048576.0, r.measured / 1048576.0, 100 * r.error());
    if (known_off(r)) {
      ++known;
      // The fp32 workspace that cuDNN took because memory was free is left out of the band (it
      // gives way where memory is short).
      continue;
    }
    if (!worst || std::fabs(r.error()) > std::fabs(worst->error())) worst = &r;
  }
  EXPECT_EQ(known, 2) << "the cases left out of the worst error are the U-Net's two in fp32 at batch 64";
  EXPECT_LE(median(errors), 0.03) << "median |error| of the per-rank total over the 36 H100 cases";
  ASSERT_NE(worst, nullptr);
  EXPECT_LE(std::fabs(worst->error()), 0.08)
      << "worst: " << worst->c.model << " " << worst->c.precision << " checkpointing "
      << (worst->c.checkpointing ? "on" : "off") << " batch " << worst->batch << ": predicted "
      << worst->predicted / 1048576.0 << " MiB, measured " << worst->measured / 1048576.0 << " MiB";
}

// The error bands of estimator/error_band.cpp against the measurements: each family's band covers
// every case that decides a fit (the totals above, but for the U-Net's fp32 workspace that cuDNN
// took because memory was free; the capped GPUs' largest batches, whose step one past the real
// largest ran out of that memory; and the kept run's own predicted largest batch against the real
// one, made by the estimate of then on the H100's host, whose CPU convolutions counted no im2col
// columns), and is no wider than they need, rounded up to the next half percent.
TEST(GpuReplay, ErrorBandsAreWhatTheMeasurementsSupport) {
  std::map<std::string, std::pair<double, double>> need;  // family -> (under, over)
  auto note = [&](const Estimate& e, double under, double over) {
    auto& n = need[e.band.family];
    n.first = std::max(n.first, under);
    n.second = std::max(n.second, over);
  };
  for (const Replayed& r : replay_accuracy()) {
    const bool cudnn_took_free_memory = known_off(r) && r.c.precision == "fp32";
    note(estimate_for(r.c), cudnn_took_free_memory ? 0 : r.measured / r.predicted - 1, 1 - r.measured / r.predicted);
  }
  const GpuSpec h100 = measured_gpu();
  for (const json& j : read_lines("fit.jsonl")) {
    const Estimate& e = estimate_for(case_of(j));
    const GpuSpec capped{j.at("gpu"), j.at("gpu"), j.at("gpu_memory"), false, h100.compute_capability};
    const int64_t real = j.at("real_max");
    note(e, static_cast<double>(capped.memory_bytes) / e.breakdown(real + 1, capped).total() - 1, 0);
    note(e, j.at("predicted_max").get<double>() / static_cast<double>(real) - 1, 0);
  }
  for (const auto& [family, n] : need) {
    std::printf("  %-40s measured: up to %+.2f%% above the estimate, %.2f%% below\n", family.c_str(), 100 * n.first,
                100 * n.second);
    const ErrorBand* band = nullptr;
    for (const Case& c : {Case{"unet", "fp32", false}, Case{"gnn", "fp32", false}, Case{"vit", "fp32", false}})
      if (estimate_for(c).band.family == family) band = &estimate_for(c).band;
    ASSERT_NE(band, nullptr) << family;
    EXPECT_TRUE(band->measured) << family;
    EXPECT_GE(band->under, n.first) << family << ": the band does not cover what was measured";
    EXPECT_LE(band->under, std::ceil(std::max(0.0, n.first) * 200) / 200 + 1e-9) << family << ": wider than measured";
    EXPECT_GE(band->over, n.second) << family;
    EXPECT_LE(band->over, std::ceil(std::max(0.0, n.second) * 200) / 200 + 1e-9) << family << ": wider than measured";
  }
}

TEST(GpuReplay, NoSureBatchAboveTheOneThatTrained) {
  const GpuSpec h100 = measured_gpu();
  const std::vector<json> fits = read_lines("fit.jsonl");
  ASSERT_EQ(fits.size(), 6u);
  for (const json& j : fits) {
    const Case c = case_of(j);
    const Estimate& e = estimate_for(c);
    // The real largest batch trained on the H100 with its caching allocator capped at the smaller
    // GPU's memory less the H100's own context: so the estimate is for that memory on the H100's
    // architecture (its context and workspaces), which is what was measured.
    const GpuSpec capped{j.at("gpu"), j.at("gpu"), j.at("gpu_memory"), false, h100.compute_capability};
    const int64_t real = j.at("real_max");
    const int64_t central = e.max_batch(capped.memory_bytes, capped);
    const int64_t sure = e.sure_max_batch(capped.memory_bytes, capped);
    std::printf("  %-5s %-10s %-8s: sure of %6lld, central %6lld, real %6lld\n", c.model.c_str(), c.precision.c_str(),
                capped.name.c_str(), static_cast<long long>(sure), static_cast<long long>(central),
                static_cast<long long>(real));
    EXPECT_LE(sure, real) << c.model << " " << c.precision << " on a " << capped.name
                          << ": the batch the estimate is sure of ran out of memory";
    EXPECT_LE(sure, central);
  }
}
