#pragma once
// One forward and backward of a zoo model, for the "checkpointed equals plain" tests of each model:
// the output, the input's gradient and every parameter's gradient (in named_parameters() order),
// under the loss sum(y^2), with checkpointing on or off.
#include <string>
#include <vector>

#include <gtest/gtest.h>
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

// The checkpointed step's output and gradients against the plain step's, entry by entry within
// (rtol, atol); with require_nonzero every plain entry must be non-zero too (a gradient that never
// arrives would compare equal to another that never arrives). Returns the plain step's entries.
inline std::vector<torch::Tensor> expect_checkpointed_equals_plain(WeatherModelImpl& model, const torch::Tensor& x,
                                                                   double rtol, double atol,
                                                                   bool require_nonzero = true) {
  const auto plain = output_and_gradients(model, x, false);
  const auto recomputed = output_and_gradients(model, x, true);
  EXPECT_EQ(plain.size(), recomputed.size());
  for (size_t i = 0; i < plain.size() && i < recomputed.size(); ++i) {
    const std::string what = output_and_gradients_name(model, i);
    if (require_nonzero) {
      EXPECT_GT(plain[i].abs().sum().item<double>(), 0.0) << what;
    }
    EXPECT_TRUE(torch::allclose(plain[i], recomputed[i], rtol, atol))
        << what << ": max difference " << (plain[i] - recomputed[i]).abs().max().item<double>();
  }
  return plain;
}

}  // namespace wxtrain::models::testing
