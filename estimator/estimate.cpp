#include "estimator/estimate.h"

#include <algorithm>

#include "core/units.h"
#include "estimator/analytic.h"
#include "models/registry.h"
#include "models/weather_model.h"

namespace wxtrain::estimator {

int64_t Estimate::batch() const { return options.batch.value_or(config.train.batch_size); }

Breakdown Estimate::breakdown(int64_t batch, const std::optional<GpuSpec>& gpu) const {
  Breakdown b;
  b.batch = batch;
  b.params = states.params;
  if (options.mode == Mode::kTrain) {
    b.grads = states.grads;
    b.optimizer = states.optimizer;
  }
  b.activations = std::max(0.0, activations.at(static_cast<double>(batch)));
  if (gpu) b.overhead = gpu_overhead(b.allocated(), libraries, *gpu).total();
  return b;
}

namespace {

// Largest batch with total(batch) <= capacity; total is non-decreasing in the batch: grow then bisect.
template <typename Total>
int64_t largest_batch(double cap, const Total& total) {
  if (total(1) > cap) return 0;
  int64_t lo = 1, hi = 2;
  while (total(hi) <= cap) {
    lo = hi;
    if (hi > (int64_t{1} << 40)) return hi;  // memory no longer grows with the batch
    hi *= 2;
  }
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    (total(mid) <= cap ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace

int64_t Estimate::max_batch(int64_t capacity_bytes, const std::optional<GpuSpec>& gpu) const {
  return largest_batch(static_cast<double>(capacity_bytes), [&](int64_t b) { return breakdown(b, gpu).total(); });
}

int64_t Estimate::sure_max_batch(int64_t capacity_bytes, const std::optional<GpuSpec>& gpu) const {
  if (!gpu) return max_batch(capacity_bytes, gpu);
  const double raise = 1.0 + band.under;
  return largest_batch(static_cast<double>(capacity_bytes), [&](int64_t b) { return raise * breakdown(b, gpu).total(); });
}

Estimate Estimate::with_members(int64_t members) const {
  Estimate e = *this;
  const double from = static_cast<double>(std::max<int64_t>(1, config.train.ensemble_members));
  const double ratio = static_cast<double>(members) / from;
  e.config.train.ensemble_members = members;
  auto scale = [&](Line& l) {
    if (l.per_sample > sample_bytes) l.per_sample = sample_bytes + (l.per_sample - sample_bytes) * ratio;
  };
  scale(e.activations.forward_backward);
  scale(e.activations.optimizer);
  for (Line& l : e.activations.small_batch) scale(l);
  return e;
}

double Estimate::member_bytes_per_sample() const {
  const double from = static_cast<double>(std::max<int64_t>(1, config.train.ensemble_members));
  return std::max(0.0, activations.per_sample() - sample_bytes) / from;
}

namespace {

// Largest members per sample in [2, kMaxMembers] with total(members) <= cap (0: not even 2).
template <typename Total>
int64_t largest_members(double cap, const Total& total) {
  if (total(2) > cap) return 0;
  int64_t lo = 2, hi = 4;
  while (hi <= kMaxMembers && total(hi) <= cap) {
    lo = hi;
    hi *= 2;
  }
  if (hi > kMaxMembers) {
    if (total(kMaxMembers) <= cap) return kMaxMembers;
    hi = kMaxMembers;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (total(mid) <= cap ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace

int64_t Estimate::max_members(int64_t capacity_bytes, const std::optional<GpuSpec>& gpu, int64_t batch) const {
  return largest_members(static_cast<double>(capacity_bytes),
                         [&](int64_t m) { return with_members(m).breakdown(batch, gpu).total(); });
}

int64_t Estimate::sure_max_members(int64_t capacity_bytes, const std::optional<GpuSpec>& gpu, int64_t batch) const {
  if (!gpu) return max_members(capacity_bytes, gpu, batch);
  const double raise = 1.0 + band.under;
  return largest_members(static_cast<double>(capacity_bytes),
                         [&](int64_t m) { return raise * with_members(m).breakdown(batch, gpu).total(); });
}

int64_t Estimate::cpu_max_members(int64_t capacity_bytes, int64_t batch, bool with_cpu_overhead) const {
  return largest_members(static_cast<double>(capacity_bytes), [&](int64_t m) {
    const Estimate e = with_members(m);
    return e.breakdown(batch, std::nullopt).total() +
           (with_cpu_overhead ? e.cpu_overhead().at(static_cast<double>(batch)) : 0.0);
  });
}

CpuOverhead Estimate::cpu_overhead() const {
  return estimator::cpu_overhead(process_resident, activations.per_sample());
}

Breakdown Estimate::cpu_breakdown(int64_t batch) const {
  Breakdown b = breakdown(batch, std::nullopt);
  b.overhead = cpu_overhead().at(static_cast<double>(batch));
  return b;
}

int64_t Estimate::cpu_max_batch(int64_t capacity_bytes, const CpuOverhead& overhead) const {
  return largest_batch(static_cast<double>(capacity_bytes), [&](int64_t b) {
    return breakdown(b, std::nullopt).total() + overhead.at(static_cast<double>(b));
  });
}

GpuFit Estimate::fit(const GpuSpec& gpu) const {
  GpuFit f;
  f.gpu = gpu;
  f.at_batch = breakdown(batch(), gpu);
  f.fits = f.at_batch.total() <= static_cast<double>(gpu.memory_bytes);
  f.max_batch = max_batch(gpu.memory_bytes, gpu);
  f.sure_max_batch = sure_max_batch(gpu.memory_bytes, gpu);
  if (config.train.ensemble() && options.mode == Mode::kTrain) {
    f.max_members = max_members(gpu.memory_bytes, gpu, batch());
    f.sure_max_members = sure_max_members(gpu.memory_bytes, gpu, batch());
    // In ensemble groups of G ranks the members per sample are spread evenly over the group (G
    // must divide them): the largest multiple of G, each rank holding that / G.
    const int64_t G = std::max<int64_t>(1, config.distributed.ensemble_group);
    f.max_members -= f.max_members % G;
    f.sure_max_members -= f.sure_max_members % G;
  }
  return f;
}

std::vector<GpuFit> Estimate::fits() const {
  std::vector<GpuFit> out;
  for (const auto& g : gpu_catalog()) out.push_back(fit(g));
  return out;
}

Estimate estimate(const RunConfig& config, const models::ModelShape& shape, const EstimateOptions& options) {
  Estimate e;
  e.config = config;
  e.shape = shape;
  e.options = options;
  e.libraries = library_use(config.model.name);
  e.band = error_band(e.libraries);
  const StateLayout layout = state_layout(config.train.precision, config.train.optimizer, config.train.momentum);
  // What does not grow with an ensemble's members: the micro-batch tensors, as the formulas or the
  // trace (at most 2 micro-batches, below) hold them.
  e.sample_bytes = batch_tensor_bytes(config, shape);
  if (options.analytic) {
    e.activations = analytic_activations(config, shape, options.mode);
    e.method = "analytic formulas";
    e.formulas = true;
  } else {
    ActivationFit formula = analytic_activations(config, shape, options.mode);
    const double trace_bytes = static_cast<double>(formula.traced_states) + formula.at(4.0);
    if (!options.force_trace && trace_bytes > options.max_trace_bytes) {
      e.activations = formula;
      e.formulas = true;
      e.method = "analytic formulas (tracing would need ~" + format_gib(trace_bytes, 1) + " GiB here; --trace forces it)";
    } else {
      e.activations = trace_activations(config, shape, options.mode);
      e.sample_bytes = batch_tensor_bytes(trace_config(config), shape);
      e.method = "training step traced on the CPU (counting allocator)";
      if (e.activations.ranks > 1)  // the step ran rank 0 of the group over the stand-in (BandGroup)
        e.method += ", rank 0's band of " + std::to_string(e.activations.ranks) + " (model_parallel)";
    }
  }
  if (!options.analytic && config.train.accumulation > trace_config(config).train.accumulation) {
    // The trainer holds all of a step's micro-batches at once; the trace ran fewer of them.
    const int64_t extra = config.train.accumulation - trace_config(config).train.accumulation;
    const double sample_bytes =
        4.0 * batch_grid_points(config, shape) *
        static_cast<double>(shape.in_channels + 2 * config.max_rollout() * shape.out_channels);  // input, target, mask
    for (Line* l : {&e.activations.forward_backward, &e.activations.optimizer}) l->per_sample += extra * sample_bytes;
    for (Line& l : e.activations.small_batch) l.per_sample += extra * sample_bytes;
    e.sample_bytes += extra * sample_bytes;
  }
  // The formulas give one rank of a model-parallel group where the model describes its band (the
  // gnn on a rectangle), the trace always.
  e.activation_ranks = e.activations.ranks;
  // After the trace (which ran the step's kernels in this process): what the libraries hold.
  e.process_resident = process_resident_outside_allocator();
  const int64_t world = options.world_size < 1 ? 1 : options.world_size;
  e.states = model_states(e.activations.num_params, layout, config.distributed.zero_stage, world, e.activations.blocks);
  if (config.distributed.zero_stage >= 2 && config.train.accumulation > 1 && world > 1) {
    // Accumulating micro-batches hold full-size gradients until the step's reduce-scatter
    // (distributed/gradient_reducer.h), on top of the owned shard.
    e.states.grads += static_cast<double>(e.activations.num_params) * layout.param_bytes;
  }
  if (config.distributed.zero_stage >= 3 && world > 1) {
    // ZeRO-3 reduce-scatters block by block (a bucket never spans two blocks' units): a block's
    // gradients exist full size, as autograd made them, from its backward until its bucket is
    // packed into the send buffer, which lives until the reduce-scatter is done. One block's
    // gradients (or a bucket's, when buckets are smaller) beside the owned shard: the packing holds
    // two for a moment, at the end of the block's backward, when its activations are gone; one
    // lies within 6% of the measured peaks in docs/benchmarks.md, two overshoots where the
    // activations dominate (+10% on the storm ViT-Base at batch 4).
    const double block = static_cast<double>(e.activations.blocks.largest) * layout.param_bytes;
    const double bucket = config.distributed.bucket_mb * 1024.0 * 1024.0;
    e.states.grads += std::min(block, bucket);
  }
  // Registered buffers (the gnn's graph, normalisation constants) and the optimizer's padding are in
  // the traced states but not in the per-parameter formula; every rank holds them whole.
  const double unaccounted = static_cast<double>(e.activations.traced_states) - model_states(e.activations.num_params, layout, 0, 1).total();
  if (unaccounted > 0) e.states.params += unaccounted;
  return e;
}

std::optional<ActivationFit> rank_formula(const Estimate& e, int64_t ranks) {
  if (!e.formulas || ranks <= 1 || e.options.mode != Mode::kTrain) return std::nullopt;
  if (auto it = e.rank_formulas.find(ranks); it != e.rank_formulas.end()) return it->second;
  RunConfig c = e.config;
  c.distributed.model_parallel = ranks;
  std::optional<ActivationFit> a = analytic_activations(c, e.shape, e.options.mode);
  if (a->ranks != ranks) a.reset();  // the model's formulas give the whole grid
  e.rank_formulas[ranks] = a;
  return a;
}

bool per_rank_formulas(const Estimate& e) { return rank_formula(e, 2).has_value(); }

Breakdown model_parallel_breakdown(const Estimate& e, int64_t batch, int64_t ranks, const GpuSpec& gpu) {
  Breakdown b = e.breakdown(batch, std::nullopt);
  const int64_t P = std::max<int64_t>(1, ranks);
  // From the formulas (--analytic, or a run too large to trace) of a model that describes one rank
  // of a group (ModelMemory::ranks: the gnn on a rectangle, GraphCast, AIFS), the formulas at P
  // (rank_formula): the band they describe (the gnn's and AIFS's rank 0; GraphCast's rank with the
  // most mesh nodes) with its halos and its share of the batch-independent terms, not the whole grid
  // over P. What estimate() added to the formulas' lines (the micro-batches beyond those a trace
  // runs) is the difference of sample_bytes and the formulas' batch tensors, and is kept.
  if (P != e.activation_ranks) {
    if (const std::optional<ActivationFit> rank = rank_formula(e, P)) {
      const double added = std::max(0.0, e.sample_bytes - batch_tensor_bytes(e.config, e.shape));
      b.activations = std::max(0.0, rank->at(static_cast<double>(batch)) + added * static_cast<double>(batch));
      b.overhead = gpu_overhead(b.allocated(), e.libraries, gpu).total();
      return b;
    }
  }
  // Otherwise a projection from what the estimate holds (a trace of rank 0 of its own group, or the
  // whole grid's formulas): activations x activation_ranks / P.
  b.activations *= static_cast<double>(e.activation_ranks) / static_cast<double>(P);
  b.overhead = gpu_overhead(b.allocated(), e.libraries, gpu).total();
  return b;
}

ModelParallelFit model_parallel_fit(const Estimate& e, const GpuSpec& gpu) {
  ModelParallelFit f;
  f.gpu = gpu;
  for (int64_t p = 1; p <= kMaxModelParallel; ++p) {
    f.per_rank = model_parallel_breakdown(e, e.batch(), p, gpu);
    f.per_rank_formula = p > 1 && rank_formula(e, p).has_value();
    if (f.per_rank.total() <= static_cast<double>(gpu.memory_bytes)) {
      f.ranks = p;
      break;
    }
  }
  return f;
}

bool model_can_shard(const RunConfig& config) {
  const ModelSchema* schema = find_model_schema(config.model.name);
  return schema && schema->shards_grid;
}

std::vector<MemorySaver> memory_savers(const RunConfig& config, int64_t world_size) {
  std::vector<MemorySaver> savers;
  auto add = [&](std::string setting, auto apply, bool states_only = false) {
    RunConfig changed = config;
    apply(changed);
    savers.push_back({std::move(setting), std::move(changed), states_only});
  };
  if (!config.train.checkpointing) {
    add("train.checkpointing = true", [](RunConfig& c) { c.train.checkpointing = true; });
  }
  if (config.max_rollout() > 1 && !config.train.rollout_checkpointing) {
    add("train.rollout_checkpointing = true", [](RunConfig& c) { c.train.rollout_checkpointing = true; });
  }
  if (config.train.precision != Precision::kBf16) {
    add("train.precision = \"bf16\"", [](RunConfig& c) { c.train.precision = Precision::kBf16; });
  }
  // The model's own (AIFS: more mapper chunks where its mappers hold the peak).
  if (const auto& own = models::find_model(config.model.name).memory_savers)
    for (models::ModelMemorySaver& saver : own(config, /*inference=*/false)) add(saver.setting, saver.apply);
  if (world_size > 1 && config.distributed.zero_stage < 3) {
    const int64_t stage = config.distributed.zero_stage + 1;
    add("distributed.zero_stage = " + std::to_string(stage),
        [&](RunConfig& c) { c.distributed.zero_stage = stage; }, /*states_only=*/true);
  }
  return savers;
}

std::string ways_to_save_memory(const RunConfig& config, int64_t batch, Mode mode) {
  std::vector<std::string> ways;
  if (mode == Mode::kInference) {
    // A forward pass holds the weights and one step's activations: their precision and the batch.
    if (config.train.precision != Precision::kBf16) ways.push_back("train.precision = \"bf16\"");
    if (const auto& own = models::find_model(config.model.name).memory_savers)
      for (const models::ModelMemorySaver& saver : own(config, /*inference=*/true)) ways.push_back(saver.setting);
    if (batch > 1) ways.push_back("a smaller batch");
    ways.push_back("a GPU with more memory");
  } else {
    // The savers of one rank; ZeRO, which needs more of them, comes last.
    for (const MemorySaver& saver : memory_savers(config, /*world_size=*/1)) ways.push_back(saver.setting);
    if (batch > 1) ways.push_back("a smaller batch");
    ways.push_back("distributed.zero_stage with more ranks");
  }
  std::string out;
  for (size_t i = 0; i < ways.size(); ++i) out += (i == 0 ? "" : i + 1 == ways.size() ? ", or " : ", ") + ways[i];
  return out;
}

}  // namespace wxtrain::estimator
