#include "models/noise_conditioning.h"

namespace wxtrain::models {

ConditionalLayerNormImpl::ConditionalLayerNormImpl(int64_t channels, int64_t condition) : channels(channels) {
  scale = register_module("scale", torch::nn::Linear(condition, channels));
  bias = register_module("bias", torch::nn::Linear(condition, channels));
  torch::NoGradGuard no_grad;
  for (auto& p : parameters()) p.zero_();  // anemoi's zero_init
}

torch::Tensor ConditionalLayerNormImpl::forward(const torch::Tensor& x, const torch::Tensor& cond) {
  const torch::Tensor normed = torch::layer_norm(x, {channels}, {}, {}, 1e-5);  // eps of torch.nn.LayerNorm
  return normed * (scale->forward(cond) + 1.0) + bias->forward(cond);
}

NoiseMlpImpl::NoiseMlpImpl(int64_t noise_channels) {
  mlp = register_module("mlp", torch::nn::Sequential(torch::nn::Linear(noise_channels, kNoiseMlpHidden),
                                                     torch::nn::GELU(),  // torch.nn.GELU(): the exact erf form
                                                     torch::nn::Linear(kNoiseMlpHidden, noise_channels)));
  layer_norm = register_module("layer_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({noise_channels})));
}

torch::Tensor NoiseMlpImpl::forward(const torch::Tensor& noise) { return layer_norm->forward(mlp->forward(noise)); }

int64_t conditional_norm_params(int64_t channels, int64_t condition) { return 2 * (condition + 1) * channels; }

int64_t noise_mlp_params(int64_t k) {
  return (k + 1) * kNoiseMlpHidden + (kNoiseMlpHidden + 1) * k + 2 * k;
}

Block noise_injector_block(const Widths& w, double nodes, double k, bool checkpointing) {
  const double hid = static_cast<double>(kNoiseMlpHidden);
  Block b;
  b.name = "noise_injector";
  b.layers.push_back(conv_or_linear(w, nodes * k, nodes * hid));
  b.layers.push_back(activation(nodes * hid, w.low));
  b.layers.push_back(conv_or_linear(w, nodes * hid, nodes * k));
  b.layers.push_back(norm(w, nodes * k, nodes));
  if (checkpointing) {
    b.inputs = b.saved();
    b.layers.clear();
  }
  b.output = nodes * k * w.high;
  return b;
}

}  // namespace wxtrain::models
