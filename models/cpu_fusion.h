#pragma once
// wxtrain's fused CPU kernels (models/group_norm_silu.h, models/bf16_silu.h) and the switch that
// turns them off for a thread.
//
// A fused op computes what LibTorch's unfused chain computes, with fewer passes over memory and
// fewer saved tensors. The switch exists for the estimator: a fused CPU step keeps less than a
// GPU's step of the same model, so a CPU trace that stands for a GPU run turns the fusions off
// (estimator/activation_trace.h). Benchmarks use it for A/B runs.
namespace wxtrain::models {

bool cpu_fusion_enabled();  // on by default

class CpuFusionGuard {
 public:
  explicit CpuFusionGuard(bool enabled);
  ~CpuFusionGuard();
  CpuFusionGuard(const CpuFusionGuard&) = delete;
  CpuFusionGuard& operator=(const CpuFusionGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace wxtrain::models
