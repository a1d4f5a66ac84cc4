#include "models/fourcastnet/fourcastnet.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/autocast.h"
#include "core/error.h"
#include "ops/cpu_fusion.h"
#include "ops/cpu_gemm.h"
#include "ops/linear.h"

namespace wxtrain::models {
namespace {

// The reference's LayerNorm (partial(nn.LayerNorm, eps=1e-6)).
torch::nn::LayerNorm layer_norm(int64_t dim) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(1e-6));
}

// The complex Linear of one MLP stage as one real block matmul, on the modes' (re, im) pairs as
// view_as_real lays them out: row 2i + p of a block's weight takes part p of input i, column 2j + q
// gives part q of output j, so [re0, im0, re1, im1, ...] rows times it are the interleaved parts of
// (re + i im)(w_re + i w_im). The reference's four einsums become one GEMM per block that reads the
// spectrum in place. w: [2, nb, in, out] -> [nb, 2 in, 2 out].
torch::Tensor complex_block_weight(const torch::Tensor& w) {
  const torch::Tensor re = w[0], im = w[1];
  return torch::stack({torch::stack({re, im}, -1), torch::stack({-im, re}, -1)}, 2)
      .view({re.size(0), 2 * re.size(1), 2 * re.size(2)});
}

// A stage's bias [2, nb, out] as [nb, 1, 2 out], interleaved as the GEMM's output columns.
torch::Tensor complex_block_bias(const torch::Tensor& b) {
  return torch::stack({b[0], b[1]}, -1).view({b.size(1), 1, 2 * b.size(2)});
}

}  // namespace

torch::Tensor spectral_apply(const torch::Tensor& x, const std::function<torch::Tensor(const torch::Tensor&)>& fn) {
  TORCH_CHECK(x.dim() == 4, "spectral_apply: expected [batch, h, w, channels], got ", x.sizes());
  const int64_t h = x.size(1), w = x.size(2);
  AutocastState off = AutocastState::current();
  off.cpu_enabled = off.cuda_enabled = false;
  AutocastGuard fp32(off);
  torch::Tensor modes = torch::fft::rfft2(x.to(torch::kFloat), std::nullopt, {1, 2}, "ortho");
  torch::Tensor out = fn(modes);
  TORCH_CHECK(out.sizes() == modes.sizes(), "spectral_apply: the filter changed the modes' shape from ",
              modes.sizes(), " to ", out.sizes());
  // s = (h, w): an odd w cannot be recovered from w/2 + 1 modes alone.
  return torch::fft::irfft2(out, torch::IntArrayRef{h, w}, {1, 2}, "ortho").to(x.scalar_type());
}

torch::Tensor afno_mode_mask(int64_t h, int64_t wf, double fraction, bool reference, const torch::TensorOptions& options) {
  const torch::TensorOptions index = options.dtype(torch::kLong);
  torch::Tensor rows, cols;
  if (reference) {
    const int64_t total = h / 2 + 1;
    const auto kept = static_cast<int64_t>(static_cast<double>(total) * fraction);
    if (total - kept <= 0 && total + kept >= h && kept >= wf) return {};
    torch::Tensor k = torch::arange(h, index);
    rows = (k >= total - kept) & (k < total + kept);
    cols = torch::arange(wf, index) < kept;
  } else {
    if (fraction >= 1.0) return {};
    const auto kept_h = static_cast<int64_t>(static_cast<double>(h / 2 + 1) * fraction);
    const auto kept_w = static_cast<int64_t>(static_cast<double>(wf) * fraction);
    torch::Tensor k = torch::arange(h, index);
    rows = torch::where(k <= h / 2, k, k - h).abs() < kept_h;
    cols = torch::arange(wf, index) < kept_w;
  }
  return (rows.unsqueeze(1) & cols.unsqueeze(0)).to(options.dtype());
}

torch::Tensor spectral_multiply(const torch::Tensor& x, const torch::Tensor& weight) {
  return spectral_apply(x, [weight](const torch::Tensor& modes) { return modes * weight; });
}

AFNO2DImpl::AFNO2DImpl(const AFNO2DOptions& options_) : options(options_) {
  const int64_t C = options.hidden_size(), nb = options.num_blocks(), f = options.hidden_size_factor();
  TORCH_CHECK(nb > 0 && C % nb == 0, "AFNO2D: num_blocks (", nb, ") must divide hidden_size (", C, ")");
  TORCH_CHECK(f > 0, "AFNO2D: hidden_size_factor must be positive, got ", f);
  const int64_t bs = C / nb;
  // The reference's initialisation: N(0, 0.02^2) for weights and biases alike.
  const double scale = 0.02;
  w1 = register_parameter("w1", torch::randn({2, nb, bs, bs * f}) * scale);
  b1 = register_parameter("b1", torch::randn({2, nb, bs * f}) * scale);
  w2 = register_parameter("w2", torch::randn({2, nb, bs * f, bs}) * scale);
  b2 = register_parameter("b2", torch::randn({2, nb, bs}) * scale);
}

torch::Tensor AFNO2DImpl::filter_modes(const torch::Tensor& modes) const {
  const int64_t B = modes.size(0), h = modes.size(1), wf = modes.size(2), C = modes.size(3);
  const int64_t nb = options.num_blocks(), bs = C / nb;
  TORCH_CHECK(C == options.hidden_size(), "AFNO2D: expected ", options.hidden_size(), " channels, got ", C);
  // Parameters in their own dtype (bf16 under train.precision = "bf16"): the filter runs in fp32.
  auto f32 = [](const torch::Tensor& t) { return t.to(torch::kFloat); };
  const int64_t M = B * h * wf;
  // [B, h, wf, C] complex -> [nb, M, 2 bs]: block b's interleaved (re, im) parts of every mode, a
  // transposed view that the GEMMs (scaled_matmul: oneDNN on the CPU, the filter being fp32) read
  // in place; o1 and o2 stay block-major until the one copy back to the modes' layout.
  torch::Tensor z = torch::view_as_real(modes).reshape({M, nb, 2 * bs}).transpose(0, 1);
  torch::Tensor o1 = torch::relu(ops::scaled_matmul(z, complex_block_weight(f32(w1))) + complex_block_bias(f32(b1)));
  torch::Tensor o2 = ops::scaled_matmul(o1, complex_block_weight(f32(w2))) + complex_block_bias(f32(b2));
  const torch::Tensor kept =
      afno_mode_mask(h, wf, options.hard_thresholding_fraction(), options.reference_modes(), o2.options());
  if (kept.defined()) {
    // Dropped modes get no filter output (the reference leaves them zero): only the skip passes them.
    o2 = (o2.view({nb, B, h, wf, 2 * bs}) * kept.view({1, 1, h, wf, 1})).view({nb, M, 2 * bs});
  }
  // Soft shrinkage on real and imaginary parts apart, as the reference: small modes go to zero.
  o2 = torch::softshrink(o2, options.sparsity_threshold());
  return torch::view_as_complex(o2.transpose(0, 1).contiguous().view({B, h, wf, nb, bs, 2})).view({B, h, wf, C});
}

torch::Tensor AFNO2DImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 4 && x.size(3) == options.hidden_size(), "AFNO2D: expected [batch, h, w, ",
              options.hidden_size(), "], got ", x.sizes());
  // The filter's own skip (the reference's `bias`): what the spectral MLP drops still passes. x
  // first: a sum takes its layout from its first operand, and irfft2's output over dims (1, 2)
  // is not channels-last contiguous, so the other order would hand every later op (the norms, the
  // next FFT) a strided tensor to copy.
  return x + spectral_apply(x, [this](const torch::Tensor& modes) { return filter_modes(modes); });
}

AFNOBlockImpl::AFNOBlockImpl(const AFNOBlockOptions& options_) : options(options_) {
  const int64_t D = options.embed_dim();
  const auto hidden = static_cast<int64_t>(static_cast<double>(D) * options.mlp_ratio());
  TORCH_CHECK(hidden > 0, "AFNOBlock: mlp_ratio ", options.mlp_ratio(), " leaves no hidden units");
  norm1 = register_module("norm1", layer_norm(D));
  filter = register_module("filter", AFNO2D(AFNO2DOptions(D, options.num_blocks())
                                                .sparsity_threshold(options.sparsity_threshold())
                                                .hard_thresholding_fraction(options.hard_thresholding_fraction())
                                                .reference_modes(options.reference_modes())));
  norm2 = register_module("norm2", layer_norm(D));
  fc1 = register_module("fc1", torch::nn::Linear(D, hidden));
  fc2 = register_module("fc2", torch::nn::Linear(hidden, D));
}

torch::Tensor AFNOBlockImpl::forward(torch::Tensor x) {
  // Double skip (FourCastNet's double_skip = True): the filter's sum is itself a residual step.
  x = x + filter(norm1(ops::cuda_autocast_fp32(x)));
  return x + ops::apply_linear(fc2, torch::gelu(ops::apply_linear(fc1, norm2(ops::cuda_autocast_fp32(x)))));
}

FourCastNetImpl::FourCastNetImpl(const FourCastNetOptions& options, const ModelShape& shape) : WeatherModelImpl(shape) {
  if (shape.point_set)
    throw ConfigError("model.name = \"fourcastnet\" needs a latitude x longitude rectangle (patches and a 2-D Fourier transform over rows and columns), but the data is a "
                      "point-set grid of " + std::to_string(shape.lon) +
                      " cells (reduced Gaussian or a list of cells); use graphcast or gnn, or data on a regular grid");
  patch_ = options.patch_size;
  patches_lat_ = ceil_div(shape.lat, patch_);
  patches_lon_ = ceil_div(shape.lon, patch_);
  embed_ = register_block("embed", PatchEmbed(shape.in_channels, options.embed_dim, patch_, patches_lat_ * patches_lon_));
  for (int64_t i = 0; i < options.depth; ++i) {
    blocks_.push_back(register_block("block" + std::to_string(i),
                                     AFNOBlock(AFNOBlockOptions(options.embed_dim, options.afno_blocks)
                                                   .mlp_ratio(options.mlp_ratio)
                                                   .sparsity_threshold(options.sparsity_threshold)
                                                   .hard_thresholding_fraction(options.hard_thresholding_fraction)
                                                   .reference_modes(options.spectral_modes == "reference"))));
  }
  head_ = register_block("head", torch::nn::Linear(torch::nn::LinearOptions(options.embed_dim,
                                                                            patch_ * patch_ * shape.out_channels)
                                                       .bias(false)));
}

std::vector<ChannelAxis> FourCastNetImpl::channel_axes() const {
  // The head's p*p*C outputs per token are viewed as [p, p, C] in forward (the reference's
  // "(p1 p2 c_out)"): channel c owns entries c, c + C, ... — channel-minor. The conv weight is
  // [D, C_in, p, p].
  return {{"embed.proj.weight", 1, true}, {"head.weight", 0, false, patch_ * patch_, false}};
}

std::vector<std::string> FourCastNetImpl::adapt_to_grid(std::map<std::string, torch::Tensor>& weights,
                                                        const ModelShape& from) const {
  const auto found = weights.find("embed.pos_embed");
  if (found == weights.end()) return {};
  const torch::Tensor old = found->second;  // [1, nh0 * nw0, D]
  const int64_t p = patch_, nh0 = ceil_div(from.lat, p), nw0 = ceil_div(from.lon, p);
  const int64_t nh = patches_lat_, nw = patches_lon_, D = embed_->pos_embed.size(2);
  if (old.dim() != 3 || old.size(0) != 1 || old.size(1) != nh0 * nw0 || old.size(2) != D) return {};  // the loader names it
  const ModelShape& to = shape();
  if (nh0 == nh && nw0 == nw && from.latitudes == to.latitudes && from.longitudes == to.longitudes) return {};
  auto regular = [](const std::vector<double>& c, int64_t n, const char* what, const char* whose) {
    if (static_cast<int64_t>(c.size()) != n || n < 2)
      throw ConfigError(std::string("fourcastnet: ") + whose + " grid has no " + what +
                        " coordinates to place the positional embedding by (a checkpoint written before grids were "
                        "recorded, or data without coordinates)");
    return c[1] - c[0];
  };
  const double dlat0 = regular(from.latitudes, from.lat, "latitude", "the checkpoint's");
  const double dlon0 = regular(from.longitudes, from.lon, "longitude", "the checkpoint's");
  const double dlat = regular(to.latitudes, to.lat, "latitude", "this run's");
  const double dlon = regular(to.longitudes, to.lon, "longitude", "this run's");
  const double half = (static_cast<double>(p) - 1) / 2;
  // A global grid in longitude wraps: patch nw0 - 1 neighbours patch 0.
  const bool wraps = from.lon % p == 0 && std::abs(std::abs(dlon0) * static_cast<double>(from.lon) - 360.0) < 1e-6;
  // Where each of this grid's patch centres falls on the checkpoint's patch grid, in patches.
  std::vector<double> rows(static_cast<size_t>(nh)), cols(static_cast<size_t>(nw));
  bool exact = std::abs(dlat - dlat0) < 1e-9 && std::abs(dlon - dlon0) < 1e-9;
  for (int64_t i = 0; i < nh; ++i) {
    const double lat = to.latitudes[0] + (static_cast<double>(i * p) + half) * dlat;
    rows[static_cast<size_t>(i)] = ((lat - from.latitudes[0]) / dlat0 - half) / static_cast<double>(p);
  }
  for (int64_t j = 0; j < nw; ++j) {
    const double lon = to.longitudes[0] + (static_cast<double>(j * p) + half) * dlon;
    double offset = std::fmod(lon - from.longitudes[0], 360.0);
    if (offset < 0) offset += 360.0;
    if (!wraps && offset > std::abs(dlon0) * static_cast<double>(from.lon)) offset -= 360.0;  // west of the grid
    cols[static_cast<size_t>(j)] = (offset / dlon0 - half) / static_cast<double>(p);
  }
  for (double r : rows) exact = exact && std::abs(r - std::round(r)) < 1e-6 && r > -1e-6 && r < static_cast<double>(nh0) - 1 + 1e-6;
  for (double c : cols) exact = exact && std::abs(c - std::round(c)) < 1e-6;
  // Bilinear on the [nh0, nw0] patch grid: rows clamped at its edges, columns wrapped on a global grid.
  const torch::Tensor grid = old.detach().to(torch::kFloat64).view({nh0, nw0, D});
  torch::Tensor out = torch::zeros({nh, nw, D}, grid.options());
  auto clamp_row = [&](int64_t r) { return std::min(std::max<int64_t>(r, 0), nh0 - 1); };
  auto wrap_col = [&](int64_t c) { return wraps ? ((c % nw0) + nw0) % nw0 : std::min(std::max<int64_t>(c, 0), nw0 - 1); };
  for (int64_t i = 0; i < nh; ++i) {
    const double r = std::min(std::max(rows[static_cast<size_t>(i)], 0.0), static_cast<double>(nh0 - 1));
    const auto r0 = static_cast<int64_t>(std::floor(r));
    const double wr = r - static_cast<double>(r0);
    for (int64_t j = 0; j < nw; ++j) {
      const double c = cols[static_cast<size_t>(j)];
      const auto c0 = static_cast<int64_t>(std::floor(c));
      const double wc = c - static_cast<double>(c0);
      out[i][j] = (1 - wr) * (1 - wc) * grid[clamp_row(r0)][wrap_col(c0)] +
                  (1 - wr) * wc * grid[clamp_row(r0)][wrap_col(c0 + 1)] +
                  wr * (1 - wc) * grid[clamp_row(r0 + 1)][wrap_col(c0)] + wr * wc * grid[clamp_row(r0 + 1)][wrap_col(c0 + 1)];
    }
  }
  found->second = out.view({1, nh * nw, D}).to(old.scalar_type());
  char where[160];
  std::snprintf(where, sizeof where, "patch rows %.4g..%.4g, columns %.4g..%.4g of its grid", rows.front(), rows.back(),
                cols.front(), cols.back());
  return {"embed.pos_embed: " + std::string(exact ? "cut" : "interpolated bilinearly") + " from the checkpoint's " +
          std::to_string(nh0) + " x " + std::to_string(nw0) + " patches to this grid's " + std::to_string(nh) + " x " +
          std::to_string(nw) + " (" + where + ")"};
}

GridFit FourCastNetImpl::fit_checkpoint_to_grid(std::map<std::string, torch::Tensor>& weights,
                                                const GridPlacement& where, const ModelShape& from) const {
  (void)where;
  GridFit fit;
  if (from.lat <= 0) return fit;  // the checkpoint recorded no grid: taken to be this one
  fit.regridded = adapt_to_grid(weights, from);
  if (!fit.regridded.empty()) fit.fitted.insert("embed.pos_embed");
  return fit;
}

torch::Tensor FourCastNetImpl::forward(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 4 && x.size(1) == shape().in_channels, "fourcastnet: expected input [batch, ",
              shape().in_channels, ", lat, lon], got ", x.sizes());
  const int64_t lat = x.size(2), lon = x.size(3), p = patch_;
  const int64_t nh = ceil_div(lat, p), nw = ceil_div(lon, p);
  TORCH_CHECK(nh == patches_lat_ && nw == patches_lon_, "fourcastnet: the model was built for a ", shape().lat,
              " x ", shape().lon, " grid, got ", lat, " x ", lon);
  const int64_t pad_lat = nh * p - lat, pad_lon = nw * p - lon;

  // The lambdas hold the blocks by shared_ptr (by value, see run_block) and call non-const forward.
  std::shared_ptr<PatchEmbedImpl> embed = embed_.ptr();
  x = run_block(
      *embed,
      [embed, pad_lat, pad_lon, nh, nw](const torch::Tensor& in) {
        // The embedding's tokens are the conv output transposed, [B, N, D] with D-major strides, and
        // the residual sums keep that layout through every block: then each LayerNorm copies its
        // input to contiguous (forward and backward) and the FFTs reshape-copy theirs. One copy here,
        // of the smallest activation, makes the whole trunk contiguous.
        torch::Tensor tokens =
            embed->forward((pad_lat || pad_lon) ? torch::constant_pad_nd(in, {0, pad_lon, 0, pad_lat}) : in)
                .contiguous();
        return tokens.view({tokens.size(0), nh, nw, tokens.size(2)});  // the AFNO works on the patch grid
      },
      x);
  for (const AFNOBlock& b : blocks_) {
    std::shared_ptr<AFNOBlockImpl> block = b.ptr();
    x = run_block(*block, [block](const torch::Tensor& in) { return block->forward(in); }, x);
  }
  std::shared_ptr<torch::nn::LinearImpl> head = head_.ptr();
  const int64_t out_c = shape().out_channels;
  return run_block(
      *head,
      [head, nh, nw, p, out_c, lat, lon](const torch::Tensor& in) {
        return patches_to_grid(ops::apply_linear(torch::nn::Linear(head), in), nh, nw, p, out_c, lat, lon);
      },
      x);
}

ModelEntry fourcastnet_entry() {
  ModelEntry e = make_model_entry<FourCastNetOptions, FourCastNetImpl>(
      fourcastnet_schema(), &fourcastnet_parameter_count, &fourcastnet_activation_memory,
      {/*gemms=*/true, /*convolutions=*/true});
  e.references = {afno_reference()};
  return e;
}

}  // namespace wxtrain::models
