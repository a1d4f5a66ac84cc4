#include "ops/resample.h"

#include <ATen/Parallel.h>

#include "ops/bf16_data.h"
#include "ops/cpu_fusion.h"
#include "ops/kernels/fused_kernels.h"

namespace wxtrain::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Planes per task: about 16K elements, so that the small planes of the coarse levels still split.
int64_t plane_grain(int64_t plane_elements) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, plane_elements)); }

bool fusable(const torch::Tensor& x) {
  const auto t = x.scalar_type();
  return cpu_fusion_enabled() && x.device().is_cpu() && (t == torch::kFloat || t == torch::kBFloat16) && x.dim() == 4 &&
         x.numel() > 0;
}

class MaxPool2x2 : public torch::autograd::Function<MaxPool2x2> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input) {
    const torch::Tensor x = input.contiguous();
    const int64_t H = x.size(2), W = x.size(3), planes = x.size(0) * x.size(1);
    torch::Tensor y = torch::empty({x.size(0), x.size(1), H / 2, W / 2}, x.options());
    torch::Tensor which = torch::empty(y.sizes(), x.options().dtype(torch::kUInt8));
    const bool bf16 = x.scalar_type() == torch::kBFloat16;
    const int64_t in_plane = H * W, out_plane = (H / 2) * (W / 2);
    uint8_t* pos = which.data_ptr<uint8_t>();
    at::parallel_for(0, planes, plane_grain(in_plane), [&](int64_t begin, int64_t end) {
      if (bf16) {
        kernels::max_pool_2x2_forward_bf16(bf16_data(x) + begin * in_plane, bf16_data(y) + begin * out_plane,
                                           pos + begin * out_plane, end - begin, H, W);
      } else {
        kernels::max_pool_2x2_forward(x.data_ptr<float>() + begin * in_plane, y.data_ptr<float>() + begin * out_plane,
                                      pos + begin * out_plane, end - begin, H, W);
      }
    });
    ctx->save_for_backward({which});
    ctx->saved_data["height"] = H;
    ctx->saved_data["width"] = W;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    if (!grad_outputs[0].defined()) return {torch::Tensor()};
    const torch::Tensor which = ctx->get_saved_variables()[0];
    const int64_t H = ctx->saved_data["height"].toInt(), W = ctx->saved_data["width"].toInt();
    const torch::Tensor dy = grad_outputs[0].contiguous();
    torch::Tensor dx = torch::empty({dy.size(0), dy.size(1), H, W}, dy.options());
    const int64_t planes = dy.size(0) * dy.size(1), in_plane = H * W, out_plane = (H / 2) * (W / 2);
    const uint8_t* pos = which.data_ptr<uint8_t>();
    const bool bf16 = dy.scalar_type() == torch::kBFloat16;
    at::parallel_for(0, planes, plane_grain(in_plane), [&](int64_t begin, int64_t end) {
      if (bf16) {
        kernels::max_pool_2x2_backward_bf16(bf16_data(dy) + begin * out_plane, pos + begin * out_plane,
                                            bf16_data(dx) + begin * in_plane, end - begin, H, W);
      } else {
        kernels::max_pool_2x2_backward(dy.data_ptr<float>() + begin * out_plane, pos + begin * out_plane,
                                       dx.data_ptr<float>() + begin * in_plane, end - begin, H, W);
      }
    });
    return {dx};
  }
};

class Upsample2xConcat : public torch::autograd::Function<Upsample2xConcat> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& coarse_in, const torch::Tensor& skip) {
    const torch::Tensor coarse = coarse_in.contiguous();
    const int64_t N = coarse.size(0), Cc = coarse.size(1), h = coarse.size(2), w = coarse.size(3);
    const int64_t Cs = skip.size(1), C = Cc + Cs;
    torch::Tensor out = torch::empty({N, C, 2 * h, 2 * w}, coarse.options());
    const int64_t coarse_plane = h * w, fine_plane = 4 * h * w;
    const bool bf16 = coarse.scalar_type() == torch::kBFloat16;
    at::parallel_for(0, N * Cc, plane_grain(fine_plane), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const int64_t dst = (p / Cc * C + p % Cc) * fine_plane;  // sample p / Cc, channel p % Cc
        if (bf16) {
          kernels::upsample_2x_forward_bf16(bf16_data(coarse) + p * coarse_plane, bf16_data(out) + dst, 1, h, w);
        } else {
          kernels::upsample_2x_forward(coarse.data_ptr<float>() + p * coarse_plane, out.data_ptr<float>() + dst, 1, h, w);
        }
      }
    });
    out.narrow(1, Cc, Cs).copy_(skip);
    ctx->saved_data["coarse_channels"] = Cc;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    if (!grad_outputs[0].defined()) return {torch::Tensor(), torch::Tensor()};
    const torch::Tensor grad = grad_outputs[0].contiguous();
    const int64_t Cc = ctx->saved_data["coarse_channels"].toInt();
    const int64_t N = grad.size(0), C = grad.size(1), h = grad.size(2) / 2, w = grad.size(3) / 2;
    torch::Tensor dcoarse = torch::empty({N, Cc, h, w}, grad.options());
    const int64_t coarse_plane = h * w, fine_plane = 4 * h * w;
    const bool bf16 = grad.scalar_type() == torch::kBFloat16;
    at::parallel_for(0, N * Cc, plane_grain(fine_plane), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const int64_t src = (p / Cc * C + p % Cc) * fine_plane;
        if (bf16) {
          kernels::upsample_2x_backward_bf16(bf16_data(grad) + src, bf16_data(dcoarse) + p * coarse_plane, 1, h, w);
        } else {
          kernels::upsample_2x_backward(grad.data_ptr<float>() + src, dcoarse.data_ptr<float>() + p * coarse_plane, 1, h,
                                        w);
        }
      }
    });
    return {dcoarse, grad.narrow(1, Cc, C - Cc)};
  }
};

}  // namespace

torch::Tensor max_pool_2x2(const torch::Tensor& x) {
  if (fusable(x) && x.size(2) % 2 == 0 && x.size(3) % 2 == 0) return MaxPool2x2::apply(x);
  return torch::max_pool2d(x, {2, 2});
}

torch::Tensor upsample_2x_concat(const torch::Tensor& coarse, const torch::Tensor& skip) {
  if (fusable(coarse) && skip.dim() == 4 && skip.device().is_cpu() && skip.size(0) == coarse.size(0) &&
      skip.size(2) == 2 * coarse.size(2) && skip.size(3) == 2 * coarse.size(3)) {
    return Upsample2xConcat::apply(coarse, skip.to(coarse.scalar_type()));
  }
  // CPU autocast runs LibTorch's upsample_nearest2d in fp32, so `up` can be fp32 where `skip` is
  // bf16 (or the other way round); cat needs one dtype.
  torch::Tensor up = torch::upsample_nearest2d(coarse, std::vector<int64_t>{skip.size(2), skip.size(3)});
  return torch::cat({up, skip.scalar_type() == up.scalar_type() ? skip : skip.to(up.scalar_type())}, 1);
}

}  // namespace wxtrain::ops
