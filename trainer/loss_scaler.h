#pragma once
// Dynamic loss scaling for fp16 mixed precision, as torch.cuda.amp.GradScaler does it: the loss is
// multiplied by `scale` before backward so small fp16 gradients do not flush to zero; gradients are
// unscaled (by 1/scale) before clipping and the optimizer; a step whose gradients hold inf/NaN is
// skipped and the scale backs off; after `interval` finite steps in a row the scale grows.
// Disabled (scale 1, never skips) for fp32 and bf16, whose exponent range needs no scaling.
#include <cstdint>
#include <map>
#include <string>

#include <torch/torch.h>

#include "core/config.h"

namespace wxtrain::trainer {

class LossScaler {
 public:
  struct Options {
    bool enabled = false;
    double init_scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;
  };
  explicit LossScaler(Options options);
  // Enabled for fp16-mixed, with the [train] loss_scale / scale_growth / scale_backoff / scale_interval.
  static LossScaler from_config(const TrainConfig& train);

  bool enabled() const { return options_.enabled; }
  double scale() const { return enabled() ? scale_ : 1.0; }
  // Records the outcome of a step: backs off on inf/NaN (the caller skips the optimizer step),
  // grows after growth_interval finite steps. Returns true when the step should be applied.
  bool update(bool grads_finite);
  int64_t skipped_steps() const { return skipped_; }

  std::map<std::string, torch::Tensor> state() const;
  void load_state(const std::map<std::string, torch::Tensor>& state);

 private:
  Options options_;
  double scale_;
  int64_t good_steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace wxtrain::trainer
