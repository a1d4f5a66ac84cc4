#pragma once
// `wxtrain estimate`: the memory a run needs per rank, broken down, and which GPUs fit it at which
// batch size. Model states are exact (counted on the instantiated model, or by formula with
// --analytic); activations are traced on the CPU (or by per-block formulas with --analytic);
// GPU overheads follow the documented model in gpu_overhead.h, the CPU's what the process holds
// outside the counting allocator (cpu_overhead.h).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "estimator/activation_trace.h"
#include "estimator/cpu_overhead.h"
#include "estimator/error_band.h"
#include "estimator/gpu_catalog.h"
#include "estimator/gpu_overhead.h"
#include "estimator/model_states.h"
#include "models/weather_model.h"

namespace wxtrain::estimator {

struct EstimateOptions {
  Mode mode = Mode::kTrain;
  bool analytic = false;
  // Tracing runs the real step at batch 4; a run whose trace would need more than this (by the
  // analytic formulas) is estimated analytically instead, unless force_trace.
  bool force_trace = false;
  double max_trace_bytes = 4.0 * 1024 * 1024 * 1024;
  int64_t world_size = 1;  // ranks sharing the ZeRO shards
  std::optional<int64_t> batch;  // micro-batch to report at (default train.batch_size)
};

// Memory at one batch size, per rank.
struct Breakdown {
  int64_t batch = 0;
  double params = 0, grads = 0, optimizer = 0, activations = 0;
  // GPU overheads; 0 from breakdown() for the CPU, which counts the counting allocator's bytes alone
  // (cpu_total() adds the CPU's overhead)
  double overhead = 0;
  double allocated() const { return params + grads + optimizer + activations; }
  double total() const { return allocated() + overhead; }
};

struct GpuFit {
  GpuSpec gpu;
  Breakdown at_batch;      // at the configured batch
  bool fits = false;
  int64_t max_batch = 0;   // largest micro-batch that fits (0: none)
  // Largest micro-batch that fits with the measured error band added (error_band.h): the one the
  // estimate is sure of. At most max_batch.
  int64_t sure_max_batch = 0;
  // An ensemble (train.ensemble_members > 1): the most members per sample that fit at the
  // configured batch, and with the error band added; 0 when not even 2 fit, 0 for a deterministic
  // run (not asked). Without ensemble groups every rank holds all members of its samples; in
  // groups of G ranks (distributed.ensemble_group) a multiple of G, spread over the group (each
  // rank rolls out max_members / G of them).
  int64_t max_members = 0;
  int64_t sure_max_members = 0;
};

// The most members per sample `wxtrain estimate` and `tune-batch --search members` consider: the
// range of train.ensemble_members.
inline constexpr int64_t kMaxMembers = 1024;

struct Estimate {
  RunConfig config;
  models::ModelShape shape;
  EstimateOptions options;
  LibraryUse libraries;  // which of cuBLAS and cuDNN the step calls (gpu_overhead.h)
  std::string method;      // how activations were obtained, for the report
  ModelStates states;      // per rank, with ZeRO over options.world_size
  ActivationFit activations;
  // The ranks of a model-parallel group the activations are one rank's of: a trace of a run with
  // distributed.model_parallel = P runs rank 0's band (the widest) of a group of P, so P; the
  // formulas give P where the model describes its band (the gnn on a rectangle), else 1 (the whole
  // grid's).
  int64_t activation_ranks = 1;
  // Whether the activations are the formulas' (--analytic, or a run too large to trace): GPUs per
  // model can then ask them for one rank of each group size.
  bool formulas = false;
  // rank_formula's answers by group size (the formulas of a large grid take a while per size).
  mutable std::map<int64_t, std::optional<ActivationFit>> rank_formulas;
  Breakdown breakdown(int64_t batch, const std::optional<GpuSpec>& gpu) const;
  int64_t max_batch(int64_t capacity_bytes, const std::optional<GpuSpec>& gpu) const;
  // How far a GPU has been measured from this estimate for the model's family (error_band.h).
  ErrorBand band;
  // The largest micro-batch whose total, raised by band.under, fits: the batch the estimate is sure
  // of on that GPU. Without a GPU (the CPU, whose trace is its own measurement) max_batch.
  int64_t sure_max_batch(int64_t capacity_bytes, const std::optional<GpuSpec>& gpu) const;
  // Resident bytes outside the counting allocator, measured after the trace (cpu_overhead.h); with
  // --analytic no step ran, so it lacks the kernels' pages.
  double process_resident = 0;
  CpuOverhead cpu_overhead() const;
  // The CPU figure with its overhead: what the process's resident set reaches at `batch`.
  Breakdown cpu_breakdown(int64_t batch) const;
  // Largest micro-batch whose counted bytes plus `overhead` fit `capacity_bytes` (0: none).
  int64_t cpu_max_batch(int64_t capacity_bytes, const CpuOverhead& overhead) const;
  // Activation bytes per sample that do not grow with an ensemble's members: the micro-batch tensors
  // (input, forcings, target; analytic.h batch_tensor_bytes), as the trace or the formulas hold them.
  double sample_bytes = 0;
  // The same run with `members` per sample (2 or more, for an estimate of an ensemble): the model's
  // rows are batch x members, so each activation line's per-sample slope less sample_bytes scales
  // with members / train.ensemble_members (exact for the formulas, which are linear in the rows; for
  // a trace, the trace at the configured members extrapolated along the rows as it is along the
  // batch). No new trace.
  Estimate with_members(int64_t members) const;
  // Activation bytes one more member costs per sample (the steepest line's slope less sample_bytes,
  // over the members).
  double member_bytes_per_sample() const;
  // Largest members per sample (2..kMaxMembers) whose total at `batch` fits `capacity_bytes` (0:
  // not even 2): GPU with its overhead, or the CPU (gpu empty) with `cpu` outside the allocator
  // (the with_members estimate's own CPU overhead when `cpu_overhead` is set).
  int64_t max_members(int64_t capacity_bytes, const std::optional<GpuSpec>& gpu, int64_t batch) const;
  int64_t sure_max_members(int64_t capacity_bytes, const std::optional<GpuSpec>& gpu, int64_t batch) const;
  int64_t cpu_max_members(int64_t capacity_bytes, int64_t batch, bool cpu_overhead) const;
  GpuFit fit(const GpuSpec& gpu) const;
  std::vector<GpuFit> fits() const;  // the whole catalog
  int64_t batch() const;              // the batch reported (options.batch or train.batch_size)
};

Estimate estimate(const RunConfig& config, const models::ModelShape& shape, const EstimateOptions& options);

// GPUs per model (distributed.model_parallel = P, docs/distributed.md "Model parallelism"): when one
// GPU does not hold a rank of the run, how many ranks sharing each sample would. A rank of a
// model-parallel group holds the whole model states (the group replicates the parameters; ZeRO
// shards them across groups as before) and its band of the grid's activations. Where the estimate
// is the formulas' and the model's formulas describe one rank (models::ModelMemory::ranks: the gnn
// on a rectangle, GraphCast, AIFS), each P asks them for that rank of a group of P (rank_formula):
// its band (the gnn's and AIFS's rank 0; GraphCast's rank with the most mesh nodes), its halos, and
// the batch-independent terms as that rank holds them. Otherwise it is the projection
// activations x activation_ranks / P from what the estimate holds: from a whole-grid estimate it
// leaves out the halo nodes a sharded graph also holds (a few rows of the band per message-passing
// layer) and what does not shrink with the grid (the batch-independent terms shrink here too), so
// it is a lower bound on P; at the traced run's own model_parallel it is the trace of that rank,
// halos included.
struct ModelParallelFit {
  GpuSpec gpu;
  int64_t ranks = 0;         // the smallest P (1..kMaxModelParallel) whose per-rank total fits; 0: none
  Breakdown per_rank;        // at that P (at kMaxModelParallel when none)
  bool per_rank_formula = false;  // per_rank is the formulas' rank of P (rank_formula), not a projection
};
// The formulas' activations of one rank of a group of `ranks` (the one they describe, above) for the estimate's run, where the
// estimate is the formulas' (Estimate::formulas) and the model's formulas describe that rank; empty
// otherwise.
std::optional<ActivationFit> rank_formula(const Estimate& e, int64_t ranks);
inline constexpr int64_t kMaxModelParallel = 64;
// The per-rank memory at `batch` with P ranks sharing each sample, on `gpu` (its overhead included).
Breakdown model_parallel_breakdown(const Estimate& e, int64_t batch, int64_t ranks, const GpuSpec& gpu);
ModelParallelFit model_parallel_fit(const Estimate& e, const GpuSpec& gpu);
// Whether GPUs per model takes the estimate's formulas at each P (its activations are the formulas'
// and the model's formulas describe one rank of a group: models::ModelMemory::ranks).
bool per_rank_formulas(const Estimate& e);
// Whether the run's model can shard its grid over model-parallel ranks today (its
// ModelSchema::shards_grid: the graph models). For the others, GPUs per model is a
// projection for a model not yet shardable.
bool model_can_shard(const RunConfig& config);

// A setting that makes a run need less memory, as the run file writes it, and the run with it.
struct MemorySaver {
  std::string setting;  // "train.checkpointing = true"
  RunConfig config;     // the run with the setting applied
  // ZeRO shards the model states and leaves the activations as they are: an estimate of the run
  // with it needs no new trace.
  bool states_only = false;
};

// The settings that make `config` need less memory and that it does not use yet, in the order
// `estimate` suggests them and `tune-batch` re-estimates them: activation checkpointing, rollout
// checkpointing, bf16, then ZeRO's next stage when `world_size` ranks share the states (on one
// rank ZeRO shards nothing).
std::vector<MemorySaver> memory_savers(const RunConfig& config, int64_t world_size);

// For a run that fits nowhere: the settings that would make it smaller ("train.checkpointing =
// true, a smaller batch, or ..."), leaving out what it already does. In inference (`estimate --mode
// inference`, a forecast) only what changes a forward pass: checkpointing, rollout checkpointing and
// ZeRO save nothing there (no backward, no gradients or optimizer state to shard).
std::string ways_to_save_memory(const RunConfig& config, int64_t batch, Mode mode = Mode::kTrain);

}  // namespace wxtrain::estimator
