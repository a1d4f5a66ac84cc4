#pragma once
// One forward and backward of a zoo model, for the "checkpointed equals plain" tests of each model:
// the output, the input's gradient and every parameter's gradient (in named_parameters() order),
// under the loss sum(y^2), with checkpointing on or off.
#include <string>
#include <vector>

#include <torch/torch.h>

#include "models/weather_model.h"

namespace wxtrain::models::testing {

inline std::vector<torch::Tensor> output_and_gradients(WeatherModelImpl& model, const torch::Tensor& x,
                                                       bool checkpointing) {
  model.set_checkpointing(checkpointing);
  model.zero_grad();
  torch::Tensor input = x.clone().requires_grad_(true);
  torch::Tensor y = model.forward(input);
  y.square().sum().backward();
  std::vector<torch::Tensor> out{y.detach().clone(), input.grad().clone()};
  for (const auto& p : model.parameters()) out.push_back(p.grad().clone());
  return out;
}

// What entry i of output_and_gradients() is: "output", "input grad" or the parameter's name.
inline std::string output_and_gradients_name(const WeatherModelImpl& model, size_t i) {
  return i == 0 ? "output" : i == 1 ? "input grad" : model.named_parameters().keys()[i - 2];
}

}  // namespace wxtrain::models::testing
