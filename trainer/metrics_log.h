#pragma once
// What a user watches during training: a progress line (step, loss, samples/s, ETA, memory) and a
// per-step metrics CSV for plotting afterwards.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "core/atomic_file.h"

namespace wxtrain::trainer {

struct StepMetrics {
  int64_t step = 0;
  int64_t epoch = 0;
  double loss = 0, lr = 0, grad_norm = 0, loss_scale = 1, samples_per_s = 0;
  double allocated_gb = 0, reserved_gb = 0, peak_gb = 0;
  bool applied = true;
  int64_t rollout = 1;  // rollout steps in this step's loss (the curriculum's length)
};

class MetricsCsv {
 public:
  // Appends when resuming (the file keeps the earlier steps), else starts a new file with a header.
  // A row that cannot be written (full disk) throws WriteError and leaves the file at its last
  // complete row.
  MetricsCsv(const std::string& path, bool append);
  void write(const StepMetrics& m);

 private:
  AppendFile out_;
};

class ProgressLine {
 public:
  ProgressLine(int64_t first_step, int64_t total_steps);
  // Redraws in place on a terminal; prints every `every` steps otherwise (logs, CI).
  void update(const StepMetrics& m, int64_t every);
  void finish();

 private:
  int64_t first_, total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace wxtrain::trainer
