#pragma once
// Pangu-Weather (Bi et al. 2023, "Accurate medium-range global weather forecasting with 3D neural
// networks", Nature 619:533-538; arXiv:2211.02556; pseudocode in 198808xc/Pangu-Weather): the 3D
// Earth-specific transformer (3DEST). The atmosphere is one volume [levels, lat, lon] of tokens, so
// attention mixes pressure levels as it mixes neighbouring points, and a learned bias per window
// position in level and latitude (shared over longitude) stands in for a positional embedding: the
// grid is not translation invariant in those two directions, but it is around the globe.
//
// Channels. The first model.upper_variables x model.levels channels of a state are upper air,
// variable-major (v0 at every level, then v1, ...): the newest input state's form the volume
// [V, Z, lat, lon]; everything else the model reads (surface variables, the upper air of older
// states, forcings, static fields) is surface-like, one 2-D field each. The output has the same
// split: V x Z upper-air channels first, then the surface-like rest.
//
// Architecture (the pseudocode's, sizes configurable):
//   embed       a (level_patch, p, p) patch embedding of the volume and a (p, p) one of the
//               surface fields, both zero-padded up to whole patches; the surface tokens are one
//               more level, level 0 (as the pseudocode's patch recovery reads them).
//   layer1      stage_depths[0] Earth-specific blocks at embed_dim on (Zt, h, w) tokens
//   downsample  2x2 patch merging in lat/lon (LayerNorm, Linear 4D -> 2D without bias)
//   layer2/3    stage_depths[1], [2] blocks at 2 x embed_dim on (Zt, h/2, w/2)
//   upsample    Linear 2D -> 4D, back to (Zt, h, w), LayerNorm, Linear D -> D (no biases)
//   layer4      stage_depths[3] blocks at embed_dim
//   head        layer1's output concatenated (the skip) with layer4's, 2D channels, recovered to
//               (level_patch, p, p) upper-air and (p, p) surface patches and cropped (the
//               pseudocode's transposed convolutions, as one Linear per token and a bias per channel)
// An Earth-specific block is post-norm as in the pseudocode: x + norm1(attention(x)), then
// x + norm2(mlp(x)). Attention runs in windows of model.window tokens (levels, lat, lon) over the
// volume zero-padded to whole windows; every second block of a stage shifts the windows by half a
// window: the volume is rolled, and the tokens a roll carries across the level and latitude edges
// are masked from the rest of their window (they are not neighbours); longitude wraps around the
// globe, so what crosses the date line stays a neighbour and is not masked. As in the pseudocode,
// the zero tokens padded in are attended to like any other (every query always sees itself, so a
// mask of -inf, where the pseudocode suggests -100 or -1000, never empties a row).
//
// Departures, each for a reason: no drop path (the trainer has no stochastic regularisation,
// and a checkpointed block's replay would have to replay its random draws too); a window larger
// than a stage's token grid is cut to the grid (on small grids the pseudocode's sizes would be
// mostly padding); no shift along a dimension that holds a single window.
//
// PhysicsNeMo's Pangu (physicsnemo.models.pangu.Pangu, the reference whose checkpoints
// pangu_reference.cpp reads and writes) reads the paper differently in places; each is an option,
// and with all of them set as pangu_reference.cpp sets them this model computes its function
// (tests/models/test_pangu_reference.cpp; docs/interop_pangu.md lists what stays different):
//   model.block_norm = "pre"          x + attention(norm1(x)), x + mlp(norm2(x))
//   model.padding = "centered"        the patch and window padding (and the output's crop) split
//                                     half before the grid, the odd cell after
//   model.window_shift = [1, 3, 6]    every second block rolls by these, along every dimension
//   model.fit_window = false          a window larger than a stage's grid pads the grid instead
//   model.shift_mask = "all_edges"    the shifted windows' mask also splits the longitude window
//                                     that wraps around the date line, with -100 rather than -inf:
//                                     one mask per longitude window, [lon windows, types, N, N]
//
// Blocks, in forward order: embed, layer1_block0.., downsample, layer2_block0.., layer3_block0..,
// upsample, layer4_block0.., head.
#include <array>
#include <optional>

#include "models/pangu/pangu_options.h"
#include "models/registry.h"
#include "models/weather_model.h"

namespace wxtrain::models {

using Extent3 = std::array<int64_t, 3>;  // (levels, lat, lon)

// [B, Z, H, W, C] zero-padded at the end of Z, H and W up to multiples of `multiple` (returned as
// is when nothing is missing), and the inverse crop back to (Z, H, W). `centered`: half the padding
// (rounded down) before, the rest after, as PhysicsNeMo pads (model.padding = "centered").
torch::Tensor pad_volume(const torch::Tensor& x, const Extent3& multiple, bool centered = false);
torch::Tensor crop_volume(const torch::Tensor& x, const Extent3& extent, bool centered = false);

// The windows of a [B, Z, H, W, C] volume whose Z, H, W are multiples of `window`:
// [B * nW, nZ * nH, N, C] with N = wz * wh * ww tokens in (level, lat, lon) order. The second
// dimension is the window's type (its level-window and latitude-window index, t = iz * nH + ih),
// which selects its Earth-specific bias; windows along longitude share it and go into the batch.
torch::Tensor window_partition(const torch::Tensor& x, const Extent3& window);
// The inverse: windows back into the [B, Z, H, W, C] volume.
torch::Tensor window_reverse(const torch::Tensor& windows, const Extent3& window, int64_t batch, const Extent3& extent);

// Where the Earth-specific bias of query i and key j of a window sits in its table, [N * N] int64:
// level and latitude by the absolute positions of both (zi + zj wz, hi + hj wh: the atmosphere
// differs by height and latitude), longitude by the offset wi - wj alone; the table has
// wz^2 x wh^2 x (2 ww - 1) rows, as in the pseudocode.
torch::Tensor earth_position_index(const Extent3& window);

// The shifted windows' mask of a padded volume `extent` rolled by -shift: [nZ * nH, N, N], 0 where
// query and key are on the same side of every level and latitude edge the roll wrapped around,
// -inf where not. Longitude is never masked: it is periodic.
torch::Tensor shifted_window_mask(const Extent3& extent, const Extent3& window, const Extent3& shift);

// PhysicsNeMo's mask of the same windows (get_shift_window_mask; model.shift_mask = "all_edges"):
// [nW, nZ * nH, N, N] for the nW longitude windows, -100 where query and key are on different
// sides of a level, latitude or longitude edge, 0 where not. Its longitude edge splits the last
// longitude window at W + shift - window, which is the date line when the shift is half the window.
torch::Tensor all_edges_shift_mask(const Extent3& extent, const Extent3& window, const Extent3& shift);

// Attention on the CPU, q, k, v [B, .., N, hd] (any strides), the additive bias [1, .., N, N]:
// softmax(q k^T / sqrt(hd) + bias) v. With the CPU fusions on (ops/cpu_fusion.h), q k^T and
// attn x v are scaled_matmul's (oneDNN in fp32, reading q, k, v in place) and the scale, the bias
// and the softmax one pass over the scores (scaled_biased_softmax). With them off (a GPU-standing
// step) it is ATen's math path (at::_scaled_dot_product_attention_math) spelled out: q and k
// scaled by sqrt(1/sqrt(hd)), the bias added in place, softmax, attn x v, the softmax's input
// through cuda_autocast_fp32, so that under autocast it runs in fp32 and hands on its fp32 output,
// as CUDA's autocast would on this path.
torch::Tensor window_attention_math(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& additive);

// softmax(scale * scores + bias, -1) for contiguous fp32 or bf16 CPU scores [B, .., N] and a bias
// [1, .., N] of the same dtype (shared by the batch), in one pass: the sum, the scale and the
// softmax of ATen's path (scores.mul_, add_, softmax) in fp32, rounded once in bf16; the backward
// is one pass too, with the bias gradient summed over the batch in fp32. A row must hold a finite
// value (-inf elsewhere gives exact zeros). Whether it applies: scaled_biased_softmax_applies.
// On LibTorch 2.11 the storm Pangu's step runs 1.08x (bf16-mixed) and 1.04x (fp32) faster with it
// than with ATen's path (`OMP_NUM_THREADS=1 build/bench/fusion_ab --fusions scaled_biased_softmax --pairs 21`,
// docs/benchmarks.md "Fusions on LibTorch 2.11").
torch::Tensor scaled_biased_softmax(const torch::Tensor& scores, const torch::Tensor& bias, double scale);
bool scaled_biased_softmax_applies(const torch::Tensor& scores, const torch::Tensor& bias);

// 3-D window attention with the Earth-specific bias: one qkv Linear, heads of dim / heads, the
// bias table [wz^2 wh^2 (2 ww - 1), types, heads] (types = level windows x latitude windows),
// attention with bias (+ mask) as the additive mask (CUDA: scaled_dot_product_attention; CPU:
// window_attention_math), an output Linear.
class EarthAttention3DImpl : public torch::nn::Module {
 public:
  EarthAttention3DImpl(int64_t dim, int64_t heads, const Extent3& window, int64_t types);
  // windows [B', types, N, C] (window_partition's), mask [types, N, N], [lon windows, types, N, N]
  // (all_edges_shift_mask's) or undefined -> same shape.
  torch::Tensor forward(const torch::Tensor& windows, const torch::Tensor& mask);
  // The bias of every window type, [types, heads, N, N], gathered from the table.
  torch::Tensor bias() const;

  int64_t heads;
  Extent3 window;
  torch::nn::Linear qkv{nullptr}, proj{nullptr};
  torch::Tensor earth_bias;      // parameter
  torch::Tensor position_index;  // buffer, int64 (kept so when the model is cast: PanguImpl::to)
};
TORCH_MODULE(EarthAttention3D);

struct EarthBlockOptions {
  EarthBlockOptions(int64_t dim, int64_t heads, const Extent3& grid, const Extent3& window)
      : dim_(dim), heads_(heads), grid_(grid), window_(window) {}
  TORCH_ARG(int64_t, dim);
  TORCH_ARG(int64_t, heads);
  TORCH_ARG(Extent3, grid);    // the stage's token grid (levels, lat, lon), before padding
  TORCH_ARG(Extent3, window);  // the window (larger than the grid: the grid is padded up to it)
  TORCH_ARG(bool, shifted) = false;
  // The roll of a shifted block; unset: half the window along each dimension with more than one.
  TORCH_ARG(std::optional<Extent3>, shift_size) = std::nullopt;
  TORCH_ARG(double, mlp_ratio) = 4.0;
  TORCH_ARG(bool, pre_norm) = false;        // model.block_norm = "pre"
  TORCH_ARG(bool, centered) = false;        // model.padding = "centered"
  TORCH_ARG(bool, mask_all_edges) = false;  // model.shift_mask = "all_edges"
};

// One Earth-specific transformer block on [B, Z, H, W, C] tokens (Z, H, W = options.grid).
class EarthSpecificBlockImpl : public torch::nn::Module {
 public:
  explicit EarthSpecificBlockImpl(const EarthBlockOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  // The attention branch alone on the unpadded grid: pad, roll, windows, attention, back, roll
  // back, crop (what the structural test compares with full attention under an explicit mask).
  torch::Tensor attention(const torch::Tensor& x);

  EarthBlockOptions options;
  Extent3 padded{}, shift{};
  EarthAttention3D attn{nullptr};
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  // buffer [types, N, N] when the block shifts across a level or latitude edge; with
  // mask_all_edges [lon windows, types, N, N] whenever it shifts
  torch::Tensor shift_mask;
};
TORCH_MODULE(EarthSpecificBlock);

// The patch embedding: upper air [B, V, Z, lat, lon] and surface-like fields [B, Cs, lat, lon] ->
// tokens [B, 1 + Zu, h, w, D], the surface level first. Each patch, flattened (variable, level,
// lat, lon) / (channel, lat, lon), goes through one Linear: the pseudocode's Conv3d / Conv2d with
// kernel = stride = the patch, the same parameters.
class PanguEmbedImpl : public torch::nn::Module {
 public:
  PanguEmbedImpl(int64_t upper_variables, int64_t surface_channels, int64_t dim, int64_t level_patch, int64_t patch,
                 bool centered = false);
  torch::Tensor forward(const torch::Tensor& upper, const torch::Tensor& surface);

  int64_t level_patch, patch;
  bool centered;  // model.padding = "centered"
  torch::nn::Linear upper{nullptr};  // absent without upper air
  torch::nn::Linear surface{nullptr};
};
TORCH_MODULE(PanguEmbed);

// 2x2 patch merging in lat/lon, odd sizes zero-padded: [B, Z, H, W, D] -> [B, Z, H/2, W/2, 2D].
class PanguDownSampleImpl : public torch::nn::Module {
 public:
  explicit PanguDownSampleImpl(int64_t dim);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear reduce{nullptr};
};
TORCH_MODULE(PanguDownSample);

// The inverse: [B, Z, H2, W2, 2D] -> [B, Z, H, W, D], cropped to (H, W).
class PanguUpSampleImpl : public torch::nn::Module {
 public:
  PanguUpSampleImpl(int64_t in_dim, int64_t out_dim);
  torch::Tensor forward(const torch::Tensor& x, int64_t lat, int64_t lon);

  torch::nn::Linear expand{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear mix{nullptr};
};
TORCH_MODULE(PanguUpSample);

// Patch recovery: tokens [B, 1 + Zu, h, w, 2D] -> upper air [B, V * Z, lat, lon] (variable-major)
// and the surface-like outputs after it, [B, V * Z + Cso, lat, lon].
class PanguHeadImpl : public torch::nn::Module {
 public:
  PanguHeadImpl(int64_t dim, int64_t upper_variables, int64_t levels, int64_t surface_channels, int64_t level_patch,
                int64_t patch, int64_t lat, int64_t lon, bool centered = false);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& skip);

  int64_t upper_variables, levels, surface_channels, level_patch, patch, lat, lon;
  bool centered;  // model.padding = "centered": crop the padding from both sides
  torch::nn::Linear upper{nullptr}, surface{nullptr};  // absent without upper air / surface outputs
  torch::Tensor upper_bias, surface_bias;
};
TORCH_MODULE(PanguHead);

class PanguImpl : public WeatherModelImpl {
 public:
  PanguImpl(const PanguOptions& options, const ModelShape& shape);
  torch::Tensor forward(torch::Tensor x) override;
  // The surface-like layers: the embedding's surface Linear (input channels) and the head's
  // surface Linear and bias (output channels), p*p entries each, channel-major. They span every
  // channel only without an upper-air volume; with one they run over the surface-like channels
  // alone, which ChannelAxis cannot say, and fine-tuning onto another channel list stops with the
  // loader's size error (listing them keeps a reordered list of the same length from loading
  // silently into the wrong slices). The upper-air layers are indexed by variable and level patch,
  // not by channel: changing them is changing model.upper_variables.
  std::vector<ChannelAxis> channel_axes() const override;
  // Fine-tuning on a region of the grid a checkpoint was trained on: each Earth-specific bias
  // table keeps, for every latitude window of this grid, the trained table's entries of the
  // latitude window that covered the same latitude (the bias is Earth-specific by latitude and
  // level, shared along longitude, so a regional window inherits its band's); the level windows
  // are the same. The shifted windows' masks are rebuilt (this model's own).
  // One tensor of the checkpoint, `name`, fitted so: undefined when it is not grid-sized or cannot
  // be fitted; undefined with `how` set when this grid needs no such tensor (a mask).
  torch::Tensor fit_to_grid(const std::string& name, const torch::Tensor& trained, const GridPlacement& placement,
                            std::string* how) const;
  // fit_to_grid over the checkpoint's tensors whose size is not this model's, and (with `where`
  // known) those this grid needs none of; `from` is not needed.
  GridFit fit_checkpoint_to_grid(std::map<std::string, torch::Tensor>& weights, const GridPlacement& where,
                                 const ModelShape& from) const override;

  // The input split: {upper [B, V, Z, lat, lon], surface-like [B, Cs, lat, lon]} (upper undefined
  // without upper air). The newest state's first V x Z channels are the volume.
  std::vector<torch::Tensor> split_input(const torch::Tensor& x) const;

  int64_t upper_channels() const { return upper_variables_ * levels_; }
  int64_t surface_inputs() const { return shape().in_channels - upper_channels(); }
  int64_t surface_outputs() const { return shape().out_channels - upper_channels(); }
  Extent3 tokens() const { return tokens_; }         // (1 + Zu, h, w) of stages 1 and 4
  Extent3 coarse_tokens() const { return coarse_; }  // (1 + Zu, h/2, w/2) of stages 2 and 3
  // The Earth-specific blocks in forward order.
  const std::vector<EarthSpecificBlock>& blocks() const { return blocks_; }

  // Module::to(dtype) converts every buffer; the bias tables' position indices must stay int64,
  // so these move them by device only (as GraphNetImpl does with its edge indices).
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Device device, bool non_blocking = false) override;

 private:
  template <typename Move>
  void move_keeping_indices(const Move& move, const std::optional<torch::Device>& device, bool non_blocking);

  PanguOptions options_;
  int64_t upper_variables_, levels_, upper_offset_;
  Extent3 tokens_{}, coarse_{};
  PanguEmbed embed_{nullptr};
  std::vector<EarthSpecificBlock> blocks_;  // the four stages' blocks, in order
  std::array<int64_t, 4> depths_{};
  PanguDownSample down_{nullptr};
  PanguUpSample up_{nullptr};
  PanguHead head_{nullptr};
};

// estimate --analytic (pangu_memory.cpp): exact parameters, activations block by block, and the
// bias-table indices and shift masks.
int64_t pangu_parameter_count(const PanguOptions& o, const ModelShape& s);
ModelMemory pangu_activation_memory(const PanguOptions& o, const ModelShape& s, const FormulaSettings& f);
double pangu_buffer_bytes(const PanguOptions& o, const ModelShape& s, double param_bytes);

// A stage's attention window on its token grid: model.window, cut to the grid where the grid is
// smaller (unless model.fit_window = false).
Extent3 pangu_stage_window(const PanguOptions& o, const Extent3& grid);

// PhysicsNeMo's Pangu as a reference (pangu_reference.cpp; models/reference_model.h).
ReferenceModel pangu_physicsnemo_reference();

ModelEntry pangu_entry();  // models/registry.cpp

}  // namespace wxtrain::models
