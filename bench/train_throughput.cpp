// Training throughput of the real wxtrain step (TrainingStep on a world of one) for one run file
// and precision, in samples/s. bench/peer/train_peer.py runs the same models in PyTorch's Python
// API; bench/run_train_bench.sh alternates the two and prints the comparison.
//
//   train_throughput --config configs/storm_unet.toml --precision bf16-mixed
//       [--batch 8] [--warmup 3] [--steps 10] [--reps 5]
//   train_throughput --config configs/storm_unet.toml --describe   # shape + parameter count, JSON
//   train_throughput --config configs/storm_graphcast.toml --describe --buffers DIR
//       # ... and the model's buffers (graphs, masks, index tables) as DIR/<name>.npy
//   train_throughput --config ... --precision ... --profile trace.json  # op trace of `steps` steps
//
// Timing: after `warmup` steps, `reps` repetitions of `steps` consecutive steps each; a
// repetition's throughput is steps * batch / seconds, and the printed figure is the median.
// The batches are synthetic (synthetic_micro_batches) on the storm grid: the data path is
// measured separately by bench/prefetch_epoch.cpp.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include "core/config.h"
#include "core/error.h"
#include "core/memory_meter.h"
#include "data/dataset.h"
#include "distributed/communicator.h"
#include "distributed/world.h"
#include "ops/group_norm_silu.h"
#include "trainer/training_step.h"
#include "npy_writer.h"
#include "step_bench_args.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace wxtrain;

struct Args : bench::StepBenchArgs {
  std::string profile;  // chrome trace of `steps` steps after warm-up, instead of the timing
  std::string buffers;  // with --describe: the model's buffers as .npy files in this directory
  bool unfused = false;  // the models' unfused paths (ops/group_norm_silu.h), for A/B runs
};

Args parse_args(int argc, char** argv) {
  Args a;
  static_cast<bench::StepBenchArgs&>(a) = bench::parse_step_bench_args(
      argc, argv,
      "train_throughput --config FILE [--precision fp32|bf16-mixed] [--batch N] [--warmup N] [--steps N] "
      "[--reps N] [--describe [--buffers DIR]] [--profile TRACE.json] [--unfused]",
      [&](const std::string& arg, const std::function<std::string()>& value) {
        if (arg == "--unfused") {
          a.unfused = true;
          return true;
        }
        if (arg == "--buffers") {
          a.buffers = value();
          return true;
        }
        if (arg != "--profile") return false;
        a.profile = value();
        return true;
      });
  return a;
}

using bench::median;

int run(const Args& args) {
  RunConfig config = load_config(args.config, {"train.precision=" + args.precision,
                                               "train.batch_size=" + std::to_string(args.batch),
                                               "train.accumulation=1"});
  // The grid and latitudes come from the real data, as in training (the loss is latitude-weighted).
  // Where the grid lies too, as trainer.cpp sets it: graphcast's mesh covers only the data's region.
  const data::Dataset dataset(config.data);
  data::take_grid(config, dataset);
  const models::ModelShape shape = models::model_shape(config);
  const std::vector<double> latitudes = dataset.has_coordinates() ? dataset.lat() : std::vector<double>{};

  auto comm = distributed::make_communicator(distributed::World{}, config.distributed, torch::kCPU);
  auto state = trainer::build_training_state(config, shape, comm, torch::kCPU, latitudes);
  int64_t params = 0;
  for (const auto& p : state->model->parameters()) params += p.numel();

  if (args.describe) {
    // What the Python peer needs to build the same model on the same grid.
    std::printf("{\"model\": \"%s\", \"params\": %lld, \"threads\": %d, \"in_channels\": %lld, "
                "\"out_channels\": %lld, \"lat\": %lld, \"lon\": %lld, \"rollout_steps\": %lld, "
                "\"state_channels\": %lld, \"history\": %lld, \"latitudes\": [",
                config.model.name.c_str(), static_cast<long long>(params), at::get_num_threads(),
                static_cast<long long>(shape.in_channels), static_cast<long long>(shape.out_channels),
                static_cast<long long>(shape.lat), static_cast<long long>(shape.lon),
                static_cast<long long>(config.data.rollout_steps), static_cast<long long>(shape.state_channels),
                static_cast<long long>(shape.history));
    for (size_t i = 0; i < latitudes.size(); ++i) std::printf("%s%.17g", i ? ", " : "", latitudes[i]);
    std::printf("], \"buffers\": [");
    bool first = true;
    for (const auto& b : state->model->named_buffers()) {
      std::printf("%s\"%s\"", first ? "" : ", ", b.key().c_str());
      first = false;
      if (!args.buffers.empty()) bench::write_npy(args.buffers + "/" + b.key() + ".npy", b.value());
    }
    std::printf("]}\n");
    return 0;
  }

  const ops::CpuFusionGuard fusion(!args.unfused);
  const auto batches = trainer::synthetic_micro_batches(config, shape, args.batch, 1, torch::kCPU);
  trainer::TrainingStep step(*state);
  const double lr = config.train.lr;
  double last_loss = 0;
  for (int i = 0; i < args.warmup; ++i) last_loss = step.run(batches, lr).loss;
  if (!args.profile.empty()) {
    torch::autograd::profiler::RecordProfile guard(args.profile);
    for (int i = 0; i < args.steps; ++i) step.run(batches, lr);
    return 0;
  }
  std::vector<double> rates;
  for (int r = 0; r < args.reps; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < args.steps; ++i) last_loss = step.run(batches, lr).loss;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    rates.push_back(static_cast<double>(args.steps * args.batch) / seconds);
  }
  std::printf("impl=%s model=%s precision=%s batch=%lld params=%lld threads=%d loss=%.5g reps=",
              args.unfused ? "wxtrain-unfused" : "wxtrain", config.model.name.c_str(), args.precision.c_str(),
              static_cast<long long>(args.batch), static_cast<long long>(params), at::get_num_threads(), last_loss);
  for (size_t i = 0; i < rates.size(); ++i) std::printf("%s%.2f", i ? "," : "", rates[i]);
  std::printf(" samples_per_s=%.3f\n", median(rates));
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
    std::fprintf(stderr, "train_throughput: %s\n", e.what());
    return 1;
  }
}
