#include "distributed/kernels/optimizer_kernels.h"

#include <cmath>

#include "core/target_clones.h"

// -fno-math-errno (distributed/CMakeLists.txt) lets sqrtf vectorize.

namespace wxtrain::distributed::kernels {

WXTRAIN_CLONES
static void adam_update_clones(float* p, const float* g, float* m, float* v, int64_t n, const AdamStep& s) {
  const float param_decay = s.param_decay, grad_decay = s.grad_decay, beta1 = s.beta1, beta2 = s.beta2;
  const float one_minus_beta1 = 1.0f - beta1, one_minus_beta2 = 1.0f - beta2;
  const float sqrt_bc2 = s.sqrt_bias_correction2, eps = s.eps, step_size = s.step_size;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float pi = p[i] * param_decay;
    const float gi = g[i] + grad_decay * pi;
    const float mi = m[i] * beta1 + one_minus_beta1 * gi;
    const float vi = v[i] * beta2 + one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * mi / (std::sqrt(vi) / sqrt_bc2 + eps);
  }
}
void adam_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamStep& s) {
  adam_update_clones(p, g, m, v, n, s);
}

}  // namespace wxtrain::distributed::kernels
