#pragma once
// How the zoo applies its Linear layers: apply_linear(layer, x), not layer(x).
//
// LibTorch 1.13's C++ frontend (torch::nn::functional::linear, behind torch::nn::Linear::forward)
// computes a Linear on an input of more than two dimensions as a matmul followed by an in-place
// bias add: a second pass over the output, and under CPU autocast a slow bf16 one. Python's
// nn.Linear calls ATen's at::linear, which folds the bias into the GEMM (addmm) for a contiguous
// 3-D input. Flattening the leading dimensions gets that single addmm for any input; an fp32 CPU
// input gets oneDNN's GEMM instead (ops/cpu_gemm.h).
#include <torch/torch.h>

#include "ops/cpu_gemm.h"

namespace wxtrain::ops {

inline torch::Tensor apply_linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  const torch::Tensor& weight = layer->weight;
  const torch::Tensor& bias = layer->bias;  // undefined when the layer has none
  if (x.dim() < 2) return at::linear(x, weight, bias);
  if (x.dim() == 2) return linear_2d(x, weight, bias);
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  return linear_2d(x.reshape({-1, x.size(-1)}), weight, bias).view(sizes);
}

}  // namespace wxtrain::ops
