#pragma once
// The Adam/AdamW update as one pass over a chunk of the flat buffers (distributed/flat_optimizer.h),
// free of torch so that it builds with -O3 and target_clones like ops/kernels/fused_kernels.cpp.
// ATen's op-by-op form (mul_, mul_/add_, mul_/addcmul_, sqrt, div_, add_, addcdiv_, each over the
// whole buffer) reads or writes 22 buffer elements per parameter; this loop reads p, g, m, v and
// writes p, m, v: 7 (the 7.2M-parameter storm vit_base in bf16-mixed: 42 -> 45 samples/s,
// docs/benchmarks.md).
#include <cstdint>

namespace wxtrain::distributed::kernels {

struct AdamStep {
  float param_decay;       // AdamW: 1 - lr * weight_decay (1 for Adam)
  float grad_decay;        // Adam: weight_decay, added to the gradient as l2 * p (0 for AdamW)
  float beta1, beta2;
  float sqrt_bias_correction2;  // sqrt(1 - beta2^t)
  float eps;
  float step_size;         // lr / (1 - beta1^t)
};

// p = p * param_decay; g' = g + grad_decay * p (the decayed p); m = beta1 m + (1 - beta1) g';
// v = beta2 v + (1 - beta2) g'^2; p -= step_size * m / (sqrt(v) / sqrt_bias_correction2 + eps).
void adam_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamStep& step);

}  // namespace wxtrain::distributed::kernels
