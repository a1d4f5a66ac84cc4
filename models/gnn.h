#pragma once
#include "models/weather_model.h"

namespace wxtrain::models {

class GraphNetImpl : public WeatherModelImpl {
 public:
  GraphNetImpl(const ModelConfig& config, const ModelShape& shape);
  torch::Tensor forward(torch::Tensor x) override;
};

}  // namespace wxtrain::models
