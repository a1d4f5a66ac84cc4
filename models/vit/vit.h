#pragma once
// FourCastNet/Pangu-style patch transformer. The grid is zero-padded to a multiple of
// model.patch_size, cut into patch_size x patch_size patches (a conv with kernel = stride =
// patch_size) embedded to model.embed_dim with a learned positional embedding, run through
// model.depth pre-norm transformer blocks, and projected back to patch_size^2 x out_channels values
// per patch, which are reassembled into the grid and cropped.
//
// Blocks, in forward order: embed, [noise_injector,] block0 .. block{depth-1}, head. With
// ModelShape::conditional_noise the last input channels are noise fields that the embedding does not
// read: averaged per patch and embedded by noise_injector, they condition every block's LayerNorms.
#include "models/noise_conditioning.h"
#include "models/registry.h"
#include "models/vit/vit_options.h"
#include "models/weather_model.h"

namespace wxtrain::models {

struct TransformerBlockOptions {
  TransformerBlockOptions(int64_t embed_dim, int64_t heads) : embed_dim_(embed_dim), heads_(heads) {}
  TORCH_ARG(int64_t, embed_dim);
  TORCH_ARG(int64_t, heads);           // must divide embed_dim
  TORCH_ARG(double, mlp_ratio) = 4.0;  // MLP hidden width = embed_dim * mlp_ratio
  // > 0: norm1 and norm2 are conditional LayerNorms of a noise embedding this wide (AIFS-ENS's
  // noise conditioning, models/noise_conditioning.h).
  TORCH_ARG(int64_t, condition) = 0;
};

// Multi-head self-attention over [B, N, D] tokens with one fused qkv projection.
class SelfAttentionImpl : public torch::nn::Module {
 public:
  SelfAttentionImpl(int64_t embed_dim, int64_t heads);
  torch::Tensor forward(const torch::Tensor& x);

  int64_t heads;
  torch::nn::Linear qkv{nullptr}, proj{nullptr};
};
TORCH_MODULE(SelfAttention);

// x + attn(LayerNorm(x)), then x + mlp(LayerNorm(x)) with a GELU MLP; with options.condition > 0
// both LayerNorms are conditional and forward takes the noise embedding [B, N, condition].
class TransformerBlockImpl : public torch::nn::Module {
 public:
  explicit TransformerBlockImpl(const TransformerBlockOptions& options);
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& cond = {});

  TransformerBlockOptions options;
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  ConditionalLayerNorm cond_norm1{nullptr}, cond_norm2{nullptr};  // registered as norm1, norm2
  SelfAttention attn{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(TransformerBlock);

// Patch embedding: [B, C, H, W] (H, W multiples of patch) -> [B, N, D] tokens + positions.
class PatchEmbedImpl : public torch::nn::Module {
 public:
  PatchEmbedImpl(int64_t in_channels, int64_t embed_dim, int64_t patch_size, int64_t num_patches);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Conv2d proj{nullptr};
  torch::Tensor pos_embed;  // [1, N, D]
};
TORCH_MODULE(PatchEmbed);

// Final LayerNorm and the linear map from a token to its patch's values.
class PatchHeadImpl : public torch::nn::Module {
 public:
  PatchHeadImpl(int64_t embed_dim, int64_t patch_size, int64_t out_channels);
  torch::Tensor forward(const torch::Tensor& x);  // [B, N, D] -> [B, N, patch^2 * out]

  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear proj{nullptr};
};
TORCH_MODULE(PatchHead);

// A head's tokens back onto the grid: [B, nh, nw, p*p*C] (or [B, nh*nw, p*p*C]), each token's
// entries laid out (p1, p2, C), to [B, C, nh*p, nw*p], cropped to lat x lon when the grid was
// padded up to whole patches. The layout is what channel_axes() of the ViT and FourCastNet say.
torch::Tensor patches_to_grid(const torch::Tensor& tokens, int64_t nh, int64_t nw, int64_t p, int64_t channels,
                              int64_t lat, int64_t lon);

class ViTImpl : public WeatherModelImpl {
 public:
  ViTImpl(const ViTOptions& options, const ModelShape& shape);
  torch::Tensor forward(torch::Tensor x) override;
  // The patch embedding's conv weight (input channels) and the head's Linear with its bias
  // (output channels, p*p entries each, channel-minor: see forward's reshape).
  std::vector<ChannelAxis> channel_axes() const override;

  int64_t patch_size() const { return patch_; }
  int64_t patches_lat() const { return patches_lat_; }
  int64_t patches_lon() const { return patches_lon_; }

 private:
  int64_t patch_;
  int64_t patches_lat_, patches_lon_;
  PatchEmbed embed_{nullptr};
  std::vector<TransformerBlock> blocks_;
  PatchHead head_{nullptr};
  NoiseInjector noise_injector_{nullptr};  // conditional-norm noise: its noise_mlp
};

// estimate --analytic (vit_memory.cpp): exact parameters, and activations block by block.
int64_t vit_parameter_count(const ViTOptions& o, const ModelShape& s);
ModelMemory vit_activation_memory(const ViTOptions& o, const ModelShape& s, const FormulaSettings& f);

ModelEntry vit_entry();  // models/registry.cpp

}  // namespace wxtrain::models
