#include "models/pangu/pangu.h"

#include <ATen/Parallel.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"
#include "ops/bf16_data.h"
#include "ops/cpu_fusion.h"
#include "ops/cpu_gemm.h"
#include "ops/kernels/fused_kernels.h"
#include "ops/linear.h"

namespace wxtrain::models {
namespace {

int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

std::string extent_text(const Extent3& e) {
  return "(" + std::to_string(e[0]) + ", " + std::to_string(e[1]) + ", " + std::to_string(e[2]) + ")";
}

// What the options cannot say alone (pangu_options.cpp checks them): whether the upper-air block
// fits this data's channels.
void check_upper_air_fits(const PanguOptions& c, const ModelShape& s) {
  const int64_t upper = c.upper_variables * c.levels;
  const int64_t state = s.state_channels > 0 ? s.state_channels : s.in_channels;
  const std::string keys = "model.upper_variables x model.levels = " + std::to_string(c.upper_variables) + " x " +
                           std::to_string(c.levels) + " = " + std::to_string(upper);
  if (upper > state)
    throw ConfigError(keys + " upper-air channels, but a state has only " + std::to_string(state) +
                      " prognostic channels: list the upper-air sources first, variable-major (each variable at "
                      "every level), or lower the two keys");
  if (upper > s.out_channels)
    throw ConfigError(keys + " upper-air channels, but the model predicts only " + std::to_string(s.out_channels));
  if (s.in_channels - upper < 1)
    throw ConfigError(keys + " takes every input channel; pangu needs at least one surface-like input (a surface "
                      "variable, an older state with data.history >= 2, a forcing or a static field)");
}

}  // namespace

Extent3 pangu_stage_window(const PanguOptions& o, const Extent3& grid) {
  if (!o.fit_window) return {o.window[0], o.window[1], o.window[2]};
  return {std::min(o.window[0], grid[0]), std::min(o.window[1], grid[1]), std::min(o.window[2], grid[2])};
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Each of the bias's `rows` rows is shared by `batch` rows of the scores (row r of sample i at
// (i * rows + r) * n). A task takes a range of bias rows and walks the samples outermost, so that
// it streams through contiguous memory (bias row outermost, striding across the samples, took
// half again as long); its bias rows' gradients are its own, so tasks never write the same one.
class ScaledBiasedSoftmax : public torch::autograd::Function<ScaledBiasedSoftmax> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& scores, const torch::Tensor& bias,
                               double scale) {
    const torch::Tensor s = scores.contiguous(), b = bias.contiguous();
    torch::Tensor y = torch::empty_like(s, at::MemoryFormat::Contiguous);
    const int64_t n = s.size(-1), rows = b.numel() / n, batch = s.numel() / b.numel();
    const auto f = static_cast<float>(scale);
    const bool bf16 = s.scalar_type() == torch::kBFloat16;
    at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch(n);
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t r = begin; r < end; ++r) {
          const int64_t at = (i * rows + r) * n;
          if (bf16) {
            ops::kernels::scaled_biased_softmax_bf16(ops::bf16_data(s) + at, ops::bf16_data(b) + r * n, f,
                                                     ops::bf16_data(y) + at, scratch.data(), n);
          } else {
            ops::kernels::scaled_biased_softmax(s.data_ptr<float>() + at, b.data_ptr<float>() + r * n, f,
                                                y.data_ptr<float>() + at, n);
          }
        }
    });
    ctx->save_for_backward({y});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["bias_sizes"] = b.sizes().vec();
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    if (!grad_outputs[0].defined()) return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
    const torch::Tensor y = ctx->get_saved_variables()[0];
    const torch::Tensor dy = grad_outputs[0].to(y.scalar_type()).contiguous();
    const std::vector<int64_t> bias_sizes = ctx->saved_data["bias_sizes"].toIntVector();
    const auto f = static_cast<float>(ctx->saved_data["scale"].toDouble());
    const int64_t n = y.size(-1), rows = c10::multiply_integers(bias_sizes) / n, batch = y.numel() / (rows * n);
    torch::Tensor dscores = torch::empty_like(y, at::MemoryFormat::Contiguous);
    // fp32 sums over the batch.
    torch::Tensor dbias = torch::zeros({rows, n}, y.options().dtype(torch::kFloat));
    const bool bf16 = y.scalar_type() == torch::kBFloat16;
    at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch(n);
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t r = begin; r < end; ++r) {
          const int64_t at = (i * rows + r) * n;
          float* dbias_row = dbias.data_ptr<float>() + r * n;
          if (bf16) {
            ops::kernels::scaled_biased_softmax_backward_bf16(ops::bf16_data(y) + at, ops::bf16_data(dy) + at, f,
                                                              ops::bf16_data(dscores) + at, dbias_row,
                                                              scratch.data(), n);
          } else {
            ops::kernels::scaled_biased_softmax_backward(y.data_ptr<float>() + at, dy.data_ptr<float>() + at, f,
                                                         dscores.data_ptr<float>() + at, dbias_row, n);
          }
        }
    });
    torch::Tensor dbias_out;
    if (ctx->needs_input_grad(1)) dbias_out = dbias.view(bias_sizes).to(y.scalar_type());
    return {dscores, dbias_out, torch::Tensor()};
  }
};

}  // namespace

bool scaled_biased_softmax_applies(const torch::Tensor& scores, const torch::Tensor& bias) {
  const auto t = scores.scalar_type();
  return ops::cpu_fusion_enabled(ops::Fusion::kScaledBiasedSoftmax) && scores.device().is_cpu() && bias.device().is_cpu() &&
         (t == torch::kFloat || t == torch::kBFloat16) && bias.scalar_type() == t && scores.dim() >= 2 &&
         bias.dim() == scores.dim() && bias.size(0) == 1 && bias.sizes().slice(1) == scores.sizes().slice(1) &&
         scores.numel() > 0;
}

torch::Tensor scaled_biased_softmax(const torch::Tensor& scores, const torch::Tensor& bias, double scale) {
  TORCH_CHECK(scaled_biased_softmax_applies(scores, bias), "scaled_biased_softmax: expected fp32 or bf16 CPU scores "
              "[B, .., N] and a bias [1, .., N] of their dtype, with the CPU fusions on; got ", scores.sizes(), " ",
              scores.scalar_type(), " and ", bias.sizes(), " ", bias.scalar_type());
  return ScaledBiasedSoftmax::apply(scores, bias, scale);
}

torch::Tensor window_attention_math(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& additive) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  if (ops::cpu_fusion_enabled(ops::Fusion::kScaledBiasedSoftmax)) {
    // Under autocast the scores come out bf16, the bias was cast to q's dtype: both match.
    torch::Tensor scores = ops::scaled_matmul(q, k.transpose(-2, -1));
    if (scaled_biased_softmax_applies(scores, additive))
      return ops::scaled_matmul(scaled_biased_softmax(scores, additive, scale), v);
  }
  // ATen's math path; the attn x v matmul takes the fp32 softmax's bf16 copy. It computes what
  // at::_scaled_dot_product_attention_math computes (whose _safe_softmax zeroes rows that are all
  // -inf: none here, a token always sees its own label's tokens).
  const double s = std::sqrt(scale);
  torch::Tensor scores = torch::matmul(q * s, k.transpose(-2, -1) * s);
  scores.add_(additive);  // matmul's backward needs its operands, not its output
  torch::Tensor attn = torch::softmax(ops::cuda_autocast_fp32(scores), -1);
  return torch::matmul(attn.scalar_type() == v.scalar_type() ? attn : attn.to(v.scalar_type()), v);
}

torch::Tensor pad_volume(const torch::Tensor& x, const Extent3& multiple, bool centered) {
  TORCH_CHECK(x.dim() == 5, "pad_volume: expected [B, Z, H, W, C], got ", x.sizes());
  const int64_t pz = round_up(x.size(1), multiple[0]) - x.size(1);
  const int64_t ph = round_up(x.size(2), multiple[1]) - x.size(2);
  const int64_t pw = round_up(x.size(3), multiple[2]) - x.size(3);
  if (pz == 0 && ph == 0 && pw == 0) return x;
  auto before = [centered](int64_t pad) { return centered ? pad / 2 : 0; };
  // From the last dim: C, W, H, Z.
  return torch::constant_pad_nd(x, {0, 0, before(pw), pw - before(pw), before(ph), ph - before(ph), before(pz),
                                    pz - before(pz)});
}

torch::Tensor crop_volume(const torch::Tensor& x, const Extent3& extent, bool centered) {
  if (x.size(1) == extent[0] && x.size(2) == extent[1] && x.size(3) == extent[2]) return x;
  auto from = [&](int64_t d) { return centered ? (x.size(d) - extent[static_cast<size_t>(d - 1)]) / 2 : 0; };
  return x.narrow(1, from(1), extent[0]).narrow(2, from(2), extent[1]).narrow(3, from(3), extent[2]);
}

torch::Tensor window_partition(const torch::Tensor& x, const Extent3& window) {
  const int64_t B = x.size(0), Z = x.size(1), H = x.size(2), W = x.size(3), C = x.size(4);
  const auto [wz, wh, ww] = window;
  TORCH_CHECK(Z % wz == 0 && H % wh == 0 && W % ww == 0, "window_partition: ", x.sizes(), " is not whole windows of ",
              extent_text(window));
  const int64_t nz = Z / wz, nh = H / wh, nw = W / ww;
  // [B, nz, wz, nh, wh, nw, ww, C] -> [B, nw, nz, nh, wz, wh, ww, C]
  return x.reshape({B, nz, wz, nh, wh, nw, ww, C})
      .permute({0, 5, 1, 3, 2, 4, 6, 7})
      .reshape({B * nw, nz * nh, wz * wh * ww, C});
}

torch::Tensor window_reverse(const torch::Tensor& windows, const Extent3& window, int64_t batch, const Extent3& extent) {
  const auto [wz, wh, ww] = window;
  const int64_t nz = extent[0] / wz, nh = extent[1] / wh, nw = extent[2] / ww, C = windows.size(-1);
  return windows.reshape({batch, nw, nz, nh, wz, wh, ww, C})
      .permute({0, 2, 4, 3, 5, 1, 6, 7})
      .reshape({batch, extent[0], extent[1], extent[2], C});
}

torch::Tensor earth_position_index(const Extent3& window) {
  const auto [wz, wh, ww] = window;
  const int64_t N = wz * wh * ww;
  // Token n of a window sits at (n / (wh ww), (n / ww) % wh, n % ww).
  torch::Tensor n = torch::arange(N, torch::kLong);
  torch::Tensor z = n.div(wh * ww, "floor"), h = n.div(ww, "floor").remainder(wh), w = n.remainder(ww);
  auto q = [](const torch::Tensor& t) { return t.view({-1, 1}); };  // query along rows
  auto k = [](const torch::Tensor& t) { return t.view({1, -1}); };  // key along columns
  torch::Tensor level = q(z) + k(z) * wz;            // 0 .. wz^2 - 1
  torch::Tensor lat = q(h) + k(h) * wh;              // 0 .. wh^2 - 1
  torch::Tensor lon = q(w) - k(w) + (ww - 1);        // 0 .. 2 ww - 2
  return ((level * (wh * wh) + lat) * (2 * ww - 1) + lon).reshape({N * N});
}

torch::Tensor shifted_window_mask(const Extent3& extent, const Extent3& window, const Extent3& shift) {
  const auto [wz, wh, ww] = window;
  const int64_t nz = extent[0] / wz, nh = extent[1] / wh, N = wz * wh * ww;
  // A token's side of each wrapped edge, in the rolled volume: the last `shift` positions of a
  // dimension came around from its start. Labels 0..3 = (level side, latitude side).
  torch::Tensor n = torch::arange(N, torch::kLong);
  torch::Tensor oz = n.div(wh * ww, "floor"), oh = n.div(ww, "floor").remainder(wh);
  torch::Tensor iz = torch::arange(nz, torch::kLong).view({nz, 1, 1}), ih = torch::arange(nh, torch::kLong).view({1, nh, 1});
  torch::Tensor rz = iz * wz + oz.view({1, 1, N}), rh = ih * wh + oh.view({1, 1, N});
  torch::Tensor label = torch::zeros({nz, nh, N}, torch::kLong);
  if (shift[0] > 0) label = label + (rz >= extent[0] - shift[0]).to(torch::kLong) * 2;
  if (shift[1] > 0) label = label + (rh >= extent[1] - shift[1]).to(torch::kLong);
  label = label.reshape({nz * nh, N});
  torch::Tensor apart = label.unsqueeze(2) != label.unsqueeze(1);  // [types, N, N]
  return torch::zeros({nz * nh, N, N}).masked_fill(apart, -std::numeric_limits<float>::infinity());
}

torch::Tensor all_edges_shift_mask(const Extent3& extent, const Extent3& window, const Extent3& shift) {
  const auto [Z, H, W] = extent;
  const auto [wz, wh, ww] = window;
  // A token's side of each edge in the rolled volume. Levels and latitude: the last `shift`
  // positions came around from the start. Longitude: get_shift_window_mask labels a volume
  // widened by the shift, whose edge falls at W + shift - window in the rolled one.
  auto side = [](int64_t size, int64_t shift, int64_t edge) {
    torch::Tensor at = torch::arange(size, torch::kLong);
    return shift > 0 ? (at >= edge).to(torch::kLong) : torch::zeros({size}, torch::kLong);
  };
  torch::Tensor label = side(Z, shift[0], Z - shift[0]).view({Z, 1, 1}) * 4 +
                        side(H, shift[1], H - shift[1]).view({1, H, 1}) * 2 +
                        side(W, shift[2], W + shift[2] - ww).view({1, 1, W});
  // [Z, H, W] -> [nW, nZ * nH, N], window_partition's order.
  label = label.reshape({Z / wz, wz, H / wh, wh, W / ww, ww})
              .permute({4, 0, 2, 1, 3, 5})
              .reshape({W / ww, (Z / wz) * (H / wh), wz * wh * ww});
  torch::Tensor apart = label.unsqueeze(-1) != label.unsqueeze(-2);  // [nW, types, N, N]
  return torch::zeros(apart.sizes()).masked_fill(apart, -100.0);
}

EarthAttention3DImpl::EarthAttention3DImpl(int64_t dim, int64_t heads_, const Extent3& window_, int64_t types)
    : heads(heads_), window(window_) {
  TORCH_CHECK(dim % heads == 0, "EarthAttention3D: heads (", heads, ") must divide dim (", dim, ")");
  qkv = register_module("qkv", torch::nn::Linear(dim, 3 * dim));
  proj = register_module("proj", torch::nn::Linear(dim, dim));
  const auto [wz, wh, ww] = window;
  // The pseudocode's initialisation: (truncated) normal, std 0.02; at 0.02 the truncation at +-2
  // never bites.
  earth_bias = register_parameter("earth_bias", torch::randn({wz * wz * wh * wh * (2 * ww - 1), types, heads}) * 0.02);
  position_index = register_buffer("position_index", earth_position_index(window));
}

torch::Tensor EarthAttention3DImpl::bias() const {
  const int64_t N = window[0] * window[1] * window[2], types = earth_bias.size(1);
  return earth_bias.index_select(0, position_index).view({N, N, types, heads}).permute({2, 3, 0, 1});
}

torch::Tensor EarthAttention3DImpl::forward(const torch::Tensor& windows, const torch::Tensor& mask) {
  const int64_t B = windows.size(0), T = windows.size(1), N = windows.size(2), C = windows.size(3), hd = C / heads;
  TORCH_CHECK(T == earth_bias.size(1) && N == window[0] * window[1] * window[2], "EarthAttention3D: expected [B, ",
              earth_bias.size(1), ", ", window[0] * window[1] * window[2], ", C] windows, got ", windows.sizes());
  // [B, T, N, 3C] -> 3 x [B, T, heads, N, hd], views of the projection. The window types sit
  // beside the heads, so that one [1, T, heads, N, N] bias broadcasts over every batch entry and
  // longitude window without copies.
  const std::vector<torch::Tensor> qkv_split =
      ops::apply_linear(qkv, windows).view({B, T, N, 3, heads, hd}).permute({3, 0, 1, 4, 2, 5}).unbind(0);
  const torch::Tensor &q = qkv_split[0], &k = qkv_split[1], &v = qkv_split[2];
  torch::Tensor additive = bias();  // [T, heads, N, N]
  // The batch and window types as the attention sees them: with a mask per longitude window
  // (all_edges_shift_mask), the longitude windows join the types, each with its bias + mask.
  int64_t Ba = B, Ta = T;
  if (mask.defined() && mask.dim() == 4) {
    const int64_t lon_windows = mask.size(0);
    TORCH_CHECK(mask.size(1) == T && B % lon_windows == 0, "EarthAttention3D: mask ", mask.sizes(),
                " does not match the windows ", windows.sizes());
    additive = (additive.unsqueeze(0) + mask.unsqueeze(2).to(additive.scalar_type())).reshape({lon_windows * T, heads, N, N});
    Ba = B / lon_windows;
    Ta = lon_windows * T;
  } else if (mask.defined()) {
    additive = additive + mask.unsqueeze(1).to(additive.scalar_type());
  }
  additive = additive.unsqueeze(0).to(q.scalar_type());
  // Views: the batch's longitude windows sit next to the types in the projection's layout.
  auto regroup = [&](const torch::Tensor& t) { return Ta == T ? t : t.view({Ba, Ta, heads, N, hd}); };
  // Scale 1/sqrt(hd), the pseudocode's. Only the windows' [N, N] scores exist, never the volume's.
  // On the CPU, ATen picks its flash kernel when the bias needs no gradient (no grad mode: a
  // checkpointed block's first forward) and the math path when it does (the replay), which round
  // differently; ours always (window_attention_math), so that a checkpointed step equals a plain
  // one, and so that a GPU-standing step takes the softmax in fp32. CUDA's memory-efficient kernel
  // takes the bias and its gradient in both modes; autocast runs it in bf16 and it never
  // materialises the scores.
  torch::Tensor out;
  if (q.is_cuda()) {
    auto heads_of_all_types = [&](const torch::Tensor& t) { return regroup(t).reshape({Ba, Ta * heads, N, hd}); };
    out = at::scaled_dot_product_attention(heads_of_all_types(q), heads_of_all_types(k), heads_of_all_types(v),
                                           additive.reshape({1, Ta * heads, N, N}));
  } else {
    out = window_attention_math(regroup(q), regroup(k), regroup(v), additive);  // [Ba, Ta, heads, N, hd]
  }
  out = out.view({B, T, heads, N, hd}).permute({0, 1, 3, 2, 4}).reshape({B, T, N, C});
  return ops::apply_linear(proj, out);
}

EarthSpecificBlockImpl::EarthSpecificBlockImpl(const EarthBlockOptions& options_) : options(options_) {
  const int64_t D = options.dim();
  const Extent3 grid = options.grid(), window = options.window();
  for (size_t d = 0; d < 3; ++d) {
    TORCH_CHECK(window[d] >= 1 && grid[d] >= 1, "EarthSpecificBlock: window ", extent_text(window), " on the grid ",
                extent_text(grid));
    padded[d] = round_up(grid[d], window[d]);
    if (!options.shifted()) continue;
    // Half a window, where there is more than one window to shift across; or as configured.
    shift[d] = options.shift_size() ? (*options.shift_size())[d] : (padded[d] > window[d] ? window[d] / 2 : 0);
    TORCH_CHECK(shift[d] >= 0 && shift[d] < window[d], "EarthSpecificBlock: shift ", extent_text(shift),
                " must be less than the window ", extent_text(window));
  }
  const int64_t types = (padded[0] / window[0]) * (padded[1] / window[1]);
  attn = register_module("attn", EarthAttention3D(D, options.heads(), window, types));
  norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
  const auto hidden = static_cast<int64_t>(static_cast<double>(D) * options.mlp_ratio());
  TORCH_CHECK(hidden > 0, "EarthSpecificBlock: mlp_ratio ", options.mlp_ratio(), " leaves no hidden units");
  fc1 = register_module("fc1", torch::nn::Linear(D, hidden));
  fc2 = register_module("fc2", torch::nn::Linear(hidden, D));
  norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
  // Only a roll across a level or latitude edge needs a mask: longitude is periodic. PhysicsNeMo's
  // masks every roll, the longitude wrap too.
  if (options.mask_all_edges() && (shift[0] > 0 || shift[1] > 0 || shift[2] > 0))
    shift_mask = register_buffer("shift_mask", all_edges_shift_mask(padded, window, shift));
  else if (!options.mask_all_edges() && (shift[0] > 0 || shift[1] > 0))
    shift_mask = register_buffer("shift_mask", shifted_window_mask(padded, window, shift));
}

torch::Tensor EarthSpecificBlockImpl::attention(const torch::Tensor& x) {
  const Extent3 grid = options.grid(), window = options.window();
  TORCH_CHECK(x.dim() == 5 && x.size(1) == grid[0] && x.size(2) == grid[1] && x.size(3) == grid[2],
              "EarthSpecificBlock: expected [B, ", grid[0], ", ", grid[1], ", ", grid[2], ", C], got ", x.sizes());
  const bool rolled = shift[0] || shift[1] || shift[2];
  torch::Tensor v = pad_volume(x, window, options.centered());
  if (rolled) v = torch::roll(v, {-shift[0], -shift[1], -shift[2]}, {1, 2, 3});
  torch::Tensor out = attn->forward(window_partition(v, window), shift_mask);
  v = window_reverse(out, window, x.size(0), padded);
  if (rolled) v = torch::roll(v, {shift[0], shift[1], shift[2]}, {1, 2, 3});
  return crop_volume(v, grid, options.centered());
}

torch::Tensor EarthSpecificBlockImpl::forward(const torch::Tensor& x) {
  if (options.pre_norm()) {
    // PhysicsNeMo's order (model.block_norm = "pre"): the branches see the normalised stream.
    torch::Tensor y = x + attention(norm1(ops::cuda_autocast_fp32(x)));
    return y + ops::apply_linear(fc2, torch::gelu(ops::apply_linear(fc1, norm2(ops::cuda_autocast_fp32(y)))));
  }
  // Post-norm residuals, the pseudocode's: the branch's output is normalised, not its input.
  // The norms' inputs as CUDA's autocast hands them over (fp32, in a GPU-standing step): their fp32
  // outputs make the residual stream fp32 from the first sum on.
  torch::Tensor y = x + norm1(ops::cuda_autocast_fp32(attention(x)));
  return y + norm2(ops::cuda_autocast_fp32(ops::apply_linear(fc2, torch::gelu(ops::apply_linear(fc1, y)))));
}

PanguEmbedImpl::PanguEmbedImpl(int64_t upper_variables, int64_t surface_channels, int64_t dim, int64_t level_patch_,
                               int64_t patch_, bool centered_)
    : level_patch(level_patch_), patch(patch_), centered(centered_) {
  if (upper_variables > 0)
    upper = register_module("upper", torch::nn::Linear(upper_variables * level_patch * patch * patch, dim));
  surface = register_module("surface", torch::nn::Linear(surface_channels * patch * patch, dim));
}

torch::Tensor PanguEmbedImpl::forward(const torch::Tensor& upper_air, const torch::Tensor& surface_fields) {
  const int64_t B = surface_fields.size(0), p = patch, pz = level_patch;
  const int64_t h = ceil_div(surface_fields.size(2), p), w = ceil_div(surface_fields.size(3), p);
  auto pad_grid = [&](const torch::Tensor& t, int64_t pad_levels) {
    const int64_t pad_lat = h * p - t.size(-2), pad_lon = w * p - t.size(-1);
    if (pad_levels == 0 && pad_lat == 0 && pad_lon == 0) return t;
    auto before = [this](int64_t pad) { return centered ? pad / 2 : 0; };
    std::vector<int64_t> pads{before(pad_lon), pad_lon - before(pad_lon), before(pad_lat), pad_lat - before(pad_lat)};
    if (t.dim() == 5) pads.insert(pads.end(), {before(pad_levels), pad_levels - before(pad_levels)});
    return torch::constant_pad_nd(t, pads);
  };
  const int64_t Cs = surface_fields.size(1);
  // [B, Cs, h p, w p] -> [B, 1, h, w, Cs p p]: one token per patch on the surface level.
  torch::Tensor s = pad_grid(surface_fields, 0)
                        .reshape({B, Cs, h, p, w, p})
                        .permute({0, 2, 4, 1, 3, 5})
                        .reshape({B, 1, h, w, Cs * p * p});
  torch::Tensor tokens = ops::apply_linear(surface, s);
  if (!upper_air.defined()) return tokens;
  const int64_t V = upper_air.size(1), Z = upper_air.size(2), zu = ceil_div(Z, pz);
  // [B, V, zu pz, h p, w p] -> [B, zu, h, w, V pz p p]
  torch::Tensor u = pad_grid(upper_air, zu * pz - Z)
                        .reshape({B, V, zu, pz, h, p, w, p})
                        .permute({0, 2, 4, 6, 1, 3, 5, 7})
                        .reshape({B, zu, h, w, V * pz * p * p});
  return torch::cat({tokens, ops::apply_linear(upper, u)}, 1);
}

PanguDownSampleImpl::PanguDownSampleImpl(int64_t dim) {
  norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({4 * dim})));
  reduce = register_module("reduce", torch::nn::Linear(torch::nn::LinearOptions(4 * dim, 2 * dim).bias(false)));
}

torch::Tensor PanguDownSampleImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), Z = x.size(1), C = x.size(4);
  const int64_t h = ceil_div(x.size(2), 2), w = ceil_div(x.size(3), 2);
  // [B, Z, 2h, 2w, C] -> [B, Z, h, w, (2, 2, C)]: each 2x2 cell's four tokens side by side.
  torch::Tensor merged = pad_volume(x, {1, 2, 2})
                             .reshape({B, Z, h, 2, w, 2, C})
                             .permute({0, 1, 2, 4, 3, 5, 6})
                             .reshape({B, Z, h, w, 4 * C});
  return ops::apply_linear(reduce, norm(ops::cuda_autocast_fp32(merged)));
}

PanguUpSampleImpl::PanguUpSampleImpl(int64_t in_dim, int64_t out_dim) {
  expand = register_module("expand", torch::nn::Linear(torch::nn::LinearOptions(in_dim, 4 * out_dim).bias(false)));
  norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({out_dim})));
  mix = register_module("mix", torch::nn::Linear(torch::nn::LinearOptions(out_dim, out_dim).bias(false)));
}

torch::Tensor PanguUpSampleImpl::forward(const torch::Tensor& x, int64_t lat, int64_t lon) {
  const int64_t B = x.size(0), Z = x.size(1), h = x.size(2), w = x.size(3);
  torch::Tensor y = ops::apply_linear(expand, x);
  const int64_t C = y.size(4) / 4;
  // [B, Z, h, w, (2, 2, C)] -> [B, Z, 2h, 2w, C], cropped to the fine grid.
  y = y.view({B, Z, h, w, 2, 2, C}).permute({0, 1, 2, 4, 3, 5, 6}).reshape({B, Z, 2 * h, 2 * w, C});
  y = crop_volume(y, {Z, lat, lon});
  return ops::apply_linear(mix, norm(ops::cuda_autocast_fp32(y)));
}

PanguHeadImpl::PanguHeadImpl(int64_t dim, int64_t upper_variables_, int64_t levels_, int64_t surface_channels_,
                             int64_t level_patch_, int64_t patch_, int64_t lat_, int64_t lon_, bool centered_)
    : upper_variables(upper_variables_),
      levels(levels_),
      surface_channels(surface_channels_),
      level_patch(level_patch_),
      patch(patch_),
      lat(lat_),
      lon(lon_),
      centered(centered_) {
  const int64_t pp = patch * patch;
  // The transposed convolutions' parameters: a weight per (channel, patch position) and one bias
  // per channel, added after the patches are laid out.
  if (upper_variables > 0) {
    upper = register_module(
        "upper", torch::nn::Linear(torch::nn::LinearOptions(dim, upper_variables * level_patch * pp).bias(false)));
    upper_bias = register_parameter("upper_bias", torch::zeros({upper_variables}));
  }
  if (surface_channels > 0) {
    surface = register_module("surface", torch::nn::Linear(torch::nn::LinearOptions(dim, surface_channels * pp).bias(false)));
    surface_bias = register_parameter("surface_bias", torch::zeros({surface_channels}));
  }
}

torch::Tensor PanguHeadImpl::forward(const torch::Tensor& x, const torch::Tensor& skip) {
  torch::Tensor t = torch::cat({skip, x}, -1);  // the pseudocode's order: skip first
  const int64_t B = t.size(0), h = t.size(2), w = t.size(3), p = patch, pz = level_patch;
  // Where the crop starts: the padding the embedding put before the grid.
  auto from = [this](int64_t padded, int64_t size) { return centered ? (padded - size) / 2 : 0; };
  const int64_t lat0 = from(h * p, lat), lon0 = from(w * p, lon);
  std::vector<torch::Tensor> parts;
  if (upper_variables > 0) {
    const int64_t V = upper_variables, zu = t.size(1) - 1;
    // [B, zu, h, w, (V, pz, p, p)] -> [B, V, zu pz, h p, w p], cropped to [B, V, Z, lat, lon].
    torch::Tensor u = ops::apply_linear(upper, t.slice(1, 1))
                          .view({B, zu, h, w, V, pz, p, p})
                          .permute({0, 4, 1, 5, 2, 6, 3, 7})
                          .reshape({B, V, zu * pz, h * p, w * p});
    u = u.narrow(2, from(zu * pz, levels), levels).narrow(3, lat0, lat).narrow(4, lon0, lon) +
        upper_bias.view({1, V, 1, 1, 1});
    parts.push_back(u.reshape({B, V * levels, lat, lon}));
  }
  if (surface_channels > 0) {
    const int64_t C = surface_channels;
    torch::Tensor s = ops::apply_linear(surface, t.select(1, 0))
                          .view({B, h, w, C, p, p})
                          .permute({0, 3, 1, 4, 2, 5})
                          .reshape({B, C, h * p, w * p});
    parts.push_back(s.narrow(2, lat0, lat).narrow(3, lon0, lon) + surface_bias.view({1, C, 1, 1}));
  }
  return parts.size() == 1 ? parts[0].contiguous() : torch::cat(parts, 1);
}

PanguImpl::PanguImpl(const PanguOptions& options, const ModelShape& shape) : WeatherModelImpl(shape) {
  if (shape.point_set)
    throw ConfigError("model.name = \"pangu\" needs a latitude x longitude rectangle (windows of rows and columns), but the data is a "
                      "point-set grid of " + std::to_string(shape.lon) +
                      " cells (reduced Gaussian or a list of cells); use graphcast or gnn, or data on a regular grid");
  check_upper_air_fits(options, shape);
  options_ = options;
  upper_variables_ = options.upper_variables;
  levels_ = options.levels;
  // The newest state's upper air: states come oldest first (core/options.h ChannelLayout).
  upper_offset_ = shape.state_channels > 0 ? (shape.history - 1) * shape.state_channels : 0;
  const int64_t p = options.patch_size, pz = options.level_patch, D = options.embed_dim;
  const int64_t h = ceil_div(shape.lat, p), w = ceil_div(shape.lon, p);
  const int64_t levels = 1 + (upper_variables_ > 0 ? ceil_div(levels_, pz) : 0);
  tokens_ = {levels, h, w};
  coarse_ = {levels, ceil_div(h, 2), ceil_div(w, 2)};
  for (size_t i = 0; i < 4; ++i) depths_[i] = options.stage_depths[i];

  const bool centered = options.padding == "centered";
  embed_ = register_block("embed", PanguEmbed(upper_variables_, surface_inputs(), D, pz, p, centered));
  std::optional<Extent3> shift;
  if (!options.window_shift.empty()) shift = Extent3{options.window_shift[0], options.window_shift[1], options.window_shift[2]};
  auto stage = [&](int stage_number, int64_t dim, const Extent3& grid) {
    const Extent3 window = pangu_stage_window(options, grid);
    for (size_t d = 0; d < 3 && shift; ++d)
      if ((*shift)[d] >= window[d])
        throw ConfigError("model.window_shift " + extent_text(*shift) + " must be less than stage " +
                          std::to_string(stage_number) + "'s window " + extent_text(window) +
                          " (model.window cut to the stage's token grid " + extent_text(grid) +
                          "; model.fit_window = false keeps it whole)");
    for (int64_t i = 0; i < depths_[stage_number - 1]; ++i) {
      blocks_.push_back(register_block(
          "layer" + std::to_string(stage_number) + "_block" + std::to_string(i),
          EarthSpecificBlock(EarthBlockOptions(dim, options.stage_heads[stage_number - 1], grid, window)
                                 .shifted(i % 2 == 1)
                                 .shift_size(shift)
                                 .mlp_ratio(options.mlp_ratio)
                                 .pre_norm(options.block_norm == "pre")
                                 .centered(centered)
                                 .mask_all_edges(options.shift_mask == "all_edges"))));
    }
  };
  stage(1, D, tokens_);
  down_ = register_block("downsample", PanguDownSample(D));
  stage(2, 2 * D, coarse_);
  stage(3, 2 * D, coarse_);
  up_ = register_block("upsample", PanguUpSample(2 * D, D));
  stage(4, D, tokens_);
  head_ = register_block("head", PanguHead(2 * D, upper_variables_, levels_, surface_outputs(), pz, p, shape.lat,
                                           shape.lon, centered));
}

std::vector<ChannelAxis> PanguImpl::channel_axes() const {
  // The surface-like channels only: the newest state's upper-air block (inputs) and the upper-air
  // outputs are the volume's, whose weights run over variables, and load as they are.
  const int64_t pp = head_->patch * head_->patch, upper = upper_channels();
  std::vector<ChannelAxis> axes{{"embed.surface.weight", 1, true, pp, true, upper_offset_, upper}};
  if (surface_outputs() > 0) {
    axes.push_back({"head.surface.weight", 0, false, pp, true, 0, upper});
    axes.push_back({"head.surface_bias", 0, false, 1, true, 0, upper});
  }
  return axes;
}

torch::Tensor PanguImpl::fit_to_grid(const std::string& name, const torch::Tensor& trained,
                                     const GridPlacement& placement, std::string* how) const {
  // "layer2_block3.attn.earth_bias", "layer1_block1.shift_mask": the block, and which tensor.
  const size_t dot = name.find('.');
  if (dot == std::string::npos || name.rfind("layer", 0) != 0) return {};
  std::shared_ptr<EarthSpecificBlockImpl> block;
  for (const auto& child : named_children())
    if (child.key() == name.substr(0, dot)) block = std::dynamic_pointer_cast<EarthSpecificBlockImpl>(child.value());
  if (!block) return {};
  const std::string tensor = name.substr(dot + 1);
  if (tensor == "shift_mask" && block->shift_mask.defined()) {
    if (how) *how = "the shifted windows' mask, rebuilt for this grid";
    return block->shift_mask.clone();
  }
  if (tensor == "shift_mask" && placement.known()) {
    if (how) *how = "no mask on this grid (its shift crosses no level or latitude edge)";
    return {};
  }
  if (tensor != "attn.earth_bias" || !placement.known() ||
      static_cast<int64_t>(placement.rows.size()) != shape().lat)
    return {};
  // The trained model's token rows at this block's stage (stages 2 and 3 merge 2 x 2 tokens), and
  // its window there: the tables' rows must agree, only their latitude windows differ.
  const bool coarse = name[5] == '2' || name[5] == '3';
  const int64_t f = coarse ? 2 : 1, p = options_.patch_size;
  const int64_t fine_lat = ceil_div(placement.trained_lat, p), fine_lon = ceil_div(placement.trained_lon, p);
  const Extent3 trained_grid{tokens_[0], coarse ? ceil_div(fine_lat, 2) : fine_lat,
                             coarse ? ceil_div(fine_lon, 2) : fine_lon};
  const Extent3 window = block->options.window(), grid = block->options.grid();
  if (pangu_stage_window(options_, trained_grid) != window) return {};
  const int64_t wh = window[1], level_windows = block->padded[0] / window[0];
  const int64_t trained_padded = round_up(trained_grid[1], wh), trained_windows = trained_padded / wh;
  const int64_t windows = block->padded[1] / wh;
  const torch::Tensor& own = block->attn->earth_bias;
  if (trained.dim() != 3 || trained.size(0) != own.size(0) || trained.size(2) != own.size(2) ||
      trained.size(1) != level_windows * trained_windows)
    return {};
  // Padding before the grid (model.padding = "centered"): the embedding's, in grid rows, and the
  // windows', in token rows; each window's centre row, on this grid, then on the trained one.
  const bool centered = options_.padding == "centered";
  auto before = [centered](int64_t pad) { return centered ? pad / 2 : 0; };
  const int64_t lat = shape().lat;
  const int64_t embed_before = before(ceil_div(lat, p) * p - lat);
  const int64_t trained_embed_before = before(fine_lat * p - placement.trained_lat);
  const int64_t window_before = before(block->padded[1] - grid[1]);
  const int64_t trained_window_before = before(trained_padded - trained_grid[1]);
  std::vector<int64_t> source(static_cast<size_t>(windows));
  std::string sources;
  for (int64_t k = 0; k < windows; ++k) {
    const int64_t token = std::clamp<int64_t>(k * wh + wh / 2 - window_before, 0, grid[1] - 1);
    const int64_t row = std::clamp<int64_t>(token * f * p + f * p / 2 - embed_before, 0, lat - 1);
    const int64_t trained_token = (placement.rows[static_cast<size_t>(row)] + trained_embed_before) / (f * p);
    source[static_cast<size_t>(k)] = std::min((trained_token + trained_window_before) / wh, trained_windows - 1);
    sources += (k ? ", " : "") + std::to_string(source[static_cast<size_t>(k)]);
  }
  torch::Tensor fitted = torch::empty({own.size(0), level_windows * windows, own.size(2)}, trained.options());
  for (int64_t z = 0; z < level_windows; ++z)
    for (int64_t k = 0; k < windows; ++k)
      fitted.select(1, z * windows + k).copy_(trained.select(1, z * trained_windows + source[static_cast<size_t>(k)]));
  if (how)
    *how = "Earth-specific bias: " + std::to_string(windows) + " latitude windows from the trained grid's " +
           std::to_string(trained_windows) + " (windows " + sources + ")";
  return fitted;
}

GridFit PanguImpl::fit_checkpoint_to_grid(std::map<std::string, torch::Tensor>& weights, const GridPlacement& where,
                                          const ModelShape& from) const {
  (void)from;
  GridFit fit;
  std::map<std::string, torch::Tensor> own;
  for (const auto& p : named_parameters()) own[p.key()] = p.value();
  for (const auto& b : named_buffers()) own[b.key()] = b.value();
  // The model's tensors first, then those it lacks: the report's order.
  for (auto& [name, stored] : weights) {
    auto it = own.find(name);
    if (it == own.end() || stored.sizes() == it->second.sizes()) continue;
    std::string how;
    torch::Tensor fitted = fit_to_grid(name, stored, where, &how);
    if (!fitted.defined() || fitted.sizes() != it->second.sizes()) continue;  // the loader names it
    stored = fitted;
    fit.fitted.insert(name);
    fit.regridded.push_back(name + ": " + how);
  }
  if (!where.known()) return fit;
  for (auto it = weights.begin(); it != weights.end();) {
    std::string how;
    if (own.count(it->first) || fit_to_grid(it->first, it->second, where, &how).defined() || how.empty()) {
      ++it;
      continue;
    }
    fit.regridded.push_back(it->first + ": " + how);  // needed on the trained grid, not on this one
    it = weights.erase(it);
  }
  return fit;
}

std::vector<torch::Tensor> PanguImpl::split_input(const torch::Tensor& x) const {
  const int64_t upper = upper_channels();
  if (upper == 0) return {torch::Tensor(), x};
  const int64_t B = x.size(0), lat = x.size(2), lon = x.size(3);
  torch::Tensor volume = x.narrow(1, upper_offset_, upper).reshape({B, upper_variables_, levels_, lat, lon});
  std::vector<torch::Tensor> rest;
  if (upper_offset_ > 0) rest.push_back(x.narrow(1, 0, upper_offset_));
  const int64_t after = x.size(1) - upper_offset_ - upper;
  if (after > 0) rest.push_back(x.narrow(1, upper_offset_ + upper, after));
  return {volume, rest.size() == 1 ? rest[0] : torch::cat(rest, 1)};
}

torch::Tensor PanguImpl::forward(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 4 && x.size(1) == shape().in_channels && x.size(2) == shape().lat &&
                  x.size(3) == shape().lon,
              "pangu: expected input [batch, ", shape().in_channels, ", ", shape().lat, ", ", shape().lon, "], got ",
              x.sizes());
  // The lambdas hold the blocks by shared_ptr (by value, see run_block) and call non-const forward.
  std::shared_ptr<PanguEmbedImpl> embed = embed_.ptr();
  const std::vector<torch::Tensor> parts = split_input(x);
  // Both halves are the block's inputs (not captures), so that a checkpointed embedding passes the
  // gradient on to each; {surface} alone without upper air.
  std::vector<torch::Tensor> embed_inputs{parts[1]};
  if (parts[0].defined()) embed_inputs.push_back(parts[0]);
  x = run_block(*embed,
                ops::BlockFn([embed](const std::vector<torch::Tensor>& in) {
                  return std::vector<torch::Tensor>{embed->forward(in.size() > 1 ? in[1] : torch::Tensor(), in[0])};
                }),
                embed_inputs)[0];
  size_t next = 0;
  auto run_stage = [&](int64_t depth) {
    for (int64_t i = 0; i < depth; ++i) {
      std::shared_ptr<EarthSpecificBlockImpl> block = blocks_[next++].ptr();
      x = run_block(*block, [block](const torch::Tensor& in) { return block->forward(in); }, x);
    }
  };
  run_stage(depths_[0]);
  const torch::Tensor skip = x;
  std::shared_ptr<PanguDownSampleImpl> down = down_.ptr();
  x = run_block(*down, [down](const torch::Tensor& in) { return down->forward(in); }, x);
  run_stage(depths_[1]);
  run_stage(depths_[2]);
  std::shared_ptr<PanguUpSampleImpl> up = up_.ptr();
  const int64_t h = tokens_[1], w = tokens_[2];
  x = run_block(*up, [up, h, w](const torch::Tensor& in) { return up->forward(in, h, w); }, x);
  run_stage(depths_[3]);
  std::shared_ptr<PanguHeadImpl> head = head_.ptr();
  return run_block(
      *head,
      ops::BlockFn([head](const std::vector<torch::Tensor>& in) { return std::vector<torch::Tensor>{head->forward(in[0], in[1])}; }),
      {x, skip})[0];
}

template <typename Move>
void PanguImpl::move_keeping_indices(const Move& move, const std::optional<torch::Device>& device, bool non_blocking) {
  // detach(): handles of their own, untouched by the set_data that Module::to does on the buffers.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> indices;
  for (const torch::Tensor& b : buffers())
    if (b.scalar_type() == torch::kLong)
      indices.emplace_back(b, b.detach().to(device.value_or(b.device()), non_blocking));
  move();
  for (auto& [buffer, moved] : indices) buffer.set_data(moved);
}

void PanguImpl::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  move_keeping_indices([&] { WeatherModelImpl::to(device, dtype, non_blocking); }, device, non_blocking);
}

void PanguImpl::to(torch::Dtype dtype, bool non_blocking) {
  move_keeping_indices([&] { WeatherModelImpl::to(dtype, non_blocking); }, std::nullopt, non_blocking);
}

void PanguImpl::to(torch::Device device, bool non_blocking) {
  move_keeping_indices([&] { WeatherModelImpl::to(device, non_blocking); }, device, non_blocking);
}

ModelEntry pangu_entry() {
  ModelEntry e = make_model_entry<PanguOptions, PanguImpl>(pangu_schema(), &pangu_parameter_count, &pangu_activation_memory,
                                                           {/*gemms=*/true, /*convolutions=*/true}, &pangu_buffer_bytes);
  e.references = {pangu_physicsnemo_reference()};
  return e;
}

}  // namespace wxtrain::models
