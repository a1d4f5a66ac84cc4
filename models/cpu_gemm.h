#pragma once
// fp32 matrix products on the CPU through oneDNN's GEMM instead of the BLAS behind ATen.
//
// ATen sends a CPU fp32 mm/addmm/bmm to the system BLAS. Debian's OpenBLAS 0.3.21 predates its
// Zen 4 support and runs its AVX2 (Haswell) kernels on an AVX-512 AMD EPYC: half the fp32 GEMM
// throughput oneDNN gets on the same core (bench/matmul_precision.cpp, docs/benchmarks.md). oneDNN
// ships inside every LibTorch with MKL-DNN (Debian's links libdnnl.so.2) and picks its kernels by
// the ISA it finds. Its BLAS-style entry point, dnnl_sgemm, is looked up at run time, so a LibTorch
// without it simply keeps ATen's path.
//
// Each op here is an autograd Function with the same saved tensors as ATen's (the input and the
// weight; both operands), so the estimator's memory figures hold either way. They take over only
// fp32 CPU tensors outside autocast (bf16 GEMMs already go to oneDNN through ATen) and only while
// cpu_fusion_enabled() (models/cpu_fusion.h): the estimator's GPU traces and the benchmarks'
// --unfused runs take ATen's path.
#include <torch/torch.h>

namespace wxtrain::models {

// True when LibTorch's process has oneDNN's dnnl_sgemm to call.
bool onednn_sgemm_available();

// x [M, K] @ weight[N, K]^T + bias[N] (bias may be undefined): at::linear's result, through oneDNN
// for fp32 CPU tensors, at::linear otherwise.
torch::Tensor linear_2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// alpha * (a @ b) over matching leading (batch) dimensions: a [..., M, K], b [..., K, N], each
// operand with any strides whose last two dimensions form a row- or column-major matrix (q, k and
// v straight out of a permuted qkv projection qualify, as do their transposes), so no copies are
// made. Through oneDNN for fp32 CPU tensors; torch::matmul(a, b) * alpha otherwise.
torch::Tensor scaled_matmul(const torch::Tensor& a, const torch::Tensor& b, double alpha = 1.0);

}  // namespace wxtrain::models
