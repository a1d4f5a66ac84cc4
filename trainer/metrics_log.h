#pragma once
// What a user watches during training: a progress line (step, loss, samples/s, ETA, memory). The
// per-step records (metrics.csv, TensorBoard, MLflow) leave through tracking/tracker.h.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "tracking/records.h"

namespace wxtrain::trainer {

// The step's record, as every tracking sink receives it (metrics.csv among them: tracking/csv_sink.h).
using tracking::StepMetrics;

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
