#pragma once
// silu(group_norm(x)), the pair that follows every convolution of the U-Net, as one fused CPU
// kernel (ops/kernels/) with its own backward.
//
// Why fused: LibTorch 1.13 runs GroupNorm and SiLU as separate passes, and under CPU autocast its
// GroupNorm needs fp32 input (the bf16 conv output is cast up, normalised, activated, and cast back
// down by the next conv): six passes forward and more backward, and three saved copies per layer
// (fp32 input, fp32 normalised, bf16 cast). The fused op reads x once for the statistics and once
// to write y in x's own dtype, computing in fp32 throughout; it saves only x and two floats per
// (sample, group). In bf16 its output is the fp32 result rounded once, which is what the unfused
// chain hands the next convolution.
//
// Inputs and affine parameters may each be fp32 or bf16 (pure bf16 training). Elsewhere (CUDA,
// double, a GroupNorm without affine parameters, or under CpuFusionGuard(false)) it is LibTorch's
// unfused chain.
#include <torch/torch.h>

#include "ops/cpu_fusion.h"

namespace wxtrain::ops {

torch::Tensor group_norm_silu(const torch::Tensor& x, const torch::nn::GroupNorm& norm);

// True when group_norm_silu(x, norm) takes the fused kernel.
bool group_norm_silu_is_fused(const torch::Tensor& x, const torch::nn::GroupNorm& norm);

}  // namespace wxtrain::ops
