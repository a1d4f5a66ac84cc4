#pragma once
// SiLU of a bf16 CPU tensor, computed in fp32 and rounded to bf16 once: the gnn's activation
// between two Linears under CPU autocast or in pure bf16 (models/gnn/gnn.cpp picks it when
// cpu_fusion_enabled()).
//
// Why: LibTorch 1.13's bf16 SiLU on the CPU rounds every intermediate and runs ~3x (forward) and
// ~10x (backward) slower than fp32 on the gnn's edge tensors, so the unfused path casts the Linear's
// bf16 output up, runs SiLU in fp32, and lets the next Linear's autocast cast it back down: three
// passes and an fp32 copy saved for backward. The fused op reads bf16 and writes bf16 (the same
// single rounding the next Linear's cast would do), and saves the bf16 input.
#include <torch/torch.h>

#include "ops/cpu_fusion.h"

namespace wxtrain::ops {

torch::Tensor bf16_silu(const torch::Tensor& x);

}  // namespace wxtrain::ops
