#pragma once
// How the U-Net applies its convolutions: ops::conv2d(conv, x), not conv(x).
//
// On a CPU whose oneDNN cannot run bf16 (no AVX-512 BW/VL/DQ, e.g. the AVX2-only AMD EPYCs of CI),
// ATen does not give bf16 convolutions to oneDNN (mkldnn_bf16_device_check, ATen/native/mkldnn/
// Utils.h) and runs _slow_conv2d_forward / _slow_conv2d_backward instead: an im2col buffer of
// C_in x k x k x H_out x W_out bf16 per sample for the whole batch, forward and again backward, all
// through the counting allocator. No GPU allocates it, so the estimator's GPU-standing trace counted
// memory a GPU never needs (the storm U-Net's bf16-mixed trace 29-40% above the formulas).
//
// There, and only there, a bf16 convolution (CPU autocast to bf16, or bf16 input and weight) runs
// as an autograd function that keeps what autograd keeps for `convolution` on every backend (the
// bf16 input and weight cast, the bf16 output; the bf16 grads) and computes in fp32 with oneDNN's
// fp32 kernels (at::convolution / at::convolution_backward on fp32 copies): no im2col columns, and
// the result is the fp32 sum rounded once to bf16, as the bf16 kernels give it. The fp32 copies are
// temporaries of the call. In a step that stands for a GPU (CPU fusions off, the estimator's trace
// for train.device != "cpu") they are host-only workspace and are made inside an UncountedScope
// (core/memory_meter.h); in a CPU run they are counted, as they are memory that run uses.
//
// Everywhere else (CUDA, fp32, a CPU where oneDNN runs bf16) it is conv->forward(x), unchanged.
#include <torch/torch.h>

namespace wxtrain::ops {

torch::Tensor conv2d(const torch::nn::Conv2d& conv, const torch::Tensor& x);

// Whether ATen hands bf16 convolutions on the CPU to oneDNN here (mkldnn::_is_mkldnn_bf16_supported,
// the check ATen's convolution makes; it follows ONEDNN_MAX_CPU_ISA).
bool cpu_bf16_convolution_uses_onednn();

// True when conv2d(conv, x) takes the fp32-compute path described above.
bool conv2d_computes_bf16_in_fp32(const torch::nn::Conv2d& conv, const torch::Tensor& x);

}  // namespace wxtrain::ops
