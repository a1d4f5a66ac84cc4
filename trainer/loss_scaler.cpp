#include "trainer/loss_scaler.h"

#include "core/error.h"

namespace wxtrain::trainer {

LossScaler::LossScaler(Options options) : options_(options), scale_(options.init_scale) {}

LossScaler LossScaler::from_config(const TrainConfig& train) {
  Options o;
  o.enabled = train.precision == Precision::kFp16Mixed;
  o.init_scale = train.loss_scale;
  o.growth_factor = train.scale_growth;
  o.backoff_factor = train.scale_backoff;
  o.growth_interval = train.scale_interval;
  return LossScaler(o);
}

bool LossScaler::update(bool grads_finite) {
  if (!enabled()) return grads_finite;
  if (!grads_finite) {
    scale_ *= options_.backoff_factor;
    good_steps_ = 0;
    ++skipped_;
    return false;
  }
  if (++good_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
  return true;
}

std::map<std::string, torch::Tensor> LossScaler::state() const {
  return {{"scale", torch::tensor(scale_, torch::kFloat64)},
          {"good_steps", torch::tensor(good_steps_, torch::kInt64)},
          {"skipped", torch::tensor(skipped_, torch::kInt64)}};
}

void LossScaler::load_state(const std::map<std::string, torch::Tensor>& state) {
  for (const char* key : {"scale", "good_steps", "skipped"})
    if (!state.count(key)) throw Error(std::string("checkpoint: loss scaler state lacks '") + key + "'");
  scale_ = state.at("scale").item<double>();
  good_steps_ = state.at("good_steps").item<int64_t>();
  skipped_ = state.at("skipped").item<int64_t>();
}

}  // namespace wxtrain::trainer
