// estimate --analytic for the U-Net (models/unet/unet.cpp), layer by layer.
#include <string>

#include "models/unet/unet.h"

namespace wxtrain::models {
namespace {

// ConvBlock: 3x3 conv (no bias), GN, 3x3 conv, GN.
int64_t conv_block_params(int64_t in, int64_t out) {
  return conv_params(in, out, 3, false) + norm_params(out) + conv_params(out, out, 3, false) + norm_params(out);
}

// U-Net ConvBlock: [maxpool] conv3x3 GN SiLU conv3x3 GN SiLU. GroupNorm runs in fp32 (the model
// casts the bf16 conv output up), so under autocast every conv input is a fresh bf16 copy.
Block conv_block(const std::string& name, const Widths& w, int64_t in_ch, int64_t out_ch, double pixels,
                 int64_t groups, bool downsample) {
  Block b;
  b.name = name;
  if (downsample) b.layers.push_back(max_pool(in_ch * pixels * 4, w.high));
  const double out = static_cast<double>(out_ch) * pixels;
  b.layers.push_back(conv_or_linear(w, in_ch * pixels, out));
  b.layers.push_back(norm(w, out, static_cast<double>(groups)));
  b.layers.push_back(activation(out, w.high));
  b.layers.push_back(conv_or_linear(w, out, out));
  b.layers.push_back(norm(w, out, static_cast<double>(groups)));
  b.layers.push_back(activation(out, w.high));
  b.weights = static_cast<double>(conv_params(in_ch, out_ch, 3, false) + conv_params(out_ch, out_ch, 3, false));
  return b;
}

}  // namespace

int64_t unet_parameter_count(const UNetOptions& c, const ModelShape& s) {
  const auto& ch = c.channels;
  int64_t n = 0;
  for (size_t i = 0; i < ch.size(); ++i) n += conv_block_params(i == 0 ? s.in_channels : ch[i - 1], ch[i]);
  for (size_t i = 0; i + 1 < ch.size(); ++i) n += conv_block_params(ch[i + 1] + ch[i], ch[i]);
  return n + conv_params(ch[0], s.out_channels, 1, true);
}

ModelMemory unet_activation_memory(const UNetOptions& c, const ModelShape& s, const FormulaSettings& f) {
  const Widths& w = f.widths;
  ModelMemory m;
  const auto& ch = c.channels;
  const size_t levels = ch.size();
  const int64_t mult = int64_t{1} << (levels - 1);
  const int64_t lat = ceil_div(s.lat, mult) * mult, lon = ceil_div(s.lon, mult) * mult;
  auto pixels = [&](size_t level) { return static_cast<double>((lat >> level) * (lon >> level)); };
  auto cat_grad = [&](size_t i) { return (ch[i + 1] + ch[i]) * pixels(i) * w.high; };
  for (size_t i = 0; i < levels; ++i) {
    const int64_t in = i == 0 ? s.in_channels : ch[i - 1];
    Block b = conv_block("encoder" + std::to_string(i), w, in, ch[i], pixels(i), c.groups, i > 0);
    if (i == 0) b.layers.front().temp += in * pixels(0) * w.high;  // the padded input (or its cast)
    // Kept for the next encoder's max_pool and the decoder's cat (the deepest feeds only the upsample).
    if (i + 1 < levels) b.layers.push_back(keep(ch[i] * pixels(i), w.high));
    else b.output = ch[i] * pixels(i) * w.high;
    b.output_grad = ch[i] * pixels(i) * w.high;
    b.inputs = i == 0 ? 0 : ch[i - 1] * pixels(i - 1) * w.high;  // the model input is a batch tensor
    // The skip gradients of all decoders wait for their encoders.
    for (size_t j = i; j + 1 < levels; ++j) b.carry += cat_grad(j);
    m.blocks.push_back(b);
  }
  for (size_t i = levels - 1; i-- > 0;) {
    Block b = conv_block("decoder" + std::to_string(i), w, ch[i + 1] + ch[i], ch[i], pixels(i), c.groups, false);
    // upsample + cat: the upsampled copy lives through the block's forward.
    b.layers.insert(b.layers.begin(), gather(ch[i + 1] * pixels(i + 1), w.high, ch[i + 1] * pixels(i) * w.high));
    b.inputs = ch[i + 1] * pixels(i + 1) * w.high;  // the coarse input; the skip is counted at its encoder
    b.forward_temp = ch[i + 1] * pixels(i) * w.high;  // the upsampled copy lives until the ConvBlock returns
    for (size_t j = 0; j < i; ++j) b.carry += cat_grad(j);
    b.output = b.output_grad = ch[i] * pixels(i) * w.high;
    m.blocks.push_back(b);
  }
  Block head;
  head.name = "head";
  head.layers.push_back(keep(ch[0] * pixels(0), w.high));  // decoder0's output, the head conv's input
  head.layers.push_back(conv_or_linear(w, ch[0] * pixels(0), s.out_channels * pixels(0)));
  head.inputs = ch[0] * pixels(0) * w.high;
  head.output = s.out_channels * pixels(0) * w.low;
  head.output_grad = s.out_channels * pixels(0) * w.high;
  head.weights = static_cast<double>(conv_params(ch[0], s.out_channels, 1, true));
  m.blocks.push_back(head);
  m.output = static_cast<double>(s.out_channels) * s.lat * s.lon;
  return m;
}

}  // namespace wxtrain::models
