#pragma once
// Linear warmup to train.lr over train.warmup_steps, then cosine decay to lr x min_lr_ratio at
// train.steps — a pure function of the step, so a resumed run continues the same curve.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/config.h"

namespace wxtrain::trainer {

inline double learning_rate(const TrainConfig& t, int64_t step) {
  if (t.warmup_steps > 0 && step < t.warmup_steps)
    return t.lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup_steps);
  const double span = static_cast<double>(std::max<int64_t>(1, t.steps - t.warmup_steps));
  const double progress = std::clamp(static_cast<double>(step - t.warmup_steps) / span, 0.0, 1.0);
  const double floor = t.lr * t.min_lr_ratio;
  return floor + (t.lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace wxtrain::trainer
