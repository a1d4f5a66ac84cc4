#include "models/vit/vit.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "ops/cpu_fusion.h"
#include "ops/linear.h"

namespace wxtrain::models {

SelfAttentionImpl::SelfAttentionImpl(int64_t embed_dim, int64_t heads_) : heads(heads_) {
  TORCH_CHECK(embed_dim % heads == 0, "SelfAttention: heads (", heads, ") must divide embed_dim (", embed_dim, ")");
  qkv = register_module("qkv", torch::nn::Linear(embed_dim, 3 * embed_dim));
  proj = register_module("proj", torch::nn::Linear(embed_dim, embed_dim));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), N = x.size(1), D = x.size(2), hd = D / heads;
  // [B, N, 3D] -> 3 x [B, heads, N, hd]
  auto qkv_split = ops::apply_linear(qkv, x).view({B, N, 3, heads, hd}).permute({2, 0, 3, 1, 4}).unbind(0);
  const torch::Tensor& q = qkv_split[0];
  const torch::Tensor& k = qkv_split[1];
  const torch::Tensor& v = qkv_split[2];
  torch::Tensor scores = ops::scaled_matmul(q, k.transpose(-2, -1), 1.0 / std::sqrt(static_cast<double>(hd)));
  torch::Tensor attn = torch::softmax(ops::cuda_autocast_fp32(scores), -1);
  torch::Tensor out = ops::scaled_matmul(attn.scalar_type() == v.scalar_type() ? attn : attn.to(v.scalar_type()), v);
  return ops::apply_linear(proj, out.transpose(1, 2).reshape({B, N, D}));
}

TransformerBlockImpl::TransformerBlockImpl(const TransformerBlockOptions& options_) : options(options_) {
  const int64_t D = options.embed_dim();
  const auto hidden = static_cast<int64_t>(static_cast<double>(D) * options.mlp_ratio());
  TORCH_CHECK(hidden > 0, "TransformerBlock: mlp_ratio ", options.mlp_ratio(), " leaves no hidden units");
  if (options.condition() > 0) {
    cond_norm1 = register_module("norm1", ConditionalLayerNorm(D, options.condition()));
    cond_norm2 = register_module("norm2", ConditionalLayerNorm(D, options.condition()));
  } else {
    norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
    norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
  }
  attn = register_module("attn", SelfAttention(D, options.heads()));
  fc1 = register_module("fc1", torch::nn::Linear(D, hidden));
  fc2 = register_module("fc2", torch::nn::Linear(hidden, D));
}

torch::Tensor TransformerBlockImpl::forward(torch::Tensor x, const torch::Tensor& cond) {
  TORCH_CHECK(cond.defined() == static_cast<bool>(cond_norm1),
              "vit: a block with conditional norms needs the noise embedding, and only it");
  auto norm = [&](torch::nn::LayerNorm plain, ConditionalLayerNorm conditional, const torch::Tensor& t) {
    return conditional ? conditional->forward(ops::cuda_autocast_fp32(t), cond) : plain(ops::cuda_autocast_fp32(t));
  };
  x = x + attn(norm(norm1, cond_norm1, x));
  return x + ops::apply_linear(fc2, torch::gelu(ops::apply_linear(fc1, norm(norm2, cond_norm2, x))));
}

PatchEmbedImpl::PatchEmbedImpl(int64_t in_channels, int64_t embed_dim, int64_t patch_size, int64_t num_patches) {
  proj = register_module("proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, embed_dim, patch_size)
                                                       .stride(patch_size)));
  pos_embed = register_parameter("pos_embed", torch::randn({1, num_patches, embed_dim}) * 0.02);
}

torch::Tensor PatchEmbedImpl::forward(const torch::Tensor& x) {
  torch::Tensor tokens = proj(x).flatten(2).transpose(1, 2);  // [B, N, D]
  TORCH_CHECK(tokens.size(1) == pos_embed.size(1), "PatchEmbed: ", tokens.size(1), " patches, but the positional ",
              "embedding has ", pos_embed.size(1), " (the model was built for another grid)");
  return tokens + pos_embed;
}

PatchHeadImpl::PatchHeadImpl(int64_t embed_dim, int64_t patch_size, int64_t out_channels) {
  norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({embed_dim})));
  proj = register_module("proj", torch::nn::Linear(embed_dim, patch_size * patch_size * out_channels));
}

torch::Tensor PatchHeadImpl::forward(const torch::Tensor& x) { return ops::apply_linear(proj, norm(ops::cuda_autocast_fp32(x))); }

torch::Tensor patches_to_grid(const torch::Tensor& tokens, int64_t nh, int64_t nw, int64_t p, int64_t channels,
                              int64_t lat, int64_t lon) {
  const int64_t B = tokens.size(0);
  // [B, nh, nw, p, p, C] -> [B, C, nh, p, nw, p] -> [B, C, nh*p, nw*p]
  torch::Tensor grid = tokens.reshape({B, nh, nw, p, p, channels})
                           .permute({0, 5, 1, 3, 2, 4})
                           .reshape({B, channels, nh * p, nw * p});
  if (nh * p == lat && nw * p == lon) return grid;
  return grid.slice(2, 0, lat).slice(3, 0, lon).contiguous();
}

ViTImpl::ViTImpl(const ViTOptions& options, const ModelShape& shape) : WeatherModelImpl(shape) {
  if (shape.point_set)
    throw ConfigError("model.name = \"vit\" needs a latitude x longitude rectangle (square patches of rows and columns), but the data is a "
                      "point-set grid of " + std::to_string(shape.lon) +
                      " cells (reduced Gaussian or a list of cells); use graphcast or gnn, or data on a regular grid");
  patch_ = options.patch_size;
  patches_lat_ = ceil_div(shape.lat, patch_);
  patches_lon_ = ceil_div(shape.lon, patch_);
  // Conditional-norm noise (docs/ensembles.md): the last k input channels are noise fields, which
  // the patch embedding does not read; each token's noise is their mean over its patch's cells.
  const int64_t k = shape.conditional_noise;
  if (k < 0 || k >= shape.in_channels)
    throw ConfigError("vit: " + std::to_string(k) + " conditional noise channel(s) of " +
                      std::to_string(shape.in_channels) + " input channels leave no input");
  embed_ = register_block("embed", PatchEmbed(shape.in_channels - k, options.embed_dim, patch_, patches_lat_ * patches_lon_));
  if (k > 0) {
    noise_injector_ = register_block("noise_injector", NoiseInjector(k));
  }
  for (int64_t i = 0; i < options.depth; ++i) {
    blocks_.push_back(register_block(
        "block" + std::to_string(i),
        TransformerBlock(
            TransformerBlockOptions(options.embed_dim, options.heads).mlp_ratio(options.mlp_ratio).condition(k))));
  }
  head_ = register_block("head", PatchHead(options.embed_dim, patch_, shape.out_channels));
}

std::vector<ChannelAxis> ViTImpl::channel_axes() const {
  // The head's p*p*C outputs per token are viewed as [p, p, C] in forward (channel last): channel c
  // owns entries c, c + C, ... — channel-minor. The conv weight is [D, C_in, p, p].
  const int64_t pp = patch_ * patch_;
  ChannelAxis embed{"embed.proj.weight", 1, true};
  embed.skip_begin = shape().in_channels - shape().conditional_noise;  // noise channels: not conv inputs
  embed.skip_count = shape().conditional_noise;
  return {embed,
          {"head.proj.weight", 0, false, pp, false},
          {"head.proj.bias", 0, false, pp, false}};
}

torch::Tensor ViTImpl::forward(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 4 && x.size(1) == shape().in_channels, "vit: expected input [batch, ", shape().in_channels,
              ", lat, lon], got ", x.sizes());
  const int64_t lat = x.size(2), lon = x.size(3), p = patch_;
  const int64_t nh = ceil_div(lat, p), nw = ceil_div(lon, p);
  TORCH_CHECK(nh == patches_lat_ && nw == patches_lon_, "vit: the model was built for a ", shape().lat, " x ",
              shape().lon, " grid, got ", lat, " x ", lon);
  const int64_t pad_lat = nh * p - lat, pad_lon = nw * p - lon;

  // Conditional-norm noise: per token the mean of the noise over its patch's grid cells (padding
  // cells left out), embedded by the noise MLP; no gradient flows into the noise.
  torch::Tensor cond;
  if (const int64_t k = shape().conditional_noise; k > 0) {
    torch::Tensor noise = x.narrow(1, x.size(1) - k, k).detach();
    x = x.narrow(1, 0, x.size(1) - k);
    torch::Tensor cells = torch::ones({1, 1, lat, lon}, noise.options());
    if (pad_lat || pad_lon) {
      noise = torch::constant_pad_nd(noise, {0, pad_lon, 0, pad_lat});
      cells = torch::constant_pad_nd(cells, {0, pad_lon, 0, pad_lat});
    }
    const torch::Tensor sums = torch::avg_pool2d(noise, {p, p}, {p, p}) / torch::avg_pool2d(cells, {p, p}, {p, p});
    cond = run_forward(noise_injector_, sums.flatten(2).transpose(1, 2), /*checkpointed=*/false);  // [B, N, k]
  }

  // The lambdas hold the blocks by shared_ptr (by value, see run_block) and call non-const forward.
  std::shared_ptr<PatchEmbedImpl> embed = embed_.ptr();
  x = run_block(
      *embed,
      [embed, pad_lat, pad_lon](const torch::Tensor& in) {
        return embed->forward((pad_lat || pad_lon) ? torch::constant_pad_nd(in, {0, pad_lon, 0, pad_lat}) : in);
      },
      x);
  for (const TransformerBlock& b : blocks_) {
    std::shared_ptr<TransformerBlockImpl> block = b.ptr();
    if (cond.defined())
      x = run_block(*block, ops::BlockFn([block](const std::vector<torch::Tensor>& in) {
                      return std::vector<torch::Tensor>{block->forward(in[0], in[1])};
                    }),
                    {x, cond})[0];
    else
      x = run_block(*block, [block](const torch::Tensor& in) { return block->forward(in); }, x);
  }
  std::shared_ptr<PatchHeadImpl> head = head_.ptr();
  const int64_t out_c = shape().out_channels;
  return run_block(
      *head,
      [head, nh, nw, p, out_c, lat, lon](const torch::Tensor& in) {
        return patches_to_grid(head->forward(in), nh, nw, p, out_c, lat, lon);
      },
      x);
}

ModelEntry vit_entry() {
  ModelEntry e = make_model_entry<ViTOptions, ViTImpl>(vit_schema(), &vit_parameter_count, &vit_activation_memory,
                                                       {/*gemms=*/true, /*convolutions=*/true});  // the patch embedding is a conv
  e.conditional_noise = true;
  return e;
}

}  // namespace wxtrain::models
