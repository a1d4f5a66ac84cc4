#include "autotune/memory_profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "autotune/batch_search.h"
#include "core/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/memory_history.h"
#include "core/memory_meter.h"
#include "core/units.h"
#include "models/weather_model.h"
#include "trainer/training_step.h"

namespace wxtrain::autotune {

namespace {

using Clock = std::chrono::steady_clock;

// The meter handed to TrainingStep: forwards everything to the real meter and notes when the step
// resets the peak. TrainingStep resets it once at the start of a step and once between the
// forward/backward and the optimizer phase (that is how it reports per-phase peaks), so the last
// reset of a step is the phase boundary on the timeline.
class PhaseMarkingMeter final : public MemoryMeter {
 public:
  // on_phase(step, phase) is called at each reset: phase 1 is forward/backward, 2 the optimizer.
  PhaseMarkingMeter(MemoryMeter& inner, std::function<void(int64_t, int)> on_phase)
      : inner_(inner), on_phase_(std::move(on_phase)) {}
  void begin_step(int64_t step) {
    step_ = step;
    resets_ = 0;
  }
  std::string name() const override { return inner_.name(); }
  MemorySnapshot snapshot() const override { return inner_.snapshot(); }
  void reset_peak() override {
    last_reset_ = Clock::now();
    if (on_phase_) on_phase_(step_, ++resets_);
    inner_.reset_peak();
  }
  void set_limit(int64_t bytes) override { inner_.set_limit(bytes); }
  int64_t limit() const override { return inner_.limit(); }
  int64_t capacity() const override { return inner_.capacity(); }
  void release_cached() override { inner_.release_cached(); }
  Clock::time_point last_reset() const { return last_reset_; }

 private:
  MemoryMeter& inner_;
  std::function<void(int64_t, int)> on_phase_;
  int64_t step_ = 0;
  int resets_ = 0;
  Clock::time_point last_reset_{};
};

// The allocator's history behind ProfileReport::snapshot. CUDA: the caching allocator records from
// the first step on and knows every block by itself. CPU: the counting allocator's history starts
// before the model is built, so the snapshot's segments know the blocks of the parameters,
// optimizer state and inputs, and its events are cleared before the first step, so the trace holds
// the steps alone; events are labelled with their step and phase (the CPU has no stack traces).
// Stops recording when destroyed, also when a step throws.
class HistoryRecording {
 public:
  HistoryRecording(const torch::Device& device, int64_t entries) : cpu_(device.is_cpu()), entries_(entries) {
    if (entries_ <= 0) return;
    if (!cpu_ && !device.is_cuda()) throw ConfigError("--snapshot: no allocation history on " + device.str());
    if (cpu_) {
      memory_history::start(static_cast<size_t>(entries_));
      memory_history::set_context({"wxtrain profile", 0, "model, optimizer and inputs (before the steps)"});
      recording_ = true;
    }
  }
  ~HistoryRecording() { stop(); }
  void begin_steps() {
    if (entries_ <= 0) return;
    if (cpu_) {
      memory_history::clear();
    } else {
      cuda::start_memory_history(static_cast<size_t>(entries_));
      recording_ = true;
    }
  }
  void label(int64_t step, int phase) {
    if (entries_ > 0 && cpu_)
      memory_history::set_context({"wxtrain profile step", step, phase <= 1 ? "forward/backward" : "optimizer"});
  }
  std::string finish() {
    if (entries_ <= 0) return {};
    std::string pickle = cpu_ ? memory_history::snapshot_pickle() : cuda::memory_snapshot_pickle();
    stop();
    return pickle;
  }

 private:
  void stop() {
    if (!recording_) return;
    recording_ = false;
    if (cpu_) {
      memory_history::stop();
    } else {
      cuda::stop_memory_history();
    }
  }
  bool cpu_;
  int64_t entries_;
  bool recording_ = false;
};

// Samples meter.snapshot().allocated every `interval` until stopped.
class Sampler {
 public:
  Sampler(const MemoryMeter& meter, double interval_ms, Clock::time_point origin)
      : meter_(meter), origin_(origin), interval_(std::chrono::duration<double, std::milli>(interval_ms)) {
    ms_.reserve(1 << 16);
    bytes_.reserve(1 << 16);
    thread_ = std::thread([this] {
      while (!stop_.load(std::memory_order_relaxed)) {
        sample();
        std::this_thread::sleep_for(interval_);
      }
      sample();
    });
  }
  ~Sampler() { stop(); }
  void stop() {
    if (thread_.joinable()) {
      stop_.store(true);
      thread_.join();
    }
  }
  std::vector<double> ms_;
  std::vector<int64_t> bytes_;

 private:
  void sample() {
    ms_.push_back(std::chrono::duration<double, std::milli>(Clock::now() - origin_).count());
    bytes_.push_back(meter_.snapshot().allocated);
  }
  const MemoryMeter& meter_;
  Clock::time_point origin_;
  std::chrono::duration<double, std::milli> interval_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

int64_t ProfileReport::peak() const {
  int64_t p = 0;
  for (const auto& s : steps) p = std::max(p, s.peak());
  return p;
}

int64_t ProfileReport::peak_forward_backward() const {
  int64_t p = 0;
  for (const auto& s : steps) p = std::max(p, s.peak_forward_backward);
  return p;
}

int64_t ProfileReport::peak_optimizer() const {
  int64_t p = 0;
  for (const auto& s : steps) p = std::max(p, s.peak_optimizer);
  return p;
}

int64_t ProfileReport::steady_allocated() const {
  if (steps.empty()) return 0;
  std::vector<int64_t> v;
  for (size_t i = steps.size() > 1 ? 1 : 0; i < steps.size(); ++i) v.push_back(steps[i].allocated);
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

ProfileReport profile_memory(const RunConfig& config, torch::Device device,
                             std::shared_ptr<distributed::Communicator> comm, const ProfileOptions& options) {
  if (options.steps <= 0)
    throw ConfigError("--steps " + std::to_string(options.steps) + ": expected a positive number of steps");
  if (options.sample_interval_ms <= 0) throw ConfigError("the timeline's sample interval must be positive");
  if (options.snapshot_entries < 0)
    throw ConfigError("--snapshot-entries " + std::to_string(options.snapshot_entries) +
                      ": expected a positive number of events to keep");
  if (!comm) comm = distributed::make_communicator(distributed::current_world(), config.distributed, device);
  MemoryMeter& meter = memory_meter(device);
  std::unique_ptr<HistoryRecording> history;
  PhaseMarkingMeter marking(meter, [&history](int64_t step, int phase) {
    if (history) history->label(step, phase);
  });
  const models::ModelShape shape = models::model_shape(config);

  ProfileReport report;
  report.device = device.str();
  report.meter = meter.name();
  report.batch = config.train.batch_auto ? tune_batch(config, device, comm) : config.train.batch_size;
  report.members = std::max<int64_t>(1, config.train.ensemble_members);
  report.accumulation = config.train.accumulation;
  const int64_t timeline_step =
      options.timeline_step > 0 ? std::min(options.timeline_step, options.steps) : options.steps;

  meter.release_cached();
  report.baseline = meter.snapshot().allocated;
  history = std::make_unique<HistoryRecording>(device, options.snapshot_entries);
  auto state = trainer::build_training_state(config, shape, comm, device);
  auto micro = trainer::synthetic_micro_batches(config, shape, report.batch, config.train.accumulation, device);
  report.states = meter.snapshot().allocated;
  trainer::TrainingStep step(*state, &marking);
  history->begin_steps();
  for (int64_t i = 1; i <= options.steps; ++i) {
    marking.begin_step(i);
    const auto t0 = Clock::now();
    std::unique_ptr<Sampler> sampler;
    if (i == timeline_step) sampler = std::make_unique<Sampler>(meter, options.sample_interval_ms, t0);
    const trainer::StepResult r = step.run(micro, config.train.lr);
    const auto t1 = Clock::now();
    if (sampler) {
      sampler->stop();
      report.timeline.step = i;
      report.timeline.ms = std::move(sampler->ms_);
      report.timeline.allocated = std::move(sampler->bytes_);
      report.timeline.optimizer_start_ms = std::chrono::duration<double, std::milli>(marking.last_reset() - t0).count();
      report.timeline.end_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    }
    StepRecord rec;
    rec.step = i;
    rec.timestamp = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    rec.seconds = std::chrono::duration<double>(t1 - t0).count();
    const MemorySnapshot s = meter.snapshot();
    rec.allocated = s.allocated;
    rec.reserved = s.reserved;
    rec.peak_forward_backward = r.peak_forward_backward;
    rec.peak_optimizer = r.peak_optimizer;
    report.steps.push_back(rec);
  }
  report.snapshot = history->finish();
  if (device.is_cpu() && options.cpu_overhead) {
    // After the steps, with the model alive: the libraries' pages, JIT kernels and threads the step
    // used are resident, as in the estimator's measurement after its trace.
    const double activations = static_cast<double>(std::max<int64_t>(0, report.peak() - report.steady_allocated()));
    report.cpu_overhead = estimator::cpu_overhead(estimator::process_resident_outside_allocator(),
                                                  activations / static_cast<double>(std::max<int64_t>(report.batch, 1)));
  }
  return report;
}

namespace {

// `what`: what the peak counts, after its size (" (0.7 GiB of tensors + ...)"), or "".
ThresholdVerdict verdict(int64_t peak, int64_t threshold, const std::string& what) {
  ThresholdVerdict v;
  v.peak = peak;
  v.threshold = threshold;
  v.headroom = threshold - peak;
  v.pass = peak <= threshold;
  char share[32];
  std::snprintf(share, sizeof share, "%.1f%%",
                threshold > 0 ? 100.0 * std::fabs(static_cast<double>(v.headroom)) / static_cast<double>(threshold) : 0.0);
  v.message = std::string(v.pass ? "PASS" : "FAIL") + ": peak " + format_bytes(static_cast<double>(peak)) + what +
              (v.pass ? " <= " : " > ") + "threshold " + format_bytes(static_cast<double>(threshold)) + " (" +
              (v.pass ? format_bytes(static_cast<double>(v.headroom)) + ", " + share + " headroom)"
                      : "over by " + format_bytes(static_cast<double>(-v.headroom)) + ", " + share + " of the threshold)");
  return v;
}

}  // namespace

ThresholdVerdict check_threshold(int64_t peak, int64_t threshold) { return verdict(peak, threshold, ""); }

ThresholdVerdict check_threshold(const ProfileReport& report, int64_t threshold) {
  const int64_t outside = report.overhead_at_batch();
  std::string what;
  if (outside > 0)
    what = " (" + format_bytes(static_cast<double>(report.peak())) + " of tensors + " +
           format_bytes(static_cast<double>(outside)) +
           " the process holds outside the allocator: the CPU total that estimate and tune-batch use)";
  else if (report.device.rfind("cuda", 0) == 0)
    what = " (the caching allocator's allocated bytes)";
  else
    what = " (the counted tensors alone, --tensors-only)";
  return verdict(report.judged_peak(), threshold, what);
}

int64_t parse_size_argument(const std::string& flag, const std::string& text) {
  const auto bytes = parse_bytes(text);
  if (!bytes || *bytes <= 0)
    throw ConfigError(flag + " " + (text.empty() ? std::string("''") : text) +
                      ": expected a positive size such as 22GiB, 512MiB or 80GB");
  return *bytes;
}

std::string steps_csv(const ProfileReport& report, int64_t threshold) {
  std::ostringstream out;
  const bool ensemble = report.members > 1;
  out << "timestamp,step,allocated_GB,reserved_GB,peak_GB";
  if (ensemble) out << ",members,peak_per_member_GB,activations_per_member_GB";
  if (threshold > 0) out << ",judged_peak_GB,threshold_GB,result";
  out << "\n";
  char line[160];
  const double members = static_cast<double>(report.members);
  for (const auto& s : report.steps) {
    std::snprintf(line, sizeof line, "%.3f,%lld,%.6f,%.6f,%.6f", s.timestamp, static_cast<long long>(s.step),
                  s.allocated / kGB, s.reserved / kGB, s.peak() / kGB);
    out << line;
    if (ensemble) {
      // What each member costs of the step: its share of the peak, and of the activations (the peak
      // above what stays allocated between steps: states and micro-batches).
      std::snprintf(line, sizeof line, ",%lld,%.6f,%.6f", static_cast<long long>(report.members),
                    static_cast<double>(s.peak()) / members / kGB,
                    static_cast<double>(std::max<int64_t>(0, s.peak() - s.allocated)) / members / kGB);
      out << line;
    }
    if (threshold > 0) {
      // The step judged as --threshold judges the run (the CPU's overhead at the batch included).
      const int64_t judged = s.peak() + report.overhead_at_batch();
      std::snprintf(line, sizeof line, ",%.6f,%.6f,%s", static_cast<double>(judged) / kGB,
                    static_cast<double>(threshold) / kGB, judged <= threshold ? "PASS" : "FAIL");
      out << line;
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace wxtrain::autotune
