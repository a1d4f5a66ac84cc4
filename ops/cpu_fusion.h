#pragma once
// wxtrain's fused CPU kernels (ops/group_norm_silu.h, ops/bf16_silu.h) and the switch that
// turns them off for a thread.
//
// A fused op computes what LibTorch's unfused chain computes, with fewer passes over memory and
// fewer saved tensors. The switch exists for the estimator: a fused CPU step keeps less than a
// GPU's step of the same model, so a CPU trace that stands for a GPU run turns the fusions off
// (estimator/activation_trace.h). Benchmarks use it for A/B runs.
//
// The same switch makes the CPU step follow CUDA's autocast policy where the two autocasts
// disagree: CUDA's runs layer_norm and softmax (its fp32 list) in fp32 on bf16/fp16 inputs and hands
// on fp32 outputs, the CPU's runs them in the lower type. A GPU-standing trace that kept the CPU's
// policy saved half the bytes the GPU saves for those tensors: on an H100 the ViT's bf16-mixed
// activations came out 22% above such a trace (docs/benchmarks.md, "The first GPU check").
#include <torch/torch.h>

namespace wxtrain::ops {

bool cpu_fusion_enabled();  // on by default

// The input of a layer_norm or softmax as CUDA's autocast would hand it over: x in fp32 when
// autocast is on for x's device, x is bf16 or fp16, x is not on a CUDA device (there autocast
// does it) and the CPU fusions are off (the GPU step); x itself otherwise.
torch::Tensor cuda_autocast_fp32(const torch::Tensor& x);

class CpuFusionGuard {
 public:
  explicit CpuFusionGuard(bool enabled);
  ~CpuFusionGuard();
  CpuFusionGuard(const CpuFusionGuard&) = delete;
  CpuFusionGuard& operator=(const CpuFusionGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace wxtrain::ops
