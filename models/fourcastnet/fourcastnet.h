#pragma once
// FourCastNet (Pathak et al. 2022, arXiv:2202.11214): a patch transformer whose token mixer is the
// Adaptive Fourier Neural Operator (AFNO, Guibas et al. 2021, arXiv:2111.13587) instead of
// attention. Mixing tokens costs an FFT over the patch grid and a block-diagonal MLP per Fourier
// mode, O(N log N) in the tokens where attention is O(N^2), which is what lets it run on 0.25
// degree global grids.
//
// The grid is zero-padded to a multiple of model.patch_size and embedded exactly as the ViT does
// (models/vit/vit.h PatchEmbed: conv with kernel = stride = patch_size, learned positional embedding),
// run through model.depth AFNO blocks on the [lat/p, lon/p] patch grid, and a bias-free Linear
// maps each token to its patch's patch_size^2 x out_channels values, reassembled and cropped. As in
// the reference (NVlabs/FourCastNet networks/afnonet.py): LayerNorm eps 1e-6, no final norm before
// the head (the reference builds one but never applies it), a head without bias.
//
// Blocks, in forward order: embed, block0 .. block{depth-1}, head.
#include <functional>

#include "models/vit/vit.h"
#include "models/fourcastnet/fourcastnet_options.h"
#include "models/registry.h"
#include "models/weather_model.h"

namespace wxtrain::models {

// irfft2(fn(rfft2(x))) over dims (1, 2) of a channels-last [B, h, w, C] tensor, both transforms
// with norm "ortho" (unitary: the spectrum has the signal's energy whatever the grid). fn maps the
// complex [B, h, w/2 + 1, C] modes to modes of the same shape. The transforms and fn run in fp32
// with autocast off, whatever x's dtype: cuFFT and pocketfft do not take bf16 everywhere, and
// complex tensors have no bf16 type; the result is cast back to x's dtype.
torch::Tensor spectral_apply(const torch::Tensor& x, const std::function<torch::Tensor(const torch::Tensor&)>& fn);

// The linear core of the AFNO filter: x's modes multiplied pointwise by `weight`, complex
// [h, w/2 + 1, C] (or broadcastable to it). With weight = rfft2(k) (unnormalised) this is the
// circular convolution of every channel of x with k over the (h, w) torus: the ortho norms of
// the two transforms cancel (tests/models/test_fourcastnet.cpp checks it against a direct sum).
torch::Tensor spectral_multiply(const torch::Tensor& x, const torch::Tensor& weight);

struct AFNO2DOptions {
  AFNO2DOptions(int64_t hidden_size, int64_t num_blocks) : hidden_size_(hidden_size), num_blocks_(num_blocks) {}
  TORCH_ARG(int64_t, hidden_size);                     // channels (embed_dim); a multiple of num_blocks
  TORCH_ARG(int64_t, num_blocks);                      // diagonal blocks of the per-mode MLP
  TORCH_ARG(double, sparsity_threshold) = 0.01;        // softshrink lambda on the MLP's output modes
  TORCH_ARG(double, hard_thresholding_fraction) = 1.0; // share of the lowest modes (per axis) filtered
  TORCH_ARG(int64_t, hidden_size_factor) = 1;          // MLP hidden width / block size
  TORCH_ARG(bool, reference_modes) = false;            // model.spectral_modes = "reference"
};

// Which of the [h, w/2 + 1] modes of an rfft2 the filter sees, as a 0/1 float mask, or undefined
// when it sees all of them. Not `reference`: the lowest int((n/2 + 1) x fraction) frequencies of
// each axis (|k| along h, whose negative frequencies sit at the end of the FFT's output; k along the
// halved axis). `reference`: PhysicsNeMo's AFNO2DLayer slicing, with total = h/2 + 1 and kept =
// int(total x fraction): rows [total - kept, total + kept) of the unshifted spectrum (a band around
// h/2, the highest latitudinal frequencies first) and columns [0, kept), kept counted on h.
torch::Tensor afno_mode_mask(int64_t h, int64_t wf, double fraction, bool reference, const torch::TensorOptions& options);

// The AFNO token mixer on a [B, h, w, C] patch grid: x + irfft2(softshrink(MLP(rfft2(x)))), the MLP
// block-diagonal (num_blocks blocks of block_size = C / num_blocks channels) and complex-valued:
// Linear, ReLU (on real and imaginary parts apart), Linear, with weights shared by every mode.
// Parameters as in the reference: w1 [2, nb, bs, bs*f], b1 [2, nb, bs*f], w2 [2, nb, bs*f, bs],
// b2 [2, nb, bs]; index 0 of the leading dim is the real part, 1 the imaginary part.
class AFNO2DImpl : public torch::nn::Module {
 public:
  explicit AFNO2DImpl(const AFNO2DOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  // The filter alone, on complex [B, h, w/2 + 1, C] modes (fp32): what spectral_apply wraps.
  torch::Tensor filter_modes(const torch::Tensor& modes) const;

  AFNO2DOptions options;
  torch::Tensor w1, b1, w2, b2;
};
TORCH_MODULE(AFNO2D);

struct AFNOBlockOptions {
  AFNOBlockOptions(int64_t embed_dim, int64_t num_blocks) : embed_dim_(embed_dim), num_blocks_(num_blocks) {}
  TORCH_ARG(int64_t, embed_dim);
  TORCH_ARG(int64_t, num_blocks);
  TORCH_ARG(double, mlp_ratio) = 4.0;
  TORCH_ARG(double, sparsity_threshold) = 0.01;
  TORCH_ARG(double, hard_thresholding_fraction) = 1.0;
  TORCH_ARG(bool, reference_modes) = false;
};

// FourCastNet's block with its double skip: x = x + filter(norm1(x)) (and the filter adds its own
// input, norm1(x), as well), then x + fc2(gelu(fc1(norm2(x)))). On [B, h, w, D] tokens.
class AFNOBlockImpl : public torch::nn::Module {
 public:
  explicit AFNOBlockImpl(const AFNOBlockOptions& options);
  torch::Tensor forward(torch::Tensor x);

  AFNOBlockOptions options;
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  AFNO2D filter{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(AFNOBlock);

class FourCastNetImpl : public WeatherModelImpl {
 public:
  FourCastNetImpl(const FourCastNetOptions& options, const ModelShape& shape);
  torch::Tensor forward(torch::Tensor x) override;
  // The patch embedding's conv weight (input channels) and the head's weight (output channels,
  // p*p entries each, channel-minor as the ViT's: see forward's reshape). The head has no bias.
  std::vector<ChannelAxis> channel_axes() const override;
  // The positional embedding of a model trained on another grid of the same resolution family (a
  // global model fine-tuned on a data.region): sampled at this grid's patch centres on the
  // checkpoint's patch grid, bilinearly, wrapping in longitude on a global grid. Where the region
  // starts on the checkpoint's patch boundaries at its resolution every sample falls on a patch
  // centre and this is a cut; otherwise an interpolation, and the line says which.
  // Replaces weights["embed.pos_embed"] and returns its line ("embed.pos_embed: cut from ..."), or
  // nothing when the grid is the checkpoint's or the embedding is not one the loader would take.
  std::vector<std::string> adapt_to_grid(std::map<std::string, torch::Tensor>& weights, const ModelShape& from) const;
  // adapt_to_grid, when the checkpoint recorded its grid (`where` is not needed: the coordinates place it).
  GridFit fit_checkpoint_to_grid(std::map<std::string, torch::Tensor>& weights, const GridPlacement& where,
                                 const ModelShape& from) const override;

  int64_t patch_size() const { return patch_; }
  int64_t patches_lat() const { return patches_lat_; }
  int64_t patches_lon() const { return patches_lon_; }

 private:
  int64_t patch_;
  int64_t patches_lat_, patches_lon_;
  PatchEmbed embed_{nullptr};
  std::vector<AFNOBlock> blocks_;
  torch::nn::Linear head_{nullptr};
};

// estimate --analytic (fourcastnet_memory.cpp): exact parameters, and activations block by block.
int64_t fourcastnet_parameter_count(const FourCastNetOptions& o, const ModelShape& s);
ModelMemory fourcastnet_activation_memory(const FourCastNetOptions& o, const ModelShape& s, const FormulaSettings& f);

// PhysicsNeMo's AFNO, whose .mdlus and state_dicts we read and write (fourcastnet_reference.cpp).
ReferenceModel afno_reference();

ModelEntry fourcastnet_entry();  // models/registry.cpp

}  // namespace wxtrain::models
