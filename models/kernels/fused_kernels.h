#pragma once
// The loops of the fused CPU ops (models/group_norm_silu.h, models/bf16_silu.h,
// models/edge_gather.h), free of torch so
// that this one translation unit can be built for several instruction sets (target_clones) with
// -O3 and OpenMP SIMD reductions, without the torch precompiled header.
//
// For GroupNorm a slice is one (sample, group): `channels` consecutive channels of `plane`
// contiguous values.
#include <cstdint>

namespace wxtrain::models::kernels {

// y = silu(gamma * (x - mean) * rstd + beta), per channel; writes the slice's mean and rstd.
void group_norm_silu_forward(const float* x, float* y, int64_t channels, int64_t plane, const float* gamma,
                             const float* beta, float eps, float* mean, float* rstd);

// dx from dy = d loss / d y, and the slice's contributions to the affine gradients (one value per
// channel, written, not accumulated). `scratch` holds channels * plane floats.
void group_norm_silu_backward(const float* x, const float* dy, float* dx, float* scratch, int64_t channels,
                              int64_t plane, const float* gamma, const float* beta, float mean, float rstd,
                              float* dgamma, float* dbeta);

// y = silu(x) and its backward dx = dy * d silu / dx, elementwise.
void silu_forward(const float* x, float* y, int64_t n);
void silu_backward(const float* x, const float* dy, float* dx, int64_t n);

// The gnn's edge inputs: out[k] = a[senders[k]] + b[receivers[k]] + c[k], rows of `width` values,
// for edges k in [0, edges). fp32 sums in the order (a + b) + c; the bf16 form sums in fp32 and
// rounds once.
void edge_gather_sum(const float* a, const float* b, const float* c, const int64_t* senders,
                     const int64_t* receivers, float* out, int64_t edges, int64_t width);
void edge_gather_sum_bf16(const uint16_t* a, const uint16_t* b, const uint16_t* c, const int64_t* senders,
                          const int64_t* receivers, uint16_t* out, int64_t edges, int64_t width);

// bf16 <-> fp32 (bf16 as its 16 raw bits; round to nearest even, NaN kept NaN).
void bf16_to_float(const uint16_t* in, float* out, int64_t n);
void float_to_bf16(const float* in, uint16_t* out, int64_t n);

}  // namespace wxtrain::models::kernels
