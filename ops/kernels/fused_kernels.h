#pragma once
// The loops of the fused CPU ops (ops/group_norm_silu.h, ops/bf16_silu.h,
// ops/edge_gather.h, ops/resample.h, pangu's attention softmax), free of torch so
// that this one translation unit can be built for several instruction sets (target_clones) with
// -O3 and OpenMP SIMD reductions, without the torch precompiled header.
//
// For GroupNorm a slice is one (sample, group): `channels` consecutive channels of `plane`
// contiguous values.
#include <cstdint>

namespace wxtrain::ops::kernels {

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

// One row of attention probabilities: y = softmax(scale * scores + bias) over n values, in fp32
// (the bf16 form reads and writes bf16, computes in fp32 in `scratch`, n floats, and rounds once).
// A -inf bias gives exactly 0; a row must hold at least one finite value.
void scaled_biased_softmax(const float* scores, const float* bias, float scale, float* y, int64_t n);
void scaled_biased_softmax_bf16(const uint16_t* scores, const uint16_t* bias, float scale, uint16_t* y,
                                float* scratch, int64_t n);
// Its backward: with g = dy - sum(dy y), d scores = scale y g (written) and d bias = y g, added to
// dbias (fp32; the bias row is shared by the batch's rows, whose gradients sum there).
void scaled_biased_softmax_backward(const float* y, const float* dy, float scale, float* dscores, float* dbias,
                                    int64_t n);
void scaled_biased_softmax_backward_bf16(const uint16_t* y, const uint16_t* dy, float scale, uint16_t* dscores,
                                         float* dbias, float* scratch, int64_t n);

// bf16 <-> fp32 (bf16 as its 16 raw bits; round to nearest even, NaN kept NaN).
void bf16_to_float(const uint16_t* in, float* out, int64_t n);
void float_to_bf16(const float* in, uint16_t* out, int64_t n);

// 2x2 max pooling with stride 2 over `planes` row-major planes of height x width (both even):
// y is [planes, height/2, width/2] and `which` (same shape) the winner's place in its window,
// 0..3 row-major (ATen's rule: the first maximum, a NaN over anything before it). The backward
// writes every element of dx: the gradient at the winner, zero elsewhere.
void max_pool_2x2_forward(const float* x, float* y, uint8_t* which, int64_t planes, int64_t height, int64_t width);
void max_pool_2x2_forward_bf16(const uint16_t* x, uint16_t* y, uint8_t* which, int64_t planes, int64_t height,
                               int64_t width);
void max_pool_2x2_backward(const float* dy, const uint8_t* which, float* dx, int64_t planes, int64_t height,
                           int64_t width);
void max_pool_2x2_backward_bf16(const uint16_t* dy, const uint8_t* which, uint16_t* dx, int64_t planes,
                                int64_t height, int64_t width);

// Nearest-neighbour 2x upsampling of `planes` planes of height x width (the coarse size) to
// [planes, 2 height, 2 width], and its backward: each coarse gradient is the sum of its 2x2 block,
// in fp32 (bf16: rounded once).
void upsample_2x_forward(const float* x, float* y, int64_t planes, int64_t height, int64_t width);
void upsample_2x_forward_bf16(const uint16_t* x, uint16_t* y, int64_t planes, int64_t height, int64_t width);
void upsample_2x_backward(const float* dy, float* dx, int64_t planes, int64_t height, int64_t width);
void upsample_2x_backward_bf16(const uint16_t* dy, uint16_t* dx, int64_t planes, int64_t height, int64_t width);

}  // namespace wxtrain::ops::kernels
