#include "ops/cpu_gemm.h"

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <dlfcn.h>

#include <optional>

#include "ops/cpu_fusion.h"

namespace wxtrain::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// oneDNN's BLAS-style GEMM from Debian's libdnnl (oneDNN 2.6, package libdnnl2): row-major
// C = alpha * op(A) op(B) + beta * C; returns dnnl_success (0) or an error status. Declared here,
// not through <dnnl.h>, whose 3.x version the torch wheel puts first on the include path.
using DnnlSgemm = int (*)(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Loaded with RTLD_DEEPBIND, so that libdnnl binds its own symbols first: libtorch_cpu exports weak
// symbols of its built-in oneDNN 3.x (template instantiations, call_once thunks of the GEMM JIT),
// which would otherwise take over oneDNN 2.6's internals (dnnl_sgemm then answers "unimplemented").
// Without the library the zoo keeps ATen's path.
DnnlSgemm dnnl_sgemm() {
  static const DnnlSgemm fn = [] {
    void* library = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    return library ? reinterpret_cast<DnnlSgemm>(dlsym(library, "dnnl_sgemm")) : nullptr;
  }();
  return fn;
}

void sgemm(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const int status = dnnl_sgemm()(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  TORCH_CHECK(status == 0, "oneDNN dnnl_sgemm(", transa, transb, ", M=", M, ", N=", N, ", K=", K,
              ") failed with status ", status);
}

// How a [rows, cols] matrix with strides (row_stride, col_stride) reads as a row-major BLAS
// operand: as itself ('N') or as the transpose of a row-major matrix ('T'), with its leading
// dimension. Anything else (a broadcast, a strided slice of both) has to be copied first.
struct BlasOperand {
  char trans;
  int64_t ld;
};

std::optional<BlasOperand> as_blas_operand(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if (col_stride == 1 && (rows == 1 || row_stride >= cols)) return BlasOperand{'N', rows == 1 ? cols : row_stride};
  if (row_stride == 1 && (cols == 1 || col_stride >= rows)) return BlasOperand{'T', cols == 1 ? rows : col_stride};
  return std::nullopt;
}

BlasOperand blas_operand(torch::Tensor& t) {
  if (auto op = as_blas_operand(t.size(-2), t.size(-1), t.stride(-2), t.stride(-1))) return *op;
  t = t.contiguous();
  return *as_blas_operand(t.size(-2), t.size(-1), t.stride(-2), t.stride(-1));
}

// Element offset of batch item `index` (row-major over the leading dimensions) in `t`.
int64_t batch_offset(const torch::Tensor& t, int64_t index) {
  int64_t offset = 0;
  for (int64_t dim = t.dim() - 3; dim >= 0; --dim) {
    offset += (index % t.size(dim)) * t.stride(dim);
    index /= t.size(dim);
  }
  return offset;
}

// alpha * a @ b for a [..., M, K] and b [..., K, N] with equal leading shapes, as a new contiguous
// [..., M, N]. Batch items run in parallel, one single-threaded GEMM each (a GEMM called inside a
// parallel region runs on its caller's thread: OpenMP does not nest by default); a single matrix
// gets every thread.
torch::Tensor batched_gemm(torch::Tensor a, torch::Tensor b, float alpha) {
  const BlasOperand op_a = blas_operand(a), op_b = blas_operand(b);
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  std::vector<int64_t> out_sizes = a.sizes().vec();
  out_sizes.back() = N;
  torch::Tensor out = torch::empty(out_sizes, a.options());
  const int64_t batch = out.numel() / (M * N);
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  float* po = out.data_ptr<float>();
  at::parallel_for(0, batch, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      sgemm(op_a.trans, op_b.trans, M, N, K, alpha, pa + batch_offset(a, i), op_a.ld, pb + batch_offset(b, i), op_b.ld,
            0.0f, po + i * M * N, N);
    }
  });
  return out;
}

// x [M, K] @ weight [N, K]^T (+ bias [N]). Saves what ATen's addmm/mm saves: the input and the
// weight. Two classes because a custom Function cannot take an undefined tensor as an input.
torch::Tensor linear_forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& weight_in,
                             const torch::Tensor& bias) {
  const torch::Tensor x = x_in.contiguous(), weight = weight_in.contiguous();
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  // The bias enters as C with beta = 1: one pass to lay it out, none after the GEMM.
  torch::Tensor out = bias.defined() ? bias.expand({M, N}).contiguous() : torch::empty({M, N}, x.options());
  sgemm('N', 'T', M, N, K, 1.0f, x.data_ptr<float>(), K, weight.data_ptr<float>(), K, bias.defined() ? 1.0f : 0.0f,
        out.data_ptr<float>(), N);
  ctx->save_for_backward({x, weight});
  return out;
}

variable_list linear_backward(AutogradContext* ctx, const variable_list& grad_outputs, bool has_bias) {
  torch::Tensor dx, dweight, dbias;
  if (grad_outputs[0].defined()) {
    const torch::Tensor grad = grad_outputs[0].contiguous();
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& weight = saved[1];
    const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
    if (ctx->needs_input_grad(0)) {  // grad [M, N] @ weight [N, K]
      dx = torch::empty({M, K}, x.options());
      sgemm('N', 'N', M, K, N, 1.0f, grad.data_ptr<float>(), N, weight.data_ptr<float>(), K, 0.0f,
            dx.data_ptr<float>(), K);
    }
    if (ctx->needs_input_grad(1)) {  // grad^T [N, M] @ x [M, K]
      dweight = torch::empty({N, K}, weight.options());
      sgemm('T', 'N', N, K, M, 1.0f, grad.data_ptr<float>(), N, x.data_ptr<float>(), K, 0.0f,
            dweight.data_ptr<float>(), K);
    }
    if (has_bias && ctx->needs_input_grad(2)) dbias = grad.sum(0);
  }
  if (!has_bias) return {dx, dweight};
  return {dx, dweight, dbias};
}

class LinearFp32 : public torch::autograd::Function<LinearFp32> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias) {
    return linear_forward(ctx, x, weight, bias);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    return linear_backward(ctx, grad_outputs, true);
  }
};

class LinearNoBiasFp32 : public torch::autograd::Function<LinearNoBiasFp32> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight) {
    return linear_forward(ctx, x, weight, torch::Tensor());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    return linear_backward(ctx, grad_outputs, false);
  }
};

// alpha * a @ b over batch dimensions. Saves both operands as given (views, not copies).
class ScaledMatmulFp32 : public torch::autograd::Function<ScaledMatmulFp32> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b, double alpha) {
    ctx->save_for_backward({a, b});
    ctx->saved_data["alpha"] = alpha;
    return batched_gemm(a, b, static_cast<float>(alpha));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    torch::Tensor da, db;
    const torch::Tensor& grad = grad_outputs[0];
    if (!grad.defined()) return {da, db, torch::Tensor()};
    const auto saved = ctx->get_saved_variables();
    const auto alpha = static_cast<float>(ctx->saved_data["alpha"].toDouble());
    if (ctx->needs_input_grad(0)) da = batched_gemm(grad, saved[1].transpose(-2, -1), alpha);
    if (ctx->needs_input_grad(1)) db = batched_gemm(saved[0].transpose(-2, -1), grad, alpha);
    return {da, db, torch::Tensor()};
  }
};

bool takes_onednn_path(const torch::Tensor& a, const torch::Tensor& b) {
  return cpu_fusion_enabled() && !at::autocast::is_autocast_enabled(at::kCPU) && a.device().is_cpu() &&
         b.device().is_cpu() && a.scalar_type() == torch::kFloat && b.scalar_type() == torch::kFloat && a.numel() > 0 &&
         b.numel() > 0 && onednn_sgemm_available();
}

}  // namespace

bool onednn_sgemm_available() { return dnnl_sgemm() != nullptr; }

torch::Tensor linear_2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const bool fp32_bias = !bias.defined() || (bias.scalar_type() == torch::kFloat && bias.device().is_cpu());
  if (x.dim() == 2 && weight.dim() == 2 && fp32_bias && takes_onednn_path(x, weight)) {
    return bias.defined() ? LinearFp32::apply(x, weight, bias) : LinearNoBiasFp32::apply(x, weight);
  }
  return at::linear(x, weight, bias);
}

torch::Tensor scaled_matmul(const torch::Tensor& a, const torch::Tensor& b, double alpha) {
  if (a.dim() >= 2 && a.dim() == b.dim() && a.sizes().slice(0, a.dim() - 2) == b.sizes().slice(0, b.dim() - 2) &&
      a.size(-1) == b.size(-2) && takes_onednn_path(a, b)) {
    return ScaledMatmulFp32::apply(a, b, alpha);
  }
  torch::Tensor out = torch::matmul(a, b);
  // In place: matmul's backward needs its operands, not its output.
  return alpha == 1.0 ? out : out.mul_(alpha);
}

}  // namespace wxtrain::ops
