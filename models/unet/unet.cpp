#include "models/unet/unet.h"

#include <string>

#include "core/error.h"
#include "ops/conv2d.h"
#include "ops/group_norm_silu.h"
#include "ops/resample.h"

namespace wxtrain::models {
namespace {

namespace F = torch::nn::functional;

torch::nn::Conv2d conv3x3(int64_t in, int64_t out) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false));
}

}  // namespace

ConvBlockImpl::ConvBlockImpl(const ConvBlockOptions& options_) : options(options_) {
  TORCH_CHECK(options.out_channels() % options.groups() == 0, "ConvBlock: groups (", options.groups(),
              ") must divide out_channels (", options.out_channels(), ")");
  conv1 = register_module("conv1", conv3x3(options.in_channels(), options.out_channels()));
  norm1 = register_module("norm1", torch::nn::GroupNorm(options.groups(), options.out_channels()));
  conv2 = register_module("conv2", conv3x3(options.out_channels(), options.out_channels()));
  norm2 = register_module("norm2", torch::nn::GroupNorm(options.groups(), options.out_channels()));
}

torch::Tensor ConvBlockImpl::forward(torch::Tensor x) {
  if (options.downsample()) x = ops::max_pool_2x2(x);
  x = ops::group_norm_silu(ops::conv2d(conv1, x), norm1);
  return ops::group_norm_silu(ops::conv2d(conv2, x), norm2);
}

UpBlockImpl::UpBlockImpl(int64_t coarse_channels, int64_t skip_channels, int64_t out_channels, int64_t groups) {
  conv = register_module("conv", ConvBlock(ConvBlockOptions(coarse_channels + skip_channels, out_channels, groups)));
}

torch::Tensor UpBlockImpl::forward(const torch::Tensor& coarse, const torch::Tensor& skip) {
  TORCH_CHECK(coarse.size(2) * 2 == skip.size(2) && coarse.size(3) * 2 == skip.size(3), "UpBlock: coarse grid ",
              coarse.sizes(), " is not half of the skip grid ", skip.sizes());
  return conv(ops::upsample_2x_concat(coarse, skip));
}

UNetImpl::UNetImpl(const UNetOptions& options, const ModelShape& shape) : WeatherModelImpl(shape) {
  if (shape.point_set)
    throw ConfigError("model.name = \"unet\" needs a latitude x longitude rectangle (convolutions over rows and columns), but the data is a "
                      "point-set grid of " + std::to_string(shape.lon) +
                      " cells (reduced Gaussian or a list of cells); use graphcast or gnn, or data on a regular grid");
  const auto& ch = options.channels;
  const size_t levels = ch.size();
  for (size_t i = 0; i < levels; ++i) {
    const int64_t in = i == 0 ? shape.in_channels : ch[i - 1];
    encoders_.push_back(register_block("encoder" + std::to_string(i),
                                       ConvBlock(ConvBlockOptions(in, ch[i], options.groups).downsample(i > 0))));
  }
  decoders_.resize(levels - 1, UpBlock(nullptr));
  for (size_t i = levels - 1; i-- > 0;) {
    decoders_[i] = register_block("decoder" + std::to_string(i), UpBlock(ch[i + 1], ch[i], ch[i], options.groups));
  }
  head_ = register_block("head", torch::nn::Conv2d(torch::nn::Conv2dOptions(ch[0], shape.out_channels, 1)));
}

std::vector<ChannelAxis> UNetImpl::channel_axes() const {
  // conv weights are [out, in, kh, kw]; the bias-free first conv leaves a zero input channel
  // without any effect.
  return {{"encoder0.conv1.weight", 1, true},
          {"head.weight", 0, false},
          {"head.bias", 0, false}};
}

torch::Tensor UNetImpl::forward(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 4 && x.size(1) == shape().in_channels, "unet: expected input [batch, ", shape().in_channels,
              ", lat, lon], got ", x.sizes());
  const int64_t lat = x.size(2), lon = x.size(3);
  const int64_t m = grid_multiple();
  const int64_t pad_lat = (m - lat % m) % m, pad_lon = (m - lon % m) % m;

  std::vector<torch::Tensor> skips;
  skips.reserve(encoders_.size());
  for (size_t i = 0; i < encoders_.size(); ++i) {
    // The lambdas hold the blocks by shared_ptr (by value, see run_block) and call non-const forward.
    std::shared_ptr<ConvBlockImpl> enc = encoders_[i].ptr();
    if (i == 0) {
      // Padding inside the block: a checkpoint then keeps only the unpadded input.
      x = run_block(
          *enc,
          [enc, pad_lat, pad_lon](const torch::Tensor& in) {
            torch::Tensor padded = (pad_lat || pad_lon) ? torch::constant_pad_nd(in, {0, pad_lon, 0, pad_lat}) : in;
            return enc->forward(padded);
          },
          x);
    } else {
      x = run_block(*enc, [enc](const torch::Tensor& in) { return enc->forward(in); }, x);
    }
    skips.push_back(x);
  }
  for (size_t i = decoders_.size(); i-- > 0;) {
    std::shared_ptr<UpBlockImpl> dec = decoders_[i].ptr();
    x = run_block(
        *dec, [dec](const std::vector<torch::Tensor>& in) { return std::vector<torch::Tensor>{dec->forward(in[0], in[1])}; },
        {x, skips[i]})[0];
    skips[i] = torch::Tensor();  // the decoder (or its checkpoint) holds what it still needs
  }
  std::shared_ptr<torch::nn::Conv2dImpl> head = head_.ptr();
  return run_block(
      *head,
      [head, lat, lon](const torch::Tensor& in) {
        torch::Tensor out = ops::conv2d(torch::nn::Conv2d(head), in);
        if (out.size(2) == lat && out.size(3) == lon) return out;
        return out.slice(2, 0, lat).slice(3, 0, lon).contiguous();
      },
      x);
}

ModelEntry unet_entry() {
  // Convolutions and GroupNorm only: no GEMM on the GPU.
  return make_model_entry<UNetOptions, UNetImpl>(unet_schema(), &unet_parameter_count, &unet_activation_memory,
                                                 {/*gemms=*/false, /*convolutions=*/true});
}

}  // namespace wxtrain::models
