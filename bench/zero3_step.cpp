// ZeRO-3 against ZeRO-0 under mpirun: the real TrainingStep at distributed.zero_stage 0 and 3 on
// the same ranks, alternating repetition by repetition so both see the same machine, for one run
// file. Per stage it prints the step time (median of the repetitions on rank 0), the bytes the
// communicator all-gathered and reduce-scattered per step (CommStats, counted as the collectives
// are issued), the per-rank peak of the counting allocator over the timed steps (rank 0; both
// ranks hold the same), and the estimator's per-rank prediction for that stage and world size
// (estimator/estimate.h: the traced activations plus model_states, with ZeRO-3's gathered blocks).
//
//   mpirun -np 2 zero3_step --config configs/storm_vit.toml [--precision fp32] [--batch 4]
//       [--warmup 2] [--steps 5] [--reps 3] [--no-estimate]
//
// bench/run_zero3_bench.sh runs it for the zoo and prints the table of docs/benchmarks.md.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "core/config.h"
#include "core/memory_meter.h"
#include "data/dataset.h"
#include "distributed/communicator.h"
#include "distributed/world.h"
#include "estimator/estimate.h"
#include "step_bench_args.h"
#include "trainer/training_step.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace wxtrain;

struct Args : bench::StepBenchArgs {
  bool estimate = true;
};

struct Stage {
  int stage = 0;
  std::unique_ptr<trainer::TrainingState> state;
  std::vector<double> step_ms;
  int64_t allgather_bytes = 0, reduce_scatter_bytes = 0, steps = 0;
  int64_t peak = 0;       // counting allocator's peak over this stage's timed steps (absolute)
  double estimated = 0;   // the estimator's per-rank bytes at this batch
};

int run(const Args& args) {
  const distributed::World world = distributed::init_world();
  MemoryMeter& meter = memory_meter(torch::kCPU);
  const std::vector<std::string> overrides = {"train.precision=" + args.precision,
                                              "train.batch_size=" + std::to_string(args.batch)};
  RunConfig config = load_config(args.config, overrides);
  const data::Dataset dataset(config.data);
  data::take_grid(config, dataset);
  const models::ModelShape shape = models::model_shape(config);
  const std::vector<double> latitudes = dataset.has_coordinates() ? dataset.lat() : std::vector<double>{};

  std::vector<Stage> stages(2);
  stages[0].stage = 0;
  stages[1].stage = 3;
  for (Stage& s : stages) {
    RunConfig c = config;
    c.distributed.zero_stage = s.stage;
    if (args.estimate) {
      estimator::EstimateOptions eo;
      eo.world_size = world.size;
      s.estimated = estimator::estimate(c, shape, eo).breakdown(args.batch, std::nullopt).allocated();
    }
  }
  // One state at a time, so that each stage's peak is its own: built, warmed up, timed, released.
  int64_t params = 0;
  for (int r = 0; r < args.reps; ++r) {
    for (Stage& s : stages) {
      RunConfig c = config;
      c.distributed.zero_stage = s.stage;
      auto comm = distributed::make_communicator(world, c.distributed, torch::kCPU);
      meter.release_cached();
      const int64_t base = meter.snapshot().allocated;
      auto state = trainer::build_training_state(c, shape, comm, torch::kCPU, latitudes);
      state->parallel->broadcast_parameters();
      params = 0;
      for (const auto& p : state->model->parameters()) params += p.numel();
      // The micro-batches inside the measured bytes, as the estimator's trace holds them.
      torch::manual_seed(1000 + world.rank);  // each rank its own data, as in training
      const auto batches = trainer::synthetic_micro_batches(c, shape, args.batch, c.train.accumulation, torch::kCPU);
      trainer::TrainingStep step(*state);
      for (int i = 0; i < args.warmup; ++i) step.run(batches, c.train.lr);
      const distributed::CommStats before = comm->stats();
      meter.reset_peak();
      comm->barrier();
      const auto start = Clock::now();
      for (int i = 0; i < args.steps; ++i) step.run(batches, c.train.lr);
      s.step_ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - start).count() / args.steps);
      const distributed::CommStats after = comm->stats();
      s.allgather_bytes += after.allgather_bytes - before.allgather_bytes;
      s.reduce_scatter_bytes += after.reduce_scatter_bytes - before.reduce_scatter_bytes;
      s.steps += args.steps;
      s.peak = std::max(s.peak, meter.snapshot().peak - base);
    }
  }
  if (world.rank == 0) {
    for (const Stage& s : stages) {
      const double per_step = 1.0 / static_cast<double>(s.steps);
      std::printf("zero_stage=%d ranks=%d model=%s precision=%s batch_per_rank=%lld params=%lld threads=%d "
                  "step_ms=%.3f allgather_bytes_per_step=%.0f reduce_scatter_bytes_per_step=%.0f peak_bytes=%lld",
                  s.stage, world.size, config.model.name.c_str(), args.precision.c_str(),
                  static_cast<long long>(args.batch), static_cast<long long>(params), at::get_num_threads(),
                  bench::median(s.step_ms), static_cast<double>(s.allgather_bytes) * per_step,
                  static_cast<double>(s.reduce_scatter_bytes) * per_step, static_cast<long long>(s.peak));
      if (args.estimate)
        std::printf(" estimated_bytes=%.0f estimate_error=%+.1f%%", s.estimated,
                    100.0 * (s.estimated - static_cast<double>(s.peak)) / static_cast<double>(s.peak));
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  wxtrain::memory_meter(torch::Device(torch::kCPU));  // the counting allocator from the start
  Args args;
  const std::string usage =
      "mpirun -np 2 zero3_step --config FILE [--precision fp32|bf16-mixed] [--batch N] [--warmup N] [--steps N] "
      "[--reps N] [--no-estimate]";
  static_cast<wxtrain::bench::StepBenchArgs&>(args) = wxtrain::bench::parse_step_bench_args(
      argc, argv, usage, [&](const std::string& arg, const std::function<std::string()>&) {
        if (arg != "--no-estimate") return false;
        args.estimate = false;
        return true;
      });
  const int code = wxtrain::distributed::run_or_abort([&] { return run(args); });
  wxtrain::distributed::finalize_world();
  return code;
}
