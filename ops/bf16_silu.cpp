#include "ops/bf16_silu.h"

#include <ATen/Parallel.h>

#include "ops/bf16_data.h"
#include "ops/kernels/fused_kernels.h"

namespace wxtrain::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Elements per task: a chunk and its fp32 copies stay in L1/L2 between the passes.
constexpr int64_t kChunk = 4096;

class Bf16SiLU : public torch::autograd::Function<Bf16SiLU> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input) {
    const torch::Tensor x = input.contiguous();
    torch::Tensor y = torch::empty_like(x, at::MemoryFormat::Contiguous);
    const uint16_t* in = bf16_data(x);
    uint16_t* out = bf16_data(y);
    at::parallel_for(0, x.numel(), kChunk, [&](int64_t begin, int64_t end) {
      float xs[kChunk], ys[kChunk];
      for (int64_t i = begin; i < end; i += kChunk) {
        const int64_t n = std::min(kChunk, end - i);
        kernels::bf16_to_float(in + i, xs, n);
        kernels::silu_forward(xs, ys, n);
        kernels::float_to_bf16(ys, out + i, n);
      }
    });
    ctx->save_for_backward({x});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    if (!grad_outputs[0].defined()) return {torch::Tensor()};
    const torch::Tensor x = ctx->get_saved_variables()[0];
    const torch::Tensor dy = grad_outputs[0].to(torch::kBFloat16).contiguous();
    torch::Tensor dx = torch::empty_like(x, at::MemoryFormat::Contiguous);
    const uint16_t* in = bf16_data(x);
    const uint16_t* grad_in = bf16_data(dy);
    uint16_t* grad_out = bf16_data(dx);
    at::parallel_for(0, x.numel(), kChunk, [&](int64_t begin, int64_t end) {
      float xs[kChunk], dys[kChunk], dxs[kChunk];
      for (int64_t i = begin; i < end; i += kChunk) {
        const int64_t n = std::min(kChunk, end - i);
        kernels::bf16_to_float(in + i, xs, n);
        kernels::bf16_to_float(grad_in + i, dys, n);
        kernels::silu_backward(xs, dys, dxs, n);
        kernels::float_to_bf16(dxs, grad_out + i, n);
      }
    });
    return {dx};
  }
};

}  // namespace

torch::Tensor bf16_silu(const torch::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == torch::kBFloat16 && x.device().is_cpu(), "bf16_silu: expected a bf16 CPU tensor, got ",
              x.scalar_type(), " on ", x.device());
  return Bf16SiLU::apply(x);
}

}  // namespace wxtrain::ops
