#pragma once
// fp32 matrix products on the CPU as autograd Functions over the BLAS LibTorch links (MKL in the
// torch wheel), called directly.
//
// They began as a way around Debian's OpenBLAS (AVX2 kernels on AVX-512 CPUs) through oneDNN's
// dnnl_sgemm; the torch wheel hides oneDNN's symbols and brings MKL, so they now call the same
// sgemm_ ATen calls. What they still save over ATen's path: the attention products read q, k and v
// in place from the permuted projection (ATen's bmm copies non-contiguous batches), the 1/sqrt(d)
// scale is folded into the GEMM, and the Linear bias enters as the GEMM's C. Whether that still
// pays is measured in docs/benchmarks.md (the --unfused A/B).
//
// Each op saves what ATen's saves (the input and the weight; both operands), so the estimator's
// memory figures hold either way. They take over only fp32 CPU tensors outside autocast and only
// while cpu_fusion_enabled() (models/cpu_fusion.h): the estimator's GPU traces and the benchmarks'
// --unfused runs take ATen's path.
#include <torch/torch.h>

namespace wxtrain::models {

// True when the process has a Fortran BLAS sgemm_ to call (LibTorch's MKL).
bool blas_sgemm_available();

// x [M, K] @ weight[N, K]^T + bias[N] (bias may be undefined): at::linear's result, through the BLAS
// for fp32 CPU tensors, at::linear otherwise.
torch::Tensor linear_2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// alpha * (a @ b) over matching leading (batch) dimensions: a [..., M, K], b [..., K, N], each
// operand with any strides whose last two dimensions form a row- or column-major matrix (q, k and
// v straight out of a permuted qkv projection qualify, as do their transposes), so no copies are
// made. Through the BLAS for fp32 CPU tensors; torch::matmul(a, b) * alpha otherwise.
torch::Tensor scaled_matmul(const torch::Tensor& a, const torch::Tensor& b, double alpha = 1.0);

}  // namespace wxtrain::models
