#pragma once
// What a run reports while it trains: one record per optimizer step, and named scalars at a step
// (the validation scores). Every sink (tracking/sink.h) receives the same records.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace wxtrain::tracking {

struct StepMetrics {
  int64_t step = 0;
  int64_t epoch = 0;
  double loss = 0, lr = 0, grad_norm = 0, loss_scale = 1, samples_per_s = 0;
  double allocated_gb = 0, reserved_gb = 0, peak_gb = 0;
  bool applied = true;
  int64_t rollout = 1;  // rollout steps in this step's loss (the curriculum's length)
  double wall_time = 0;  // seconds since the Unix epoch when the step ended (set by the Tracker)
};

// The step's values by the names TensorBoard and MLflow show: loss, lr, grad_norm, loss_scale,
// samples_per_s, memory/allocated_GB, memory/reserved_GB, memory/peak_GB, rollout.
std::vector<std::pair<std::string, double>> named_values(const StepMetrics& m);

// Named values at one training step, e.g. "val/rmse/t/6h" = 1.84.
struct Scalars {
  int64_t step = 0;
  std::vector<std::pair<std::string, double>> values;
  double wall_time = 0;  // set by the Tracker
};

}  // namespace wxtrain::tracking
