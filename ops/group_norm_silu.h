#pragma once
// silu(group_norm(x)), the pair that follows every convolution of the U-Net, as one fused CPU
// kernel (ops/kernels/) with its own backward.
//
// Why fused: the unfused chain under CPU autocast casts the bf16 conv output up, normalises and
// activates it in fp32 and lets the next conv cast it back down: six passes forward and more
// backward, and three saved copies per layer (fp32 input, fp32 normalised, bf16 cast). The fused op
// reads x once for the statistics and once to write y in x's own dtype, computing in fp32
// throughout; it saves only x and two floats per (sample, group). In bf16 its output is the fp32
// result rounded once, which is what the unfused chain hands the next convolution.
// On LibTorch 2.11 the storm U-Net's bf16-mixed step runs 1.06x faster with it and its peak is
// 15.8 MB instead of 29.8. In fp32 the step runs 0.94x (ATen's fp32 GroupNorm and SiLU are now the
// faster pair) but peaks at 27.1 MB instead of 33.0, which CPU estimates and tune-batch count on.
// Measured with `OMP_NUM_THREADS=1 build/bench/fusion_ab --fusions group_norm_silu --pairs 21` (docs/benchmarks.md,
// "Fusions on LibTorch 2.11").
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
