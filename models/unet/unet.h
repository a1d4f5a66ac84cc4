#pragma once
// Regional CNN U-Net. One level per entry of model.channels: the encoder halves the grid between
// levels (2x2 max-pool) and runs two 3x3 conv + GroupNorm + SiLU layers; the decoder upsamples
// (nearest), concatenates the encoder's skip and runs the same two layers; a 1x1 conv is the head.
// Any grid works: the input is zero-padded to a multiple of 2^(levels-1) and the output cropped.
//
// Blocks, in forward order (L = levels):
//   encoder0 .. encoder{L-1}   encoder{i>0} starts with the max-pool; the deepest is the bottleneck
//   decoder{L-2} .. decoder0   decoder{i} returns to the resolution of encoder{i}
//   head                       1x1 conv to the output variables
// so train.freeze = ["encoder*"] freezes the whole contracting path.
#include "models/registry.h"
#include "models/unet/unet_options.h"
#include "models/weather_model.h"

namespace wxtrain::models {

struct ConvBlockOptions {
  ConvBlockOptions(int64_t in_channels, int64_t out_channels, int64_t groups)
      : in_channels_(in_channels), out_channels_(out_channels), groups_(groups) {}
  TORCH_ARG(int64_t, in_channels);
  TORCH_ARG(int64_t, out_channels);
  TORCH_ARG(int64_t, groups);             // GroupNorm groups; must divide out_channels
  TORCH_ARG(bool, downsample) = false;    // 2x2 max-pool before the convolutions
};

// [maxpool] -> (conv3x3 -> GroupNorm -> SiLU) x 2. The convolutions have no bias: the GroupNorm
// right after them has its own shift.
class ConvBlockImpl : public torch::nn::Module {
 public:
  explicit ConvBlockImpl(const ConvBlockOptions& options);
  torch::Tensor forward(torch::Tensor x);

  ConvBlockOptions options;
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::GroupNorm norm1{nullptr}, norm2{nullptr};
};
TORCH_MODULE(ConvBlock);

// Nearest 2x upsampling of the coarse input, concatenated with the skip (coarse channels first),
// then a ConvBlock. The padding in UNetImpl makes every level exactly twice the next one.
class UpBlockImpl : public torch::nn::Module {
 public:
  UpBlockImpl(int64_t coarse_channels, int64_t skip_channels, int64_t out_channels, int64_t groups);
  torch::Tensor forward(const torch::Tensor& coarse, const torch::Tensor& skip);

  ConvBlock conv{nullptr};
};
TORCH_MODULE(UpBlock);

class UNetImpl : public WeatherModelImpl {
 public:
  UNetImpl(const UNetOptions& options, const ModelShape& shape);
  torch::Tensor forward(torch::Tensor x) override;
  // encoder0's first conv (input channels) and the 1x1 head with its bias (output channels).
  std::vector<ChannelAxis> channel_axes() const override;

  // The grid multiple the input is padded to: 2^(levels-1).
  int64_t grid_multiple() const { return int64_t{1} << (encoders_.size() - 1); }

 private:
  std::vector<ConvBlock> encoders_;  // encoder0 .. encoder{L-1}
  std::vector<UpBlock> decoders_;    // decoders_[i] is decoder{i}, for i < L-1
  torch::nn::Conv2d head_{nullptr};
};

// estimate --analytic (unet_memory.cpp): exact parameters, and activations block by block.
int64_t unet_parameter_count(const UNetOptions& o, const ModelShape& s);
ModelMemory unet_activation_memory(const UNetOptions& o, const ModelShape& s, const FormulaSettings& f);

ModelEntry unet_entry();  // models/registry.cpp

}  // namespace wxtrain::models
