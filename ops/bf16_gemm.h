#pragma once
// bf16 matrix products on a CPU without native bf16: computed in fp32, rounded once to bf16.
//
// Where oneDNN cannot run bf16 (no AVX-512 BW/VL/DQ: the AVX2-only AMD EPYC Zen 3 of CI, most
// laptops), ATen sends a bf16 mm/addmm/bmm/baddbmm on the CPU to its portable fallback
// (at::native::cpublas gemm with bf16_dot_with_fp32_arith): one dot product at a time, about ten
// times slower than the fp32 GEMM of MKL. A bf16-mixed training step is nearly all such GEMMs (the
// Linear layers and attention products under autocast, and their backward): Pangu's storm step ran
// at 3.6 samples/s in bf16-mixed against 38 in fp32 on one core, 85% of it in that fallback (perf).
//
// There, install_bf16_gemm_in_fp32() replaces ATen's CPU kernels for those four operators: a bf16
// call copies its operands to fp32, runs ATen's own fp32 kernel (at::cpu::mm and friends, MKL's
// sgemm) and rounds the result to bf16; any other dtype goes to ATen's CPU kernel unchanged. The
// result is what the bf16 kernels compute (bf16 operands are exact in fp32, products summed in
// fp32, one rounding to bf16) up to the order of the summation. Autograd is above the CPU kernel,
// so it saves the same bf16 tensors as before: memory figures do not move. The fp32 copies are
// temporaries of the call; in a step that stands for a GPU (CPU fusions off: the estimator's trace
// for train.device != "cpu") they are host-only workspace made inside an UncountedScope
// (core/memory_meter.h), as in ops/conv2d.h; in a CPU run they are counted.
//
// On a CPU where oneDNN runs bf16 (AVX-512 BF16, AMX) nothing is installed: ATen's bf16 GEMMs go to
// oneDNN there and are faster than fp32.
#include <torch/torch.h>

namespace wxtrain::ops {

// Installs the fp32-compute kernels once per process when the CPU has no native bf16 GEMM; returns
// whether they are installed. Called when a model is built (models/registry.cpp), so every run,
// estimate, benchmark and test gets them before its first step.
bool install_bf16_gemm_in_fp32();

// Turns the installed kernels' fp32 path off and on (for the A/B benchmark: off, a bf16 call goes to
// ATen's own bf16 kernel). On by default; a no-op where nothing is installed.
void set_bf16_gemm_in_fp32(bool enabled);

// True when a bf16 CPU GEMM is computed in fp32 now (installed and enabled).
bool bf16_gemm_in_fp32();

}  // namespace wxtrain::ops
