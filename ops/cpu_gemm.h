#pragma once
// fp32 matrix products on the CPU through oneDNN's GEMM instead of the BLAS behind ATen.
//
// The torch wheel sends a CPU fp32 mm/addmm/bmm to the MKL inside libtorch_cpu, which on AMD CPUs
// runs its AVX2 kernels: on this AVX-512 EPYC about 90 GFLOP/s per core against about 200 for
// oneDNN's sgemm on the zoo's shapes (2.1-2.5x, docs/benchmarks.md). The wheel's own oneDNN hides
// its symbols, so these ops load Debian's libdnnl (oneDNN 2.6) and call dnnl_sgemm, which picks
// its kernels by the ISA it finds; without that library they keep ATen's path. Besides the kernels, the attention products read q, k and v in
// place from the permuted projection (ATen's bmm copies them), the 1/sqrt(d) scale is folded into
// the GEMM, and the Linear bias enters as the GEMM's C.
//
// Each op is an autograd Function with the same saved tensors as ATen's (the input and the
// weight; both operands), so the estimator's memory figures hold either way. They take over only
// fp32 CPU tensors outside autocast (bf16 GEMMs already go to the wheel's oneDNN through ATen) and
// only while cpu_fusion_enabled() (ops/cpu_fusion.h): the estimator's GPU traces and the
// benchmarks' --unfused runs take ATen's path.
#include <torch/torch.h>

namespace wxtrain::ops {

// True when Debian's oneDNN (libdnnl.so.2) was found and its dnnl_sgemm can be called.
bool onednn_sgemm_available();

// x [M, K] @ weight[N, K]^T + bias[N] (bias may be undefined): at::linear's result, through oneDNN
// for fp32 CPU tensors, at::linear otherwise.
torch::Tensor linear_2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// alpha * (a @ b) over matching leading (batch) dimensions: a [..., M, K], b [..., K, N], each
// operand with any strides whose last two dimensions form a row- or column-major matrix (q, k and
// v straight out of a permuted qkv projection qualify, as do their transposes), so no copies are
// made. Through oneDNN for fp32 CPU tensors; torch::matmul(a, b) * alpha otherwise.
torch::Tensor scaled_matmul(const torch::Tensor& a, const torch::Tensor& b, double alpha = 1.0);

}  // namespace wxtrain::ops
