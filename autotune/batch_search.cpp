#include "autotune/batch_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <c10/util/Exception.h>

#include "core/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/memory_meter.h"
#include "core/units.h"
#include "estimator/estimate.h"
#include "trainer/training_step.h"

namespace wxtrain::autotune {

namespace {

// The data-parallel groups a world of `world` ranks makes: the ranks of a model-parallel group share
// their samples (distributed.model_parallel), so a step takes batch x accumulation x groups samples.
// One process running a rank's step (the stand-in group) is one group.
int64_t data_parallel_groups(int64_t world, const RunConfig& config) {
  return std::max<int64_t>(1, world / std::max<int64_t>(1, config.distributed.model_parallel));
}

int64_t grid_max(const SearchOptions& o) {
  if (o.multiple_of < 1) throw ConfigError("memory.multiple_of must be at least 1");
  const int64_t kmax = o.max_batch / o.multiple_of;
  if (kmax < 1)
    throw ConfigError("memory.max_batch = " + std::to_string(o.max_batch) + " is below memory.multiple_of = " +
                      std::to_string(o.multiple_of) + ": no batch size to try");
  return kmax;
}

// Where the line through the measurements reaches the target (a batch size, not rounded).
// Prefers the secant of the two measured peaks nearest the target; with one measurement (or a
// non-increasing secant) it uses the estimator's slope. OOM probes only know a lower bound of
// their peak and enter only through the one-point form.
std::optional<double> predict(const std::vector<Probe>& probes, const SearchOptions& o) {
  const double target = static_cast<double>(o.target);
  std::vector<const Probe*> exact;
  for (const auto& p : probes)
    if (!p.oom) exact.push_back(&p);
  std::sort(exact.begin(), exact.end(), [&](const Probe* a, const Probe* b) {
    return std::fabs(static_cast<double>(a->need()) - target) < std::fabs(static_cast<double>(b->need()) - target);
  });
  if (exact.size() >= 2) {
    const Probe* a = exact[0];
    for (size_t i = 1; i < exact.size(); ++i) {
      const Probe* b = exact[i];
      if (b->batch == a->batch) continue;
      const double slope = static_cast<double>(b->need() - a->need()) / static_cast<double>(b->batch - a->batch);
      if (slope > 0 && std::isfinite(slope))
        return static_cast<double>(a->batch) + (target - static_cast<double>(a->need())) / slope;
      break;
    }
  }
  if (o.slope > 0) {
    if (!exact.empty())
      return static_cast<double>(exact[0]->batch) + (target - static_cast<double>(exact[0]->need())) / o.slope;
    if (!probes.empty()) {
      // Only OOMs so far: the smallest one needed more than the budget (what the meter saw before
      // the failed allocation says little), so its line runs through the budget at the least.
      const Probe* oom = &*std::min_element(probes.begin(), probes.end(),
                                            [](const Probe& a, const Probe& b) { return a.batch < b.batch; });
      const double need = std::max(static_cast<double>(oom->need()), static_cast<double>(o.budget));
      return static_cast<double>(oom->batch) + (target - need) / o.slope;
    }
  }
  return std::nullopt;
}

}  // namespace

// Candidates are grid indices k (batch = k x multiple_of) in [1, kmax]. The bracket is lo (largest
// passing index, 0 = none yet) and hi (smallest failing index, kmax + 1 = none yet).
SearchResult secant_search(const SearchOptions& o, const ProbeFn& probe) {
  const int64_t m = o.multiple_of;
  const int64_t kmax = grid_max(o);
  int64_t lo = 0, hi = kmax + 1;
  bool failed = false;
  SearchResult result;
  int64_t k = o.start > 0 ? std::clamp<int64_t>(o.start / m, 1, kmax) : 1;
  // Probes in a row with the same outcome (run), and how many of those measured their peak
  // (streak): an OOM probe carries little information, so it does not count as the line failing.
  int run = 0, streak = 0;
  bool last_passed = false;

  while (true) {
    k = std::clamp<int64_t>(k, lo + 1, hi - 1);
    Probe p = probe(k * m);
    result.probes.push_back(p);
    if (result.probes.size() > 1 && p.passed == last_passed) {
      ++run;
      streak += p.oom ? 0 : 1;
    } else {
      run = 1;
      streak = p.oom ? 0 : 1;
    }
    last_passed = p.passed;
    if (p.passed) {
      lo = k;
    } else {
      hi = k;
      failed = true;
    }
    if (hi - lo <= 1) break;

    // A safeguarded step: doubling while nothing has failed, bisection once bracketed.
    auto safeguard = [&] { return failed ? lo + (hi - lo) / 2 : std::max<int64_t>(2 * lo, lo + 1); };
    const std::optional<double> b = predict(result.probes, o);
    if (!b) {
      k = safeguard();
      continue;
    }
    const double kp_real = std::floor(*b / static_cast<double>(m));
    const int64_t kp = kp_real < 0 ? 0 : kp_real > static_cast<double>(kmax + 1) ? kmax + 1 : static_cast<int64_t>(kp_real);
    // The line says lo is the answer: confirm with the batch above it (or says hi - 1 passes:
    // confirm that). Interior predictions follow the line unless three measured probes in a row
    // landed on one side, the mark of a secant that stalls on a curved or stepped memory profile.
    const bool trusted = streak < 4 && run < 6;
    if (kp <= lo && trusted) k = lo + 1;
    else if (kp >= hi && trusted) k = hi - 1;
    else if (streak >= 3 || run >= 6) k = safeguard();
    else k = kp;
  }
  result.batch = lo * m;
  return result;
}

SearchResult doubling_search(const SearchOptions& o, const ProbeFn& probe) {
  const int64_t m = o.multiple_of;
  const int64_t kmax = grid_max(o);
  int64_t lo = 0, hi = kmax + 1;
  bool failed = false;
  SearchResult result;
  int64_t k = 1;
  while (true) {
    Probe p = probe(k * m);
    result.probes.push_back(p);
    if (p.passed) lo = k;
    else {
      hi = k;
      failed = true;
    }
    if (hi - lo <= 1) break;
    k = failed ? lo + (hi - lo) / 2 : std::min(2 * k, kmax);
  }
  result.batch = lo * m;
  return result;
}

BatchProber::BatchProber(RunConfig config, models::ModelShape shape, torch::Device device,
                         std::shared_ptr<distributed::Communicator> comm, int64_t budget, int64_t target)
    : config_(std::move(config)), shape_(shape), device_(device), comm_(std::move(comm)), budget_(budget),
      target_(target) {}

Probe BatchProber::operator()(int64_t batch) { return probe(batch, config_.train.ensemble_members); }

Probe BatchProber::probe(int64_t batch, int64_t members) {
  RunConfig config = config_;
  config.train.ensemble_members = members;
  MemoryMeter& meter = memory_meter(device_);
  meter.release_cached();
  const int64_t before = meter.snapshot().allocated;
  const int64_t previous_limit = meter.limit();
  const auto t0 = std::chrono::steady_clock::now();
  Probe p;
  p.batch = batch;
  p.members = members;
  // With several ranks an out-of-memory error on one rank mid-step would leave the others inside a
  // collective it never joins. On the CPU the budget is emulated, so under MPI it is not enforced
  // by throwing: every rank runs the probe to the end and the agreed peak decides.
  const bool lockstep = comm_ && comm_->size() > 1;
  // What the process holds outside the meter at this batch leaves the tensors the rest of the budget.
  p.overhead = static_cast<int64_t>(std::ceil(overhead_.at(static_cast<double>(batch))));
  const int64_t allowance = std::max<int64_t>(1, budget_ - p.overhead);  // 1: nothing fits (0 = no limit)
  meter.set_limit(lockstep && device_.is_cpu() ? 0 : budget_ > 0 ? allowance : 0);
  meter.reset_peak();
  try {
    // Everything the probe allocates lives in this scope and is gone when it ends (or unwinds).
    auto state = trainer::build_training_state(config, shape_, comm_, device_);
    auto micro = trainer::synthetic_micro_batches(config, shape_, batch, config.train.accumulation, device_);
    p.peak = meter.snapshot().peak;
    trainer::TrainingStep step(*state, &meter);
    for (int64_t i = 0; i < config.memory.probe_steps; ++i) {
      const trainer::StepResult r = step.run(micro, config.train.lr);
      p.peak = std::max({p.peak, r.peak_forward_backward, r.peak_optimizer});
    }
  } catch (const c10::OutOfMemoryError&) {
    p.oom = true;
    p.peak = std::max(p.peak, meter.snapshot().peak);
  }
  meter.set_limit(previous_limit);
  meter.release_cached();
  p.leaked = meter.snapshot().allocated - before;
  if (comm_ && comm_->size() > 1) {
    // Lockstep: every rank ran this batch; all must pass, and the fullest rank's peak counts.
    p.oom = comm_->any(p.oom);
    p.peak = static_cast<int64_t>(comm_->max(static_cast<double>(p.peak)));
    p.leaked = static_cast<int64_t>(comm_->max(static_cast<double>(p.leaked)));
  }
  if (lockstep && p.need() > budget_) p.oom = true;  // what the emulated budget would have raised
  p.passed = !p.oom && p.need() <= target_;
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

namespace {

double slope_at(const estimator::ActivationFit& fit, double batch) {
  return fit.forward_backward.at(batch) >= fit.optimizer.at(batch) ? fit.forward_backward.per_sample
                                                                    : fit.optimizer.per_sample;
}

// --search members: the batch is the run's, the members per sample are searched. The grid index k
// of secant_search is members - 1 (k = 1: 2 members, the fewest an afCRPS takes), memory is as
// linear in the members as in the batch (the model runs batch x members rows), so the estimate's
// start and per-member slope guide it as they guide the batch search.
TuneReport tune_members(const RunConfig& config, torch::Device device,
                        const std::shared_ptr<distributed::Communicator>& comm, const TuneOptions& options,
                        const estimator::Estimate& e, const std::optional<estimator::GpuSpec>& gpu, int64_t room,
                        TuneReport report, std::chrono::steady_clock::time_point t0) {
  report.search = SearchDimension::kMembers;
  const int64_t batch = config.train.batch_size;
  const bool cpu_overhead = device.is_cpu() && options.cpu_overhead;
  report.estimated_members =
      device.is_cpu() ? e.cpu_max_members(room, batch, cpu_overhead) : e.max_members(room, gpu, batch);
  report.sure_members = device.is_cpu() ? report.estimated_members : e.sure_max_members(room, gpu, batch);
  report.estimated_batch = device.is_cpu() ? e.cpu_max_batch(room, cpu_overhead ? e.cpu_overhead() : estimator::CpuOverhead{})
                                           : e.max_batch(room, gpu);
  report.sure_batch = device.is_cpu() ? report.estimated_batch : e.sure_max_batch(room, gpu);
  // Bytes per member at this batch (the CPU overhead's share of them included).
  report.estimated_slope = e.member_bytes_per_sample() * static_cast<double>(batch) *
                           (1.0 + (cpu_overhead ? estimator::kUnseenPerSampleShare : 0.0));
  report.max_batch = batch;

  SearchOptions so;
  so.target = report.target;
  so.budget = report.budget;
  so.multiple_of = 1;
  so.max_batch = estimator::kMaxMembers - 1;
  so.start = report.sure_members >= 2 ? report.sure_members - 1 : 0;
  so.slope = report.estimated_slope;
  const models::ModelShape shape = models::model_shape(config);
  BatchProber prober(config, shape, device, comm, report.budget, report.target);
  std::vector<Probe> probes;
  ProbeFn probe = [&](int64_t k) {
    const int64_t members = k + 1;
    if (cpu_overhead) prober.set_overhead(e.with_members(members).cpu_overhead());
    Probe p = prober.probe(batch, members);
    probes.push_back(p);
    if (options.on_probe) options.on_probe(p);
    p.batch = k;  // the search's grid
    return p;
  };
  const SearchResult found = secant_search(so, probe);
  report.probes = probes;
  report.members = found.batch > 0 ? found.batch + 1 : 0;
  report.batch = batch;
  report.effective_batch = report.batch * report.accumulation * data_parallel_groups(report.world_size, config);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (report.members == 0) {
    const Probe& first = probes.front().members == 2 ? probes.front()
                                                     : *std::find_if(probes.begin(), probes.end(),
                                                                     [](const Probe& p) { return p.members == 2; });
    throw Error("even 2 members per sample do not fit at micro-batch " + std::to_string(batch) + ": " +
                (first.oom ? std::string("they ran out of the ") + format_bytes(static_cast<double>(report.budget)) + " budget"
                           : "the peak " + format_bytes(static_cast<double>(first.need())) + " is above the target " +
                                 format_bytes(static_cast<double>(report.target))) +
                "; try a smaller train.batch_size, or " + estimator::ways_to_save_memory(config, batch));
  }
  return report;
}

}  // namespace

TuneReport tune_batch_report(const RunConfig& config, torch::Device device,
                             std::shared_ptr<distributed::Communicator> comm, const TuneOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (options.search == SearchDimension::kMembers) {
    // Before any estimate or probe: what --search members cannot search.
    if (!config.train.ensemble())
      throw ConfigError(config.path + ": tune-batch --search members needs an ensemble run: train.ensemble_members = " +
                        std::to_string(config.train.ensemble_members) +
                        " is the deterministic model (set it to 2 or more; its noise channels are part of the model)");
    if (config.train.batch_auto)
      throw ConfigError(config.path + ": tune-batch --search members keeps the micro-batch fixed: train.batch_size = "
                                      "\"auto\" gives none (set a number, or search the batch first)");
  }
  if (!comm) comm = distributed::make_communicator(distributed::current_world(), config.distributed, device);
  MemoryMeter& meter = memory_meter(device);
  const models::ModelShape shape = models::model_shape(config);
  const MemoryConfig& mem = config.memory;

  TuneReport report;
  report.device = device.str();
  report.meter = meter.name();
  report.world_size = comm->size();
  report.budget = mem.limit > 0 ? mem.limit : meter.capacity();
  report.margin = mem.margin;
  report.target = static_cast<int64_t>(std::floor((1.0 - mem.margin) * static_cast<double>(report.budget)));
  report.multiple_of = mem.multiple_of;
  report.max_batch = mem.max_batch;
  report.accumulation = config.train.accumulation;
  meter.release_cached();
  report.baseline = meter.snapshot().allocated;
  auto check_baseline = [&](double outside, const std::string& what) {
    if (static_cast<double>(report.baseline) + outside >= static_cast<double>(report.target))
      throw Error("the memory budget " + format_bytes(static_cast<double>(report.budget)) + " less the margin (" +
                  format_bytes(static_cast<double>(report.target)) + ") is already used by " +
                  format_bytes(static_cast<double>(report.baseline)) + " of tensors" + what +
                  " before any probe: raise memory.limit");
  };
  check_baseline(0, "");

  // The estimator's prediction (traced once on the CPU) is where the search starts; on a GPU its
  // overhead model for this device's size is included, on the CPU there is none.
  estimator::EstimateOptions eo;
  eo.world_size = report.world_size;
  // For the device in hand: on the CPU the probes run wxtrain's fused kernels, and so does the trace.
  RunConfig on_device = config;
  on_device.train.device = device.is_cuda() ? "cuda" : "cpu";
  const estimator::Estimate e = estimator::estimate(on_device, shape, eo);
  // The device's architecture picks the overhead model's cuBLAS workspace and context figures.
  const std::optional<estimator::GpuSpec> gpu =
      device.is_cuda() ? std::optional(estimator::GpuSpec{"device", report.meter, report.target, false,
                                                          cuda::properties(device.has_index() ? device.index() : 0).compute_capability})
                       : std::nullopt;
  const int64_t room = device.is_cuda() ? report.target : report.target - report.baseline;
  // On the CPU the budget is the resident set: the counted tensors plus what the process holds
  // outside the allocator, measured after the estimator's trace ran the step's kernels here.
  if (device.is_cpu() && options.cpu_overhead) {
    report.cpu_overhead = e.cpu_overhead();
    check_baseline(report.cpu_overhead.process,
                   " and " + format_bytes(report.cpu_overhead.process) +
                       " the process holds outside the allocator (libraries, threads; estimator/cpu_overhead.h)");
  }
  auto max_of = [&](const estimator::Estimate& est) {
    if (!device.is_cpu()) return est.max_batch(room, gpu);
    return est.cpu_max_batch(room, options.cpu_overhead ? est.cpu_overhead() : estimator::CpuOverhead{});
  };
  report.estimated_batch = max_of(e);
  // A GPU has been measured to need up to the band above the central estimate: the search starts
  // where the estimate is sure, so that its first probe passes rather than runs out of memory.
  report.sure_batch = device.is_cpu() ? report.estimated_batch : e.sure_max_batch(room, gpu);
  report.estimated_slope = slope_at(e.activations, static_cast<double>(std::max<int64_t>(report.estimated_batch, 1))) +
                           report.cpu_overhead.per_sample;

  if (options.search == SearchDimension::kMembers) return tune_members(config, device, comm, options, e, gpu, room, report, t0);

  // A batch larger than the training split could never be filled: the data caps the search.
  if (options.samples_per_rank > 0 && options.samples_per_rank < mem.max_batch) {
    if (options.samples_per_rank < mem.multiple_of)
      throw ConfigError("the training split holds " + std::to_string(options.samples_per_rank) +
                        " sample(s) per rank, fewer than memory.multiple_of = " + std::to_string(mem.multiple_of) +
                        ": lower memory.multiple_of, or give the run more training data or fewer ranks");
    report.data_cap = options.samples_per_rank;
    report.max_batch = options.samples_per_rank / mem.multiple_of * mem.multiple_of;
  }

  SearchOptions so;
  so.target = report.target;
  so.budget = report.budget;
  so.multiple_of = mem.multiple_of;
  so.max_batch = report.max_batch;
  so.start = std::min(report.sure_batch, report.max_batch);
  so.slope = report.estimated_slope;
  BatchProber prober(config, shape, device, comm, report.budget, report.target);
  prober.set_overhead(report.cpu_overhead);
  ProbeFn probe = [&](int64_t batch) {
    Probe p = prober(batch);
    if (options.on_probe) options.on_probe(p);
    return p;
  };
  SearchResult found = secant_search(so, probe);
  report.probes = found.probes;
  report.batch = found.batch;
  report.effective_batch = report.batch * report.accumulation * data_parallel_groups(report.world_size, config);

  if (options.suggestions) {
    for (const estimator::MemorySaver& saver : estimator::memory_savers(on_device, report.world_size)) {
      // ZeRO shards the states anew over the same activations; the other savers are traced again.
      estimator::Estimate changed = saver.states_only ? e : estimator::estimate(saver.config, shape, eo);
      if (saver.states_only) {
        changed.config = saver.config;
        changed.states = estimator::model_states(
            e.activations.num_params,
            estimator::state_layout(config.train.precision, config.train.optimizer, config.train.momentum),
            saver.config.distributed.zero_stage, report.world_size, e.activations.blocks);
      }
      report.suggestions.push_back({saver.setting, max_of(changed)});
    }
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (report.batch == 0) {
    const Probe& first = *std::find_if(report.probes.begin(), report.probes.end(),
                                       [&](const Probe& p) { return p.batch == mem.multiple_of; });
    throw Error("even a micro-batch of " + std::to_string(mem.multiple_of) + " does not fit: " +
                (first.oom ? std::string("it ran out of the ") + format_bytes(static_cast<double>(report.budget)) +
                                 " budget"
                           : "its peak " + format_bytes(static_cast<double>(first.peak)) +
                                 (first.overhead > 0 ? " plus " + format_bytes(static_cast<double>(first.overhead)) +
                                                           " outside the allocator"
                                                     : std::string()) +
                                 " is above the target " +
                                 format_bytes(static_cast<double>(report.target))) +
                " (budget less " + std::to_string(static_cast<int>(std::lround(report.margin * 100))) +
                "% margin); try " + estimator::ways_to_save_memory(config, mem.multiple_of) + " (or a larger memory.limit)");
  }
  return report;
}

std::string describe_data_cap(const TuneReport& r) {
  if (!r.capped_by_data()) return "";
  return "micro-batch " + std::to_string(r.batch) + " is the most the training split fills (" +
         std::to_string(r.data_cap) + " sample(s) per rank on " + std::to_string(r.world_size) +
         " rank(s)): the data, not memory, capped the search (the estimate allows " +
         std::to_string(r.estimated_batch) + ")";
}

int64_t tune_batch(const RunConfig& config, torch::Device device, std::shared_ptr<distributed::Communicator> comm) {
  TuneOptions options;
  options.suggestions = false;
  return tune_batch_report(config, device, std::move(comm), options).batch;
}

}  // namespace wxtrain::autotune
