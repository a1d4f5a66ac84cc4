#pragma once
// `wxtrain tune-batch`: the largest micro-batch that trains within the memory budget, found with
// as few real probes as possible. A probe builds a fresh TrainingState and runs the trainer's own
// TrainingStep at one batch size under the memory meter with the budget set; it passes when
// nothing runs out of memory and the measured peak stays under (1 - margin) x budget. On the CPU
// the budget is the process's resident memory: the counting allocator's peak plus what the process
// holds outside it (estimator/cpu_overhead.h), modelled, must stay under the target.
//
// The search (secant_search) starts at the estimator's prediction and uses the measured peaks:
// memory is close to linear in the batch size, so the next candidate is where the line through
// the measurements (the estimator's slope at first, then the secant of two probes) reaches the
// target. Each probe lands strictly inside the bracket [largest pass, smallest fail]; when three
// measured probes in a row land on the same side of the answer (a secant stalling on curved or stepped
// memory), the next candidate is a bisection (or a doubling while nothing has failed), so the
// search always ends with the exact answer.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/config.h"
#include "estimator/cpu_overhead.h"
#include "distributed/communicator.h"
#include "models/weather_model.h"

namespace wxtrain::autotune {

// One probe at one batch size.
struct Probe {
  int64_t batch = 0;
  int64_t peak = 0;      // highest allocated bytes seen (absolute; on OOM: what was in use at the failure)
  bool oom = false;      // an allocation ran past the budget
  bool passed = false;   // no OOM and peak + overhead <= target
  double seconds = 0;    // wall time of the probe (build + steps + release)
  int64_t leaked = 0;    // allocated bytes after the probe minus before it (0 when everything was released)
  int64_t overhead = 0;  // modelled bytes outside the meter at this batch (CPU); peak + overhead is what counts
  int64_t members = 1;   // ensemble members per sample the probe ran (train.ensemble_members; 1: deterministic)
  int64_t need() const { return peak + overhead; }
};

// A probe at `batch`: what the search learns from the hardware (or from a model of it in tests).
using ProbeFn = std::function<Probe(int64_t batch)>;

struct SearchOptions {
  int64_t target = 0;           // bytes a passing probe's peak stays under
  int64_t budget = 0;           // bytes past which allocations fail (an OOM probe needed more); 0 = unknown
  int64_t multiple_of = 1;      // candidates are multiples of this
  int64_t max_batch = 4096;     // never probe above (rounded down to multiple_of)
  int64_t start = 0;            // predicted largest batch (the estimator's); 0 = unknown, start at multiple_of
  double slope = 0;             // predicted bytes per sample; 0 = unknown until two probes measured it
};

struct SearchResult {
  int64_t batch = 0;            // largest passing batch (0: even multiple_of failed)
  std::vector<Probe> probes;    // in the order they ran
};

// wxtrain's search: start at the prediction, secant steps on the measured peaks, bracketing,
// bisection fallback. Exact for any memory curve that is non-decreasing in the batch size.
SearchResult secant_search(const SearchOptions& options, const ProbeFn& probe);

// Lightning's BatchSizeFinder ("binsearch"): 1, 2, 4, ... x multiple_of until a failure (or
// max_batch), then bisection. For the benchmark against secant_search on the same probes.
SearchResult doubling_search(const SearchOptions& options, const ProbeFn& probe);

// Runs real probes: each builds a fresh TrainingState (model, ZeroDataParallel on `comm`),
// runs memory.probe_steps TrainingStep::run calls on synthetic micro-batches of the configured
// shape with the meter's budget set, then releases everything (and the caching allocator's
// cache). Under MPI every rank probes the same batch and the ranks agree: a probe passes only
// when it passed on every rank, and the peak reported is the highest rank's.
class BatchProber {
 public:
  BatchProber(RunConfig config, models::ModelShape shape, torch::Device device,
              std::shared_ptr<distributed::Communicator> comm, int64_t budget, int64_t target);
  Probe operator()(int64_t batch);
  // A probe at `batch` with `members` ensemble members per sample (2 or more; the run file's other
  // settings as they are): what `tune-batch --search members` probes.
  Probe probe(int64_t batch, int64_t members);
  // What the process holds outside the meter (CPU): a probe's allowance is the budget less it.
  void set_overhead(const estimator::CpuOverhead& overhead) { overhead_ = overhead; }

 private:
  estimator::CpuOverhead overhead_;
  RunConfig config_;
  models::ModelShape shape_;
  torch::Device device_;
  std::shared_ptr<distributed::Communicator> comm_;
  int64_t budget_;
  int64_t target_;
};

// What else would raise the batch: the run re-estimated with one change (no probes).
struct Suggestion {
  std::string change;     // "train.checkpointing = true"
  int64_t max_batch = 0;  // estimated largest micro-batch within the target with that change
};

// What tune-batch searches: the micro-batch (members fixed, the default), or for an ensemble
// (train.ensemble_members > 1) the members per sample at the configured micro-batch.
enum class SearchDimension { kBatch, kMembers };

struct TuneReport {
  SearchDimension search = SearchDimension::kBatch;
  // --search members: the answer, the most members per sample (per rank) that fit at `batch`; the
  // estimate's, and the one it is sure of (the error band, as sure_batch), where the search starts.
  int64_t members = 0;
  int64_t estimated_members = 0;
  int64_t sure_members = 0;
  std::string device;           // "cpu", "cuda:0"
  std::string meter;            // the meter's name
  int world_size = 1;
  int64_t budget = 0;           // bytes: memory.limit, else the device's capacity
  double margin = 0;            // share of the budget kept free
  int64_t target = 0;           // (1 - margin) x budget
  int64_t baseline = 0;         // allocated before the first probe (the process's own tensors)
  int64_t multiple_of = 1;
  int64_t max_batch = 0;        // the search's ceiling: memory.max_batch, or the data's cap below it
  // The training samples each rank holds (TuneOptions::samples_per_rank), when they, not
  // memory.max_batch, set the ceiling; 0 otherwise. With batch == max_batch, the data decided.
  int64_t data_cap = 0;
  bool capped_by_data() const { return data_cap > 0 && batch == max_batch; }
  int64_t estimated_batch = 0;  // the estimator's predicted maximum
  // The largest batch the estimate is sure of on this device (its measured error band,
  // estimator/error_band.h), where the search starts; on the CPU, whose trace is its own
  // measurement, estimated_batch.
  int64_t sure_batch = 0;
  double estimated_slope = 0;   // the estimator's bytes per sample at that batch (CPU overhead's included)
  estimator::CpuOverhead cpu_overhead;  // modelled bytes outside the meter (zero on a GPU or when turned off)
  std::vector<Probe> probes;
  int64_t batch = 0;            // the answer
  int64_t accumulation = 1;
  int64_t effective_batch = 0;  // batch x accumulation x data-parallel groups (world / model_parallel)
  std::vector<Suggestion> suggestions;
  double seconds = 0;           // the whole tuning, estimates included
};

struct TuneOptions {
  // Re-estimate with each of estimator::memory_savers (checkpointing, bf16, ZeRO's next stage, ...)
  // to say what would allow more.
  bool suggestions = true;
  // Called after each probe (progress lines in the CLI); may be empty.
  std::function<void(const Probe&)> on_probe;
  // On the CPU, count what the process holds outside the counting allocator (cpu_overhead.h)
  // against the budget. Off: the budget is for the counted tensors alone (an emulated device).
  bool cpu_overhead = true;
  // The training samples each rank holds (0: unknown, a run file without data): a micro-batch is
  // never searched above it, since the loader could not fill one batch per rank.
  int64_t samples_per_rank = 0;
  // kMembers: search the members per sample of an ensemble at the run's micro-batch
  // (train.batch_size, which must be a number), 2 to estimator::kMaxMembers, exactly as the batch
  // is searched (secant_search, started where the estimate is sure). Suggestions are not made.
  SearchDimension search = SearchDimension::kBatch;
};

// Tunes `config` (memory.limit, margin, multiple_of, max_batch and probe_steps as configured) on
// `device` with `comm` (nullptr: the current world's communicator). Throws wxtrain::Error when even
// a micro-batch of memory.multiple_of does not fit, naming the peak, the target and what to try.
TuneReport tune_batch_report(const RunConfig& config, torch::Device device,
                             std::shared_ptr<distributed::Communicator> comm = nullptr,
                             const TuneOptions& options = {});

// For train.batch_size = "auto": the tuned micro-batch (no suggestions, no output).
int64_t tune_batch(const RunConfig& config, torch::Device device,
                   std::shared_ptr<distributed::Communicator> comm = nullptr);

// One line on what decided the tuned batch when the data did: "micro-batch 12 is all the training
// split holds per rank (12 samples on each of 1 rank(s)): the data, not memory, caps it (memory
// would allow about 40)"; "" when memory decided.
std::string describe_data_cap(const TuneReport& report);

}  // namespace wxtrain::autotune
