// Each of wxtrain's CPU fusions (ops/) against LibTorch's plain path, A/B in one process: the real
// training step (TrainingStep, a world of one, synthetic batches on the storm grid) of every storm
// config that uses the fusion, in every precision it applies to, with all fusions on (A) and with
// that one off (B, ops::FusionOffGuard; the rest and the CPU autocast policy unchanged). The arms
// alternate A B, B A, ... so that the shared machine's drift hits both alike; a pair's ratio is
// B's time / A's time (the fused step's speed-up, > 1 when the fusion pays), and a row reports the
// median and the spread (lowest, highest) over pairs, with the peak bytes of one step in each arm.
// `all` turns every fusion off with CpuFusionGuard(false), as `train_throughput --unfused` does: that
// also switches the CPU step to CUDA's autocast policy (LayerNorm and softmax in fp32).
// `bf16_gemm_fp32` is not a fusion: the off arm sends bf16 GEMMs to ATen's own bf16 kernels
// (ops::set_bf16_gemm_in_fp32(false)); it changes anything only where ops/bf16_gemm.h installed.
// `apply_linear` is an op, not a step: ops::apply_linear(layer, x) against layer(x) (the C++
// frontend's matmul and in-place bias add), forward and backward at the ViT's MLP sizes, oneDNN off.
//
//   OMP_NUM_THREADS=1 fusion_ab [--fusions group_norm_silu,max_pool_2x2,...] [--pairs 11]
//       [--arm-seconds 0.6] [--batch 8] [--precisions fp32,bf16-mixed]
//   (run from the source tree: it reads configs/storm_<model>.toml and the storm data)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "core/autocast.h"
#include "core/config.h"
#include "core/error.h"
#include "core/memory_meter.h"
#include "data/dataset.h"
#include "distributed/communicator.h"
#include "distributed/world.h"
#include "ops/bf16_gemm.h"
#include "ops/cpu_fusion.h"
#include "ops/linear.h"
#include "trainer/training_step.h"
#include "step_bench_args.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace wxtrain;
using ops::Fusion;

// Where each fusion acts: the storm configs whose step runs it, and the precisions it applies to.
struct FusionUse {
  std::string name;
  std::optional<Fusion> fusion;  // none: every fusion (`all`) or the op-level `apply_linear`
  std::vector<std::string> models;
  std::vector<std::string> precisions;
};

const std::vector<FusionUse>& fusion_uses() {
  static const std::vector<std::string> both = {"fp32", "bf16-mixed"};
  static const std::vector<FusionUse> uses = {
      {"group_norm_silu", Fusion::kGroupNormSilu, {"unet"}, both},
      {"max_pool_2x2", Fusion::kMaxPool2x2, {"unet"}, both},
      {"upsample_2x_concat", Fusion::kUpsample2xConcat, {"unet"}, both},
      {"gather_edges", Fusion::kGatherEdges, {"gnn", "graphcast"}, both},
      // Only fp32 GEMMs outside autocast go to oneDNN.
      {"onednn_sgemm", Fusion::kOnednnSgemm, {"vit", "gnn", "fourcastnet", "graphcast", "pangu"}, {"fp32"}},
      {"scaled_biased_softmax", Fusion::kScaledBiasedSoftmax, {"pangu"}, both},
      {"all", std::nullopt, {"unet", "vit", "gnn", "fourcastnet", "graphcast", "pangu"}, both},
      {"apply_linear", std::nullopt, {"vit"}, both},
      // bf16 GEMMs in fp32 on a CPU without native bf16 (ops/bf16_gemm.h); elsewhere both arms are alike.
      {"bf16_gemm_fp32", std::nullopt, {"unet", "vit", "gnn", "fourcastnet", "graphcast", "pangu"}, {"bf16-mixed"}},
  };
  return uses;
}

struct Args {
  std::vector<std::string> fusions;  // empty: all of fusion_uses() but `all`
  std::vector<std::string> precisions = {"fp32", "bf16-mixed"};
  int pairs = 11;
  double arm_seconds = 0.6;  // each arm times enough whole steps to last about this long
  int64_t batch = 8;
};

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

Args parse_args(int argc, char** argv) {
  const std::string usage =
      "fusion_ab [--fusions NAME,...] [--pairs N] [--arm-seconds S] [--batch N] [--precisions fp32,bf16-mixed]";
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) bench::bench_usage(usage, arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--fusions") a.fusions = split(value());
    else if (arg == "--precisions") a.precisions = split(value());
    else if (arg == "--pairs") a.pairs = std::stoi(value());
    else if (arg == "--arm-seconds") a.arm_seconds = std::stod(value());
    else if (arg == "--batch") a.batch = std::stoll(value());
    else bench::bench_usage(usage, "unknown argument '" + arg + "'");
  }
  if (a.pairs < 1 || a.batch < 1 || a.arm_seconds <= 0) bench::bench_usage(usage, "pairs, batch and arm-seconds must be positive");
  std::string known;
  for (const auto& u : fusion_uses()) known += (known.empty() ? "" : ", ") + u.name;
  for (const auto& f : a.fusions) {
    if (std::none_of(fusion_uses().begin(), fusion_uses().end(), [&](const FusionUse& u) { return u.name == f; }))
      bench::bench_usage(usage, "unknown fusion '" + f + "' (one of: " + known + ")");
  }
  if (a.fusions.empty())
    for (const auto& u : fusion_uses())
      if (u.name != "all") a.fusions.push_back(u.name);
  return a;
}

// What the two arms of a row run: `work(fused)` does one unit (a step, or an op's forward and
// backward) with the fusion on (true) or off (false).
struct Row {
  std::string fusion, model, precision;
  std::function<void(bool fused)> work;
};

struct RowResult {
  std::vector<double> on_ms, off_ms, ratios;  // per pair: ms per unit in each arm, off / on
  int64_t on_peak = 0, off_peak = 0;          // bytes allocated at the peak of one unit, above its start
  int units = 0;                              // units per arm
};

RowResult measure(const Row& row, const Args& args) {
  MemoryMeter& meter = memory_meter(torch::Device(torch::kCPU));
  RowResult r;
  // Warm-up: both arms, twice (the caching allocator and oneDNN's JIT see every shape).
  for (int i = 0; i < 2; ++i) {
    row.work(true);
    row.work(false);
  }
  for (const bool fused : {true, false}) {
    PeakScope peak(meter);
    row.work(fused);
    (fused ? r.on_peak : r.off_peak) = peak.peak_increase();
  }
  auto time_units = [&](bool fused, int units) {
    const auto start = Clock::now();
    for (int i = 0; i < units; ++i) row.work(fused);
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count() / units;
  };
  const double one = std::min(time_units(true, 1), time_units(false, 1));
  r.units = std::max(1, static_cast<int>(args.arm_seconds * 1000 / one + 0.5));
  for (int p = 0; p < args.pairs; ++p) {
    double on = 0, off = 0;
    if (p % 2 == 0) {
      on = time_units(true, r.units);
      off = time_units(false, r.units);
    } else {
      off = time_units(false, r.units);
      on = time_units(true, r.units);
    }
    r.on_ms.push_back(on);
    r.off_ms.push_back(off);
    r.ratios.push_back(off / on);
    std::printf("pair fusion=%s config=%s precision=%s pair=%d on_ms=%.3f off_ms=%.3f off/on=%.4f\n",
                row.fusion.c_str(), row.model.c_str(), row.precision.c_str(), p, on, off, off / on);
    std::fflush(stdout);
  }
  return r;
}

// The state of one storm config's training step, built once per (config, precision).
struct StepBench {
  std::unique_ptr<trainer::TrainingState> state;
  std::unique_ptr<trainer::TrainingStep> step;
  std::vector<trainer::MicroBatch> batches;
  double lr = 0;
};

std::unique_ptr<StepBench> make_step_bench(const std::string& model, const std::string& precision, int64_t batch) {
  RunConfig config = load_config("configs/storm_" + model + ".toml",
                                 {"train.precision=" + precision, "train.batch_size=" + std::to_string(batch),
                                  "train.accumulation=1"});
  // As train_throughput: the grid and latitudes of the real data.
  const data::Dataset dataset(config.data);
  data::take_grid(config, dataset);
  const models::ModelShape shape = models::model_shape(config);
  const std::vector<double> latitudes = dataset.has_coordinates() ? dataset.lat() : std::vector<double>{};
  auto comm = distributed::make_communicator(distributed::World{}, config.distributed, torch::kCPU);
  auto b = std::make_unique<StepBench>();
  b->state = trainer::build_training_state(config, shape, comm, torch::kCPU, latitudes);
  b->step = std::make_unique<trainer::TrainingStep>(*b->state);
  b->batches = trainer::synthetic_micro_batches(config, shape, batch, 1, torch::kCPU);
  b->lr = config.train.lr;
  return b;
}

// apply_linear against torch::nn::Linear::forward: the ViT's first MLP Linear (embed 128 -> 512 on
// 8 x 132 tokens), forward and backward, under the precision's autocast, with oneDNN's GEMM off so
// that both arms are ATen's.
std::function<void(bool)> linear_work(const std::string& precision, int64_t batch) {
  torch::manual_seed(0);
  auto layer = std::make_shared<torch::nn::Linear>(torch::nn::LinearOptions(128, 512));
  auto x = std::make_shared<torch::Tensor>(torch::randn({batch, 132, 128}).requires_grad_(true));
  const bool mixed = precision == "bf16-mixed";
  return [layer, x, mixed](bool fused) {
    const ops::FusionOffGuard no_onednn(Fusion::kOnednnSgemm);
    torch::Tensor y;
    {
      const AutocastGuard autocast(c10::DeviceType::CPU, torch::kBFloat16, mixed);
      y = fused ? ops::apply_linear(*layer, *x) : (*layer)(*x);
    }
    y.to(torch::kFloat).square().mean().backward();
    (*layer)->zero_grad();
    x->mutable_grad() = torch::Tensor();
  };
}

int run(const Args& args) {
  std::printf("fusion_ab: LibTorch %s, %d intra-op threads, batch %lld, %d pairs, ~%.2f s per arm\n",
              TORCH_VERSION, at::get_num_threads(), static_cast<long long>(args.batch), args.pairs, args.arm_seconds);
  std::vector<std::string> summary;
  std::map<std::string, std::unique_ptr<StepBench>> steps;  // by config and precision, built on first use
  for (const std::string& name : args.fusions) {
    const FusionUse& use = *std::find_if(fusion_uses().begin(), fusion_uses().end(),
                                         [&](const FusionUse& u) { return u.name == name; });
    for (const std::string& model : use.models) {
      for (const std::string& precision : use.precisions) {
        if (std::find(args.precisions.begin(), args.precisions.end(), precision) == args.precisions.end()) continue;
        Row row{name, model, precision, {}};
        if (name == "apply_linear") {
          row.work = linear_work(precision, args.batch);
        } else {
          auto& bench = steps[model + "/" + precision];
          if (!bench) bench = make_step_bench(model, precision, args.batch);
          StepBench* b = bench.get();
          const std::optional<Fusion> fusion = use.fusion;
          const bool gemm_row = name == "bf16_gemm_fp32";
          row.work = [b, fusion, gemm_row](bool fused) {
            if (gemm_row) {
              ops::set_bf16_gemm_in_fp32(fused);
              b->step->run(b->batches, b->lr);
              ops::set_bf16_gemm_in_fp32(true);
            } else if (fused) {
              b->step->run(b->batches, b->lr);
            } else if (fusion) {
              const ops::FusionOffGuard off(*fusion);
              b->step->run(b->batches, b->lr);
            } else {
              const ops::CpuFusionGuard off(false);
              b->step->run(b->batches, b->lr);
            }
          };
        }
        const RowResult r = measure(row, args);
        char line[512];
        std::snprintf(line, sizeof line,
                      "| %s | %s | %s | %.2f | %.2f | %.3fx | %.3f-%.3f | %d | %.1f | %.1f |", name.c_str(),
                      model.c_str(), precision.c_str(), bench::median(r.on_ms), bench::median(r.off_ms),
                      bench::median(r.ratios), *std::min_element(r.ratios.begin(), r.ratios.end()),
                      *std::max_element(r.ratios.begin(), r.ratios.end()), r.units, r.on_peak / 1e6,
                      r.off_peak / 1e6);
        std::printf("row %s\n", line);
        std::fflush(stdout);
        summary.emplace_back(line);
      }
    }
  }
  std::printf("\n| fusion | config | precision | fused ms | plain ms | plain / fused (median) | spread (min-max) | "
              "units per arm | fused peak MB | plain peak MB |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& line : summary) std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // LibTorch's CPU allocator is wxtrain's counting, caching one from the start, as in `wxtrain`.
  memory_meter(torch::Device(torch::kCPU));
  const Args args = parse_args(argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusion_ab: %s\n", e.what());
    return 1;
  }
}
