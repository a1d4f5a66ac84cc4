#pragma once
// How the zoo applies its Linear layers: apply_linear(layer, x), not layer(x).
//
// LibTorch's C++ frontend (torch::nn::functional::linear, behind torch::nn::Linear::forward, still
// so in 2.11) computes a Linear on an input of more than two dimensions as a matmul followed by an
// in-place bias add: a second pass over the output, and under CPU autocast a bf16 one. Python's
// nn.Linear calls ATen's at::linear, which folds the bias into the GEMM (addmm) for a contiguous
// 3-D input. Flattening the leading dimensions gets that single addmm for any input; an fp32 CPU
// input gets oneDNN's GEMM instead (ops/cpu_gemm.h). On LibTorch 2.11 the ViT's MLP Linear
// (8 x 132 tokens, 128 -> 512, forward and backward, oneDNN off) runs 1.18x faster than layer(x)
// in bf16-mixed and 1.04x in fp32 (`OMP_NUM_THREADS=1 build/bench/fusion_ab --fusions apply_linear --pairs 21`,
// docs/benchmarks.md "Fusions on LibTorch 2.11").
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
