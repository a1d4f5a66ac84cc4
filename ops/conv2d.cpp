#include "ops/conv2d.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include "core/memory_meter.h"
#include "ops/cpu_fusion.h"

namespace wxtrain::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool cpu_autocast_bf16() {
  return at::autocast::is_autocast_enabled(at::kCPU) && at::autocast::get_autocast_dtype(at::kCPU) == at::kBFloat16;
}

bool autocast_eligible(const torch::Tensor& t) {
  return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16;
}

// The bf16 convolution computed in fp32; saves the bf16 input and weight as autograd's
// `convolution` does, returns the bf16 output and bf16 gradients.
class Bf16ConvInFp32 : public torch::autograd::Function<Bf16ConvInFp32> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, std::vector<int64_t> stride, std::vector<int64_t> padding,
                               std::vector<int64_t> dilation, int64_t groups) {
    ctx->save_for_backward({x, weight});
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["padding"] = padding;
    ctx->saved_data["dilation"] = dilation;
    ctx->saved_data["groups"] = groups;
    // No bias comes as an empty tensor (an undefined one cannot be an autograd function's input).
    const bool has_bias = bias.numel() > 0;
    ctx->saved_data["bias"] = has_bias ? bias.sizes().vec() : std::vector<int64_t>{};
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
    std::vector<int64_t> sizes{x.size(0), weight.size(0)};
    for (int64_t d = 0; d < 2; ++d)
      sizes.push_back((x.size(2 + d) + 2 * padding[d] - dilation[d] * (weight.size(2 + d) - 1) - 1) / stride[d] + 1);
    torch::Tensor y = at::empty(sizes, x.options().dtype(at::kBFloat16));  // what a bf16 kernel allocates: counted
    {
      const UncountedScope host_only(!cpu_fusion_enabled());
      const torch::Tensor w32 = weight.to(at::kFloat);
      const torch::Tensor b32 = has_bias ? bias.to(at::kFloat) : torch::Tensor();
      for (int64_t n = 0; n < x.size(0); ++n) {
        torch::Tensor y32 = at::convolution(x.narrow(0, n, 1).to(at::kFloat), w32, b32, stride, padding, dilation,
                                            /*transposed=*/false, /*output_padding=*/{0, 0}, groups);
        y.narrow(0, n, 1).copy_(y32);
      }
    }
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& weight = saved[1];
    const std::vector<int64_t> stride = ctx->saved_data["stride"].toIntVector();
    const std::vector<int64_t> padding = ctx->saved_data["padding"].toIntVector();
    const std::vector<int64_t> dilation = ctx->saved_data["dilation"].toIntVector();
    const int64_t groups = ctx->saved_data["groups"].toInt();
    const std::vector<int64_t> bias_sizes = ctx->saved_data["bias"].toIntVector();
    const bool has_bias = !bias_sizes.empty();
    const std::array<bool, 3> mask{ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                   has_bias && ctx->needs_input_grad(2)};
    // One sample at a time, so that the fp32 copies are one sample's (a workspace that does not
    // grow with the batch); the weight and bias gradients are summed over the samples in fp32.
    torch::Tensor gi, gw, gb;
    if (grads[0].defined() && (mask[0] || mask[1] || mask[2])) {
      c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
      const torch::Tensor& go = grads[0];
      if (mask[0]) gi = at::empty(x.sizes(), x.options().dtype(at::kBFloat16));  // counted
      const UncountedScope host_only(!cpu_fusion_enabled());
      const torch::Tensor w32 = weight.to(at::kFloat);
      for (int64_t n = 0; n < x.size(0); ++n) {
        auto [gi32, gw32, gb32] = at::convolution_backward(
            go.narrow(0, n, 1).to(at::kFloat), x.narrow(0, n, 1).to(at::kFloat), w32,
            has_bias ? at::OptionalIntArrayRef(bias_sizes) : at::OptionalIntArrayRef(), stride, padding, dilation,
            /*transposed=*/false, /*output_padding=*/{0, 0}, groups, mask);
        if (mask[0]) gi.narrow(0, n, 1).copy_(gi32);
        if (mask[1]) gw = gw.defined() ? gw.add_(gw32) : gw32;
        if (mask[2]) gb = gb.defined() ? gb.add_(gb32) : gb32;
      }
    }
    // The bf16 weight and bias gradients a bf16 kernel allocates: counted.
    auto low = [](const torch::Tensor& g) { return g.defined() ? g.to(at::kBFloat16) : torch::Tensor(); };
    return {gi, low(gw), low(gb), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool cpu_bf16_convolution_uses_onednn() {
  static const bool uses = [] {
    auto op = c10::Dispatcher::singleton().findSchema({"mkldnn::_is_mkldnn_bf16_supported", ""});
    if (!op) return true;  // cannot tell: leave ATen's path alone
    return op->typed<bool()>().call();
  }();
  return uses;
}

bool conv2d_computes_bf16_in_fp32(const torch::nn::Conv2d& conv, const torch::Tensor& x) {
  if (!x.is_cpu()) return false;
  const torch::Tensor& w = conv->weight;
  const bool bf16 = cpu_autocast_bf16() ? autocast_eligible(x) && autocast_eligible(w)
                                        : x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16;
  if (!bf16) return false;
  const auto& o = conv->options;
  if (!std::holds_alternative<torch::ExpandingArray<2>>(o.padding())) return false;
  if (!std::holds_alternative<torch::enumtype::kZeros>(o.padding_mode())) return false;
  if (o.transposed()) return false;
  return !cpu_bf16_convolution_uses_onednn();
}

torch::Tensor conv2d(const torch::nn::Conv2d& conv, const torch::Tensor& x) {
  if (!conv2d_computes_bf16_in_fp32(conv, x)) return conv.ptr()->forward(x);
  const auto& o = conv->options;
  // The casts CPU autocast makes for `conv2d` (the weight's cached for the step, as there).
  auto cast = [](const torch::Tensor& t) {
    return t.defined() ? at::autocast::cached_cast(at::kBFloat16, t, c10::DeviceType::CPU) : t;
  };
  const bool autocast = cpu_autocast_bf16();
  const torch::Tensor xb = autocast ? cast(x) : x;
  const torch::Tensor wb = autocast ? cast(conv->weight) : conv->weight;
  const torch::Tensor bb = !conv->bias.defined() ? torch::empty({0}, x.options().dtype(at::kBFloat16))
                           : autocast                 ? cast(conv->bias)
                                                      : conv->bias;
  const auto pad = std::get<torch::ExpandingArray<2>>(o.padding());
  auto vec = [](const torch::ExpandingArray<2>& a) { return std::vector<int64_t>(a->begin(), a->end()); };
  return Bf16ConvInFp32::apply(xb, wb, bb, vec(o.stride()), vec(pad), vec(o.dilation()), o.groups());
}

}  // namespace wxtrain::ops
