#include "ops/group_norm_silu.h"

#include <ATen/Parallel.h>

#include "ops/bf16_data.h"
#include "ops/kernels/fused_kernels.h"

namespace wxtrain::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A slice's values as fp32: the tensor's own memory for fp32, converted into `buffer` for bf16.
const float* as_float(const torch::Tensor& t, int64_t offset, int64_t n, std::vector<float>& buffer) {
  if (t.scalar_type() == torch::kFloat) return t.data_ptr<float>() + offset;
  buffer.resize(static_cast<size_t>(n));
  kernels::bf16_to_float(bf16_data(t) + offset, buffer.data(), n);
  return buffer.data();
}

// Where a slice's fp32 result goes: straight into an fp32 tensor, or into `buffer` and then
// (store) rounded into a bf16 one.
float* out_float(torch::Tensor& t, int64_t offset, int64_t n, std::vector<float>& buffer) {
  if (t.scalar_type() == torch::kFloat) return t.data_ptr<float>() + offset;
  buffer.resize(static_cast<size_t>(n));
  return buffer.data();
}
void store(torch::Tensor& t, int64_t offset, int64_t n, const std::vector<float>& buffer) {
  if (t.scalar_type() == torch::kFloat) return;
  kernels::float_to_bf16(buffer.data(), bf16_data(t) + offset, n);
}

struct Shape {
  int64_t batch, channels, plane, groups, per_group;
  int64_t slice() const { return per_group * plane; }
};

Shape shape_of(const torch::Tensor& x, int64_t groups) {
  const int64_t batch = x.size(0), channels = x.size(1);
  return {batch, channels, batch * channels == 0 ? 0 : x.numel() / (batch * channels), groups, channels / groups};
}

class GroupNormSiLU : public torch::autograd::Function<GroupNormSiLU> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, const torch::Tensor& weight,
                               const torch::Tensor& bias, int64_t groups, double eps) {
    const torch::Tensor x = input.contiguous();
    const Shape s = shape_of(x, groups);
    torch::Tensor y = torch::empty_like(x, at::MemoryFormat::Contiguous);
    torch::Tensor mean = torch::empty({s.batch, groups}, x.options().dtype(torch::kFloat));
    torch::Tensor rstd = torch::empty_like(mean);
    // fp32 affine parameters for the kernel (a copy only under pure bf16, where they are bf16).
    const torch::Tensor gamma = weight.to(torch::kFloat).contiguous(), beta = bias.to(torch::kFloat).contiguous();
    const float* g = gamma.data_ptr<float>();
    const float* b = beta.data_ptr<float>();
    float* m = mean.data_ptr<float>();
    float* r = rstd.data_ptr<float>();
    at::parallel_for(0, s.batch * groups, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> in_buffer, out_buffer;
      for (int64_t ng = begin; ng < end; ++ng) {
        const int64_t offset = ng * s.slice(), c0 = (ng % groups) * s.per_group;
        const float* xs = as_float(x, offset, s.slice(), in_buffer);
        float* ys = out_float(y, offset, s.slice(), out_buffer);
        kernels::group_norm_silu_forward(xs, ys, s.per_group, s.plane, g + c0, b + c0, static_cast<float>(eps), m + ng,
                                         r + ng);
        store(y, offset, s.slice(), out_buffer);
      }
    });
    ctx->save_for_backward({x, gamma, beta, mean, rstd});
    ctx->saved_data["groups"] = groups;
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& gamma = saved[1];
    const torch::Tensor& beta = saved[2];
    const float* m = saved[3].data_ptr<float>();
    const float* r = saved[4].data_ptr<float>();
    const int64_t groups = ctx->saved_data["groups"].toInt();
    const auto weight_dtype = static_cast<torch::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    const Shape s = shape_of(x, groups);
    if (!grad_outputs[0].defined()) return {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    const torch::Tensor dy = grad_outputs[0].to(x.scalar_type()).contiguous();
    torch::Tensor dx = torch::empty_like(x, at::MemoryFormat::Contiguous);
    // Per-sample affine gradients, summed over the batch after the parallel loop.
    torch::Tensor dgamma = torch::empty({s.batch, s.channels}, x.options().dtype(torch::kFloat));
    torch::Tensor dbeta = torch::empty_like(dgamma);
    const float* g = gamma.data_ptr<float>();
    const float* b = beta.data_ptr<float>();
    float* dg = dgamma.data_ptr<float>();
    float* db = dbeta.data_ptr<float>();
    at::parallel_for(0, s.batch * groups, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> x_buffer, dy_buffer, dx_buffer, scratch(static_cast<size_t>(s.slice()));
      for (int64_t ng = begin; ng < end; ++ng) {
        const int64_t offset = ng * s.slice(), c0 = (ng % groups) * s.per_group;
        const int64_t row = (ng / groups) * s.channels + c0;
        const float* xs = as_float(x, offset, s.slice(), x_buffer);
        const float* dys = as_float(dy, offset, s.slice(), dy_buffer);
        float* dxs = out_float(dx, offset, s.slice(), dx_buffer);
        kernels::group_norm_silu_backward(xs, dys, dxs, scratch.data(), s.per_group, s.plane, g + c0, b + c0, m[ng],
                                          r[ng], dg + row, db + row);
        store(dx, offset, s.slice(), dx_buffer);
      }
    });
    return {dx, dgamma.sum(0).to(weight_dtype), dbeta.sum(0).to(weight_dtype), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool group_norm_silu_is_fused(const torch::Tensor& x, const torch::nn::GroupNorm& norm) {
  const auto& options = norm->options;
  auto fused_dtype = [](torch::ScalarType t) { return t == torch::kFloat || t == torch::kBFloat16; };
  return cpu_fusion_enabled() && x.device().is_cpu() && x.dim() >= 2 && options.affine() && norm->weight.device().is_cpu() &&
         fused_dtype(x.scalar_type()) && fused_dtype(norm->weight.scalar_type()) &&
         norm->bias.scalar_type() == norm->weight.scalar_type() &&
         x.size(1) == options.num_channels() && options.num_channels() % options.num_groups() == 0;
}

torch::Tensor group_norm_silu(const torch::Tensor& x, const torch::nn::GroupNorm& norm) {
  if (group_norm_silu_is_fused(x, norm)) {
    return GroupNormSiLU::apply(x, norm->weight, norm->bias, norm->options.num_groups(), norm->options.eps());
  }
  // The unfused chain. GroupNorm in LibTorch 1.13 needs input and affine parameters of one dtype,
  // and CPU autocast leaves it alone: normalise in the parameters' dtype (fp32 statistics under
  // autocast, as autocast does for other norms); the next conv casts back down.
  const auto dtype = norm->options.affine() ? norm->weight.scalar_type() : x.scalar_type();
  const auto& o = norm->options;
  return torch::silu(
      torch::group_norm(x.scalar_type() == dtype ? x : x.to(dtype), o.num_groups(), norm->weight, norm->bias, o.eps()));
}

}  // namespace wxtrain::ops
