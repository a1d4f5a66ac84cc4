#pragma once
// `wxtrain profile`: runs the trainer's own TrainingStep for N steps on synthetic micro-batches of
// the configured shape and records what the memory meter sees: allocated/reserved/peak after each
// step, the peak of each phase, a sampled timeline of one step with its phase boundaries and, on
// request, the allocator's event history as a memory_viz snapshot.
// Lives next to the tuner because both measure the real step under the meter; the CLI only
// formats what this returns.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/config.h"
#include "distributed/communicator.h"
#include "estimator/cpu_overhead.h"

namespace wxtrain::autotune {

struct StepRecord {
  int64_t step = 0;          // 1-based
  double timestamp = 0;      // Unix time (seconds) when the step finished
  double seconds = 0;        // wall time of the step
  int64_t allocated = 0;     // bytes allocated after the step
  int64_t reserved = 0;      // bytes reserved after the step (CPU: = allocated)
  int64_t peak_forward_backward = 0;
  int64_t peak_optimizer = 0;
  int64_t peak() const { return std::max(peak_forward_backward, peak_optimizer); }
};

// One step's allocated bytes sampled from a background thread, with the phase boundaries.
struct StepTimeline {
  int64_t step = 0;
  std::vector<double> ms;          // time since the step began
  std::vector<int64_t> allocated;  // bytes
  double optimizer_start_ms = 0;   // forward/backward ends here and the optimizer phase begins
  double end_ms = 0;               // the step returned
};

struct ProfileOptions {
  int64_t steps = 10;
  int64_t timeline_step = 0;       // which step to sample (1-based; 0 = the last, i.e. steady state)
  double sample_interval_ms = 0.25;
  // > 0: record the allocator's history over the steps, keeping at most this many events, into
  // ProfileReport::snapshot (CUDA: the caching allocator's, core/cuda/cuda_backend.h; CPU: the
  // counting allocator's, core/memory_history.h).
  int64_t snapshot_entries = 0;
  // CPU: measure what the process holds outside the counting allocator after the steps
  // (ProfileReport::cpu_overhead), which the threshold then judges with the tensors, as estimate and
  // tune-batch count a CPU run. Off (--tensors-only): the tensors alone, an emulated device.
  bool cpu_overhead = true;
};

struct ProfileReport {
  std::string device, meter;
  int64_t batch = 0;               // micro-batch (train.batch_size, or tuned when "auto")
  int64_t members = 1;             // ensemble members per sample (train.ensemble_members): rows = batch x members
  int64_t accumulation = 1;
  int64_t baseline = 0;            // allocated before the model was built
  int64_t states = 0;              // allocated after building model, optimizer and inputs
  std::vector<StepRecord> steps;
  StepTimeline timeline;
  // With snapshot_entries: the memory snapshot after the last step, pickled as
  // torch.cuda.memory._dump_snapshot writes it (segments and the steps' allocation events), for
  // pytorch.org/memory_viz and `python -m torch.cuda._memory_viz`.
  std::string snapshot;
  int64_t peak() const;                   // highest peak of any step
  int64_t peak_forward_backward() const;  // highest forward/backward peak of any step
  int64_t peak_optimizer() const;         // highest optimizer-phase peak of any step
  int64_t steady_allocated() const;       // median allocated after steps 2..N (after step 1 when N = 1)
  // CPU (ProfileOptions::cpu_overhead): the resident bytes outside the counting allocator, the
  // estimator's model (estimator/cpu_overhead.h) with its fixed part measured in this process after
  // the steps and its per-sample part from the steps' activations (peak less steady allocated).
  // Zero on CUDA, where the caching allocator's figure is the whole.
  estimator::CpuOverhead cpu_overhead;
  int64_t overhead_at_batch() const { return static_cast<int64_t>(cpu_overhead.at(static_cast<double>(batch))); }
  // What --threshold judges: the peak of the counted tensors plus the CPU overhead at the batch.
  int64_t judged_peak() const { return peak() + overhead_at_batch(); }
};

// Throws ConfigError for steps <= 0 or snapshot_entries < 0.
ProfileReport profile_memory(const RunConfig& config, torch::Device device,
                             std::shared_ptr<distributed::Communicator> comm = nullptr,
                             const ProfileOptions& options = {});

// `--threshold`: PASS when the peak is at or below the threshold.
struct ThresholdVerdict {
  bool pass = false;
  int64_t peak = 0;
  int64_t threshold = 0;
  int64_t headroom = 0;   // threshold - peak (negative: over by that much)
  std::string message;    // "PASS: peak 1.20 GiB <= threshold 2.00 GiB (0.80 GiB, 40.0% headroom)"
};
ThresholdVerdict check_threshold(int64_t peak, int64_t threshold);
// The profile's verdict: judged_peak() against the threshold; the message says what was judged
// ("peak 1.2 GiB = 0.7 GiB of tensors + 0.5 GiB the process holds outside the allocator").
ThresholdVerdict check_threshold(const ProfileReport& report, int64_t threshold);

// Parses a size for `flag` ("22GiB"); throws ConfigError naming the flag and the text otherwise.
int64_t parse_size_argument(const std::string& flag, const std::string& text);

// The per-step log: timestamp,step,allocated_GB,reserved_GB,peak_GB (GB = 1e9 bytes). An ensemble
// (members > 1) adds members,peak_per_member_GB,activations_per_member_GB: the step's peak, and its
// activations (peak less what stays allocated after the step), over the members per sample. With a
// threshold (> 0, --threshold) every run adds judged_peak_GB,threshold_GB,result: the step's peak as
// check_threshold judges it (with the CPU overhead at the batch) and PASS or FAIL for that step.
std::string steps_csv(const ProfileReport& report, int64_t threshold = 0);

}  // namespace wxtrain::autotune
