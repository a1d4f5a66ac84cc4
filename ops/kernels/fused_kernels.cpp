#include "ops/kernels/fused_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/target_clones.h"

// Every loop of the normalisation, activation and gather kernels is written so that GCC vectorizes
// it (checked with -fopt-info-vec): no calls but the inline exp below, reductions declared with
// `omp simd reduction`, and built for several instruction sets (WXTRAIN_CLONES,
// core/target_clones.h). The resampling kernels at the end are plain loops.

namespace wxtrain::ops::kernels {
namespace {

inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// e^x for the sigmoid, branch-free so that it vectorizes: Cody-Waite reduction x = n ln2 + r and
// Cephes' degree-6 polynomial for e^r (relative error ~1e-7, as libm's expf to within a few ulp).
// Inputs are clamped to the finite range; a NaN stays NaN through the polynomial.
inline float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // n = round(x / ln2) by the 1.5 * 2^23 trick: a library floor/nearbyint would be a call on
  // baseline x86-64 (no SSE4.1 rounding instruction) and keep the loop scalar.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n from its exponent bits; n is within [-126, 127] after the clamp. Signed throughout: GCC
  // does not vectorize the int -> unsigned conversion for AVX2.
  const int32_t exponent = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &exponent, sizeof scale);
  return p * scale;
}

inline float sigmoid(float z) { return 1.0f / (1.0f + exp_approx(-z)); }

inline float bf16_value(uint16_t bits) { return bits_to_float(static_cast<uint32_t>(bits) << 16); }

// Round to nearest even; a NaN stays a (quiet) NaN.
inline uint16_t bf16_bits(float value) {
  const uint32_t bits = float_to_bits(value);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<uint16_t>(nan ? 0x7FC0u : rounded);
}

}  // namespace

WXTRAIN_CLONES
static void group_norm_silu_forward_clones(const float* x, float* y, int64_t channels, int64_t plane,
                                           const float* gamma, const float* beta, float eps, float* mean,
                                           float* rstd) {
  const int64_t n = channels * plane;
  // Two passes (mean, then the centred sum of squares): no cancellation for large means.
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float m = sum / static_cast<float>(n);
  float squares = 0;
#pragma omp simd reduction(+ : squares)
  for (int64_t i = 0; i < n; ++i) squares += (x[i] - m) * (x[i] - m);
  const float rs = 1.0f / std::sqrt(squares / static_cast<float>(n) + eps);
  *mean = m;
  *rstd = rs;
  for (int64_t c = 0; c < channels; ++c) {
    const float a = gamma[c] * rs, b = beta[c] - m * a;
    const float* xc = x + c * plane;
    float* yc = y + c * plane;
#pragma omp simd
    for (int64_t i = 0; i < plane; ++i) {
      const float z = xc[i] * a + b;
      yc[i] = z * sigmoid(z);
    }
  }
}
void group_norm_silu_forward(const float* x, float* y, int64_t channels, int64_t plane, const float* gamma,
                             const float* beta, float eps, float* mean, float* rstd) {
  group_norm_silu_forward_clones(x, y, channels, plane, gamma, beta, eps, mean, rstd);
}

WXTRAIN_CLONES
static void group_norm_silu_backward_clones(const float* x, const float* dy, float* dx, float* scratch,
                                            int64_t channels, int64_t plane, const float* gamma, const float* beta,
                                            float mean, float rstd, float* dgamma, float* dbeta) {
  // With xh = (x - mean) rstd, z = gamma xh + beta, y = z sigmoid(z):
  //   dz = dy sigmoid(z) (1 + z (1 - sigmoid(z)));  dgamma_c = sum dz xh;  dbeta_c = sum dz
  //   dx = rstd (g - mean(g) - xh mean(g xh)) with g = gamma_c dz, means over the slice.
  float sum_g = 0, sum_g_xh = 0;
  for (int64_t c = 0; c < channels; ++c) {
    const float a = gamma[c] * rstd, b = beta[c] - mean * a;
    const float* xc = x + c * plane;
    const float* dyc = dy + c * plane;
    float* dzc = scratch + c * plane;
    float dz_sum = 0, dz_xh_sum = 0;
#pragma omp simd reduction(+ : dz_sum, dz_xh_sum)
    for (int64_t i = 0; i < plane; ++i) {
      const float z = xc[i] * a + b;
      const float s = sigmoid(z);
      const float dz = dyc[i] * s * (1.0f + z * (1.0f - s));
      dzc[i] = dz;
      dz_sum += dz;
      dz_xh_sum += dz * (xc[i] - mean);
    }
    dz_xh_sum *= rstd;
    dgamma[c] = dz_xh_sum;
    dbeta[c] = dz_sum;
    sum_g += gamma[c] * dz_sum;
    sum_g_xh += gamma[c] * dz_xh_sum;
  }
  const auto n = static_cast<float>(channels * plane);
  const float mean_g = sum_g / n, mean_g_xh = sum_g_xh / n;
  for (int64_t c = 0; c < channels; ++c) {
    const float g = gamma[c];
    const float* xc = x + c * plane;
    const float* dzc = scratch + c * plane;
    float* dxc = dx + c * plane;
#pragma omp simd
    for (int64_t i = 0; i < plane; ++i) {
      dxc[i] = rstd * (g * dzc[i] - mean_g - (xc[i] - mean) * rstd * mean_g_xh);
    }
  }
}
void group_norm_silu_backward(const float* x, const float* dy, float* dx, float* scratch, int64_t channels,
                              int64_t plane, const float* gamma, const float* beta, float mean, float rstd,
                              float* dgamma, float* dbeta) {
  group_norm_silu_backward_clones(x, dy, dx, scratch, channels, plane, gamma, beta, mean, rstd, dgamma, dbeta);
}

WXTRAIN_CLONES
static void bf16_to_float_clones(const uint16_t* in, float* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_value(in[i]);
}
void bf16_to_float(const uint16_t* in, float* out, int64_t n) {
  bf16_to_float_clones(in, out, n);
}

WXTRAIN_CLONES
static void float_to_bf16_clones(const float* in, uint16_t* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits(in[i]);
}
void float_to_bf16(const float* in, uint16_t* out, int64_t n) {
  float_to_bf16_clones(in, out, n);
}

namespace {

// e^x for a softmax's x - max <= 0: exactly 0 below exp_approx's range, so that a masked (-inf)
// score gives a zero probability as std::exp does.
inline float softmax_exp(float x) { return x < -87.0f ? 0.0f : exp_approx(x); }

// The largest of y[0..n) (NaNs ignored, as `z > top ? z : top` ignores them), in eight running
// maxima that stay in one vector register. `#pragma omp simd reduction(max : top)` over that select
// vectorizes with GCC but not with clang 14, which takes a float select as a reduction only under
// -ffast-math; the whole loop around it then ran one element at a time.
inline float max_of(const float* y, int64_t n) {
  float lanes[8];
  for (float& lane : lanes) lane = -INFINITY;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lanes[k] = y[i + k] > lanes[k] ? y[i + k] : lanes[k];
  float top = -INFINITY;
  for (const float lane : lanes) top = lane > top ? lane : top;
  for (; i < n; ++i) top = y[i] > top ? y[i] : top;
  return top;
}

}  // namespace

WXTRAIN_CLONES
static void scaled_biased_softmax_clones(const float* scores, const float* bias, float scale, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = scores[i] * scale + bias[i];
  const float top = max_of(y, n);
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    const float e = softmax_exp(y[i] - top);
    y[i] = e;
    sum += e;
  }
  const float inverse = 1.0f / sum;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] *= inverse;
}
void scaled_biased_softmax(const float* scores, const float* bias, float scale, float* y, int64_t n) {
  scaled_biased_softmax_clones(scores, bias, scale, y, n);
}

WXTRAIN_CLONES
static void scaled_biased_softmax_bf16_clones(const uint16_t* scores, const uint16_t* bias, float scale, uint16_t* y,
                                              float* scratch, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) scratch[i] = bf16_value(scores[i]) * scale + bf16_value(bias[i]);
  const float top = max_of(scratch, n);
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    const float e = softmax_exp(scratch[i] - top);
    scratch[i] = e;
    sum += e;
  }
  const float inverse = 1.0f / sum;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_bits(scratch[i] * inverse);
}
void scaled_biased_softmax_bf16(const uint16_t* scores, const uint16_t* bias, float scale, uint16_t* y,
                                float* scratch, int64_t n) {
  scaled_biased_softmax_bf16_clones(scores, bias, scale, y, scratch, n);
}

WXTRAIN_CLONES
static void scaled_biased_softmax_backward_clones(const float* y, const float* dy, float scale, float* dscores,
                                                  float* dbias, int64_t n) {
  float dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t i = 0; i < n; ++i) dot += y[i] * dy[i];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = y[i] * (dy[i] - dot);
    dbias[i] += g;
    dscores[i] = g * scale;
  }
}
void scaled_biased_softmax_backward(const float* y, const float* dy, float scale, float* dscores, float* dbias,
                                    int64_t n) {
  scaled_biased_softmax_backward_clones(y, dy, scale, dscores, dbias, n);
}

WXTRAIN_CLONES
static void scaled_biased_softmax_backward_bf16_clones(const uint16_t* y, const uint16_t* dy, float scale,
                                                       uint16_t* dscores, float* dbias, float* scratch, int64_t n) {
  float dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t i = 0; i < n; ++i) {
    const float yi = bf16_value(y[i]), dyi = bf16_value(dy[i]);
    scratch[i] = yi * dyi;
    dot += scratch[i];
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    // y (dy - dot) as y dy - y dot: y dy is in scratch already.
    const float g = scratch[i] - bf16_value(y[i]) * dot;
    dbias[i] += g;
    dscores[i] = bf16_bits(g * scale);
  }
}
void scaled_biased_softmax_backward_bf16(const uint16_t* y, const uint16_t* dy, float scale, uint16_t* dscores,
                                         float* dbias, float* scratch, int64_t n) {
  scaled_biased_softmax_backward_bf16_clones(y, dy, scale, dscores, dbias, scratch, n);
}

WXTRAIN_CLONES
static void edge_gather_sum_clones(const float* a, const float* b, const float* c, const int64_t* senders,
                                   const int64_t* receivers, float* out, int64_t edges, int64_t width) {
  for (int64_t k = 0; k < edges; ++k) {
    const float* ar = a + senders[k] * width;
    const float* br = b + receivers[k] * width;
    const float* cr = c + k * width;
    float* o = out + k * width;
#pragma omp simd
    for (int64_t l = 0; l < width; ++l) o[l] = (ar[l] + br[l]) + cr[l];
  }
}
void edge_gather_sum(const float* a, const float* b, const float* c, const int64_t* senders,
                     const int64_t* receivers, float* out, int64_t edges, int64_t width) {
  edge_gather_sum_clones(a, b, c, senders, receivers, out, edges, width);
}

// The bf16 twin of edge_gather_sum. Not one template: GCC 12 does not clone templates with
// target_clones, and the entry points must stay plain functions for the header.
WXTRAIN_CLONES
static void edge_gather_sum_bf16_clones(const uint16_t* a, const uint16_t* b, const uint16_t* c,
                                        const int64_t* senders, const int64_t* receivers, uint16_t* out,
                                        int64_t edges, int64_t width) {
  for (int64_t k = 0; k < edges; ++k) {
    const uint16_t* ar = a + senders[k] * width;
    const uint16_t* br = b + receivers[k] * width;
    const uint16_t* cr = c + k * width;
    uint16_t* o = out + k * width;
#pragma omp simd
    for (int64_t l = 0; l < width; ++l) o[l] = bf16_bits((bf16_value(ar[l]) + bf16_value(br[l])) + bf16_value(cr[l]));
  }
}
void edge_gather_sum_bf16(const uint16_t* a, const uint16_t* b, const uint16_t* c, const int64_t* senders,
                          const int64_t* receivers, uint16_t* out, int64_t edges, int64_t width) {
  edge_gather_sum_bf16_clones(a, b, c, senders, receivers, out, edges, width);
}

// ---- 2x resampling (ops/resample.h) ----
// Memory-bound (a read and a write per element) and strided by two, so plain loops without clones:
// (ATen's NCHW max-pool took ~4 ns per input element here, 1.4 ms for [8, 32, 36, 36] in fp32.)
// Templates over the stored type (float, or bf16 as uint16_t) with `value` reading either as float.

namespace {

inline float value(float x) { return x; }
inline float value(uint16_t bits) { return bf16_value(bits); }
inline void store(float* out, float v) { *out = v; }
inline void store(uint16_t* out, float v) { *out = bf16_bits(v); }

template <typename T>
void max_pool_2x2_forward_impl(const T* x, T* y, uint8_t* which, int64_t planes, int64_t height, int64_t width) {
  const int64_t out_h = height / 2, out_w = width / 2;
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t i = 0; i < out_h; ++i) {
      const T* row0 = x + (p * height + 2 * i) * width;
      const T* row1 = row0 + width;
      T* out = y + (p * out_h + i) * out_w;
      uint8_t* pos = which + (p * out_h + i) * out_w;
      for (int64_t j = 0; j < out_w; ++j) {
        const T window[4] = {row0[2 * j], row0[2 * j + 1], row1[2 * j], row1[2 * j + 1]};
        // ATen's rule: the first maximum wins, and a NaN wins over anything before it.
        float best = -INFINITY;
        int k_best = 0;
        for (int k = 0; k < 4; ++k) {
          const float v = value(window[k]);
          if (v > best || std::isnan(v)) {
            best = v;
            k_best = k;
          }
        }
        out[j] = window[k_best];
        pos[j] = static_cast<uint8_t>(k_best);
      }
    }
  }
}

template <typename T>
void max_pool_2x2_backward_impl(const T* dy, const uint8_t* which, T* dx, int64_t planes, int64_t height,
                                int64_t width) {
  const int64_t out_h = height / 2, out_w = width / 2;
  const T zero{};
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t i = 0; i < out_h; ++i) {
      T* row0 = dx + (p * height + 2 * i) * width;
      T* row1 = row0 + width;
      const T* grad = dy + (p * out_h + i) * out_w;
      const uint8_t* pos = which + (p * out_h + i) * out_w;
      // Zero both rows (a vectorized fill), then place each gradient at its window's winner.
      std::fill(row0, row0 + 2 * width, zero);
      for (int64_t j = 0; j < out_w; ++j) {
        const int k = pos[j];
        (k < 2 ? row0 : row1)[2 * j + (k & 1)] = grad[j];
      }
    }
  }
}

template <typename T>
void upsample_2x_forward_impl(const T* x, T* y, int64_t planes, int64_t height, int64_t width) {
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t i = 0; i < height; ++i) {
      const T* in = x + (p * height + i) * width;
      T* row0 = y + (p * 2 * height + 2 * i) * 2 * width;
      T* row1 = row0 + 2 * width;
      for (int64_t j = 0; j < width; ++j) row0[2 * j] = row0[2 * j + 1] = in[j];
      std::memcpy(row1, row0, 2 * width * sizeof(T));
    }
  }
}

template <typename T>
void upsample_2x_backward_impl(const T* dy, T* dx, int64_t planes, int64_t height, int64_t width) {
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t i = 0; i < height; ++i) {
      const T* row0 = dy + (p * 2 * height + 2 * i) * 2 * width;
      const T* row1 = row0 + 2 * width;
      T* out = dx + (p * height + i) * width;
      for (int64_t j = 0; j < width; ++j) {
        // ATen's order (it accumulates row by row), so that fp32 matches it bit for bit.
        store(out + j, ((value(row0[2 * j]) + value(row0[2 * j + 1])) + value(row1[2 * j])) + value(row1[2 * j + 1]));
      }
    }
  }
}

}  // namespace

void max_pool_2x2_forward(const float* x, float* y, uint8_t* which, int64_t planes, int64_t height, int64_t width) {
  max_pool_2x2_forward_impl(x, y, which, planes, height, width);
}
void max_pool_2x2_forward_bf16(const uint16_t* x, uint16_t* y, uint8_t* which, int64_t planes, int64_t height,
                               int64_t width) {
  max_pool_2x2_forward_impl(x, y, which, planes, height, width);
}
void max_pool_2x2_backward(const float* dy, const uint8_t* which, float* dx, int64_t planes, int64_t height,
                           int64_t width) {
  max_pool_2x2_backward_impl(dy, which, dx, planes, height, width);
}
void max_pool_2x2_backward_bf16(const uint16_t* dy, const uint8_t* which, uint16_t* dx, int64_t planes,
                                int64_t height, int64_t width) {
  max_pool_2x2_backward_impl(dy, which, dx, planes, height, width);
}
void upsample_2x_forward(const float* x, float* y, int64_t planes, int64_t height, int64_t width) {
  upsample_2x_forward_impl(x, y, planes, height, width);
}
void upsample_2x_forward_bf16(const uint16_t* x, uint16_t* y, int64_t planes, int64_t height, int64_t width) {
  upsample_2x_forward_impl(x, y, planes, height, width);
}
void upsample_2x_backward(const float* dy, float* dx, int64_t planes, int64_t height, int64_t width) {
  upsample_2x_backward_impl(dy, dx, planes, height, width);
}
void upsample_2x_backward_bf16(const uint16_t* dy, uint16_t* dx, int64_t planes, int64_t height, int64_t width) {
  upsample_2x_backward_impl(dy, dx, planes, height, width);
}

}  // namespace wxtrain::ops::kernels
