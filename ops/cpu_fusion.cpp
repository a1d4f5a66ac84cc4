#include "ops/cpu_fusion.h"

#include <ATen/autocast_mode.h>

namespace wxtrain::ops {
namespace {
thread_local bool cpu_fusion = true;  // per thread, as autocast's state: the step runs on one
}  // namespace

bool cpu_fusion_enabled() { return cpu_fusion; }

torch::Tensor cuda_autocast_fp32(const torch::Tensor& x) {
  if (cpu_fusion || x.is_cuda()) return x;
  const auto t = x.scalar_type();
  if (t != torch::kBFloat16 && t != torch::kHalf) return x;
  if (!at::autocast::is_autocast_enabled(x.device().type())) return x;
  return x.to(torch::kFloat);
}

CpuFusionGuard::CpuFusionGuard(bool enabled) : previous_(cpu_fusion) { cpu_fusion = enabled; }

CpuFusionGuard::~CpuFusionGuard() { cpu_fusion = previous_; }

}  // namespace wxtrain::ops
