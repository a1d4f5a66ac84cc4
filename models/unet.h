#pragma once
#include "models/weather_model.h"

namespace wxtrain::models {

class UNetImpl : public WeatherModelImpl {
 public:
  UNetImpl(const ModelConfig& config, const ModelShape& shape);
  torch::Tensor forward(torch::Tensor x) override;
};

}  // namespace wxtrain::models
