#pragma once
// anemoi's noise conditioning (AIFS-ENS; anemoi-models layers/ensemble.py NoiseConditioning and
// layers/normalization.py ConditionalLayerNorm), shared by the models that take an ensemble's noise
// through conditional LayerNorms (train.noise_injection = "conditional_norm", docs/ensembles.md):
// the noise fields, averaged onto the processor's nodes or tokens, embedded by NoiseMlp, modulate
// each processor LayerNorm through ConditionalLayerNorm.
#include <torch/torch.h>

#include "models/memory_formula.h"

namespace wxtrain::models {

// ConditionalLayerNorm (autocast off, as AIFS-ENS configures it): LayerNorm without affine
// parameters, times 1 + scale(cond), plus bias(cond); scale and bias are Linears of the
// conditioning vector initialised at zero, so that it starts as a plain LayerNorm and the noise
// has no effect until training moves them.
class ConditionalLayerNormImpl : public torch::nn::Module {
 public:
  ConditionalLayerNormImpl(int64_t channels, int64_t condition);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cond);  // [B, N, C], [B, N, condition]

  int64_t channels;
  torch::nn::Linear scale{nullptr}, bias{nullptr};
};
TORCH_MODULE(ConditionalLayerNorm);

// NoiseConditioning.noise_mlp (anemoi's MLP(layer_norm=True)): Linear(k, hidden), GELU,
// Linear(hidden, k), LayerNorm(k). Its output is the conditioning vector of every processor norm.
constexpr int64_t kNoiseMlpHidden = 32;  // noise_mlp_hidden_dim of anemoi's AIFS-ENS configuration
class NoiseMlpImpl : public torch::nn::Module {
 public:
  explicit NoiseMlpImpl(int64_t noise_channels);
  torch::Tensor forward(const torch::Tensor& noise);
  torch::nn::Sequential mlp{nullptr};  // "0" Linear, "1" GELU, "2" Linear, as anemoi names them
  torch::nn::LayerNorm layer_norm{nullptr};
};
TORCH_MODULE(NoiseMlp);

// anemoi's `noise_injector` module holding the noise MLP under the name its state_dicts use
// (noise_injector.noise_mlp.*); the models register it as a block of its own and run it through
// run_block (never checkpointed), so train.freeze, the block list and ZeRO-3's gathering see it.
class NoiseInjectorImpl : public torch::nn::Module {
 public:
  explicit NoiseInjectorImpl(int64_t noise_channels) : noise_mlp(register_module("noise_mlp", NoiseMlp(noise_channels))) {}
  torch::Tensor forward(const torch::Tensor& noise) { return noise_mlp->forward(noise); }
  NoiseMlp noise_mlp;
};
TORCH_MODULE(NoiseInjector);

// Parameters of the above, for estimate --analytic.
int64_t conditional_norm_params(int64_t channels, int64_t condition);
int64_t noise_mlp_params(int64_t noise_channels);
// The noise MLP's block on `nodes` nodes of k noise channels (Linear, GELU, Linear, LayerNorm).
// It runs outside every checkpointed block, so with train.checkpointing (`checkpointing`) what it
// saves stays for the step (the block's inputs) and nothing of it is replayed.
Block noise_injector_block(const Widths& w, double nodes, double k, bool checkpointing);

}  // namespace wxtrain::models
