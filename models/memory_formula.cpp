#include "models/memory_formula.h"

namespace wxtrain::models {

Widths widths(Precision p) {
  switch (p) {
    case Precision::kFp32: return {4, 4, false};
    case Precision::kBf16Mixed:
    case Precision::kFp16Mixed: return {2, 4, true};
    case Precision::kBf16: return {2, 2, false};
  }
  return {4, 4, false};
}

void add_mlp_half(Block& b, const Widths& w, double N, double ND, double NH, double stream) {
  b.layers.push_back(norm(w, ND, N));
  b.layers.push_back(conv_or_linear(w, ND, NH));  // fc1
  b.layers.push_back(activation(NH, w.low));      // gelu
  b.layers.push_back(conv_or_linear(w, NH, ND));  // fc2
  b.layers.push_back(keep(ND, stream));           // the block output
}

Block patch_embed_block(int64_t in_channels, const Widths& w, int64_t p, int64_t D, double N, double stream) {
  const double ND = N * static_cast<double>(D);
  Block embed;
  embed.name = "embed";
  embed.layers.push_back(conv_or_linear(w, static_cast<double>(in_channels) * N * p * p, ND));
  embed.layers.back().temp += in_channels * N * p * p * w.high;  // the padded input
  embed.layers.push_back(keep(ND, stream));
  embed.output_grad = ND * stream;
  embed.weights = static_cast<double>(conv_params(in_channels, D, p, true));
  return embed;
}

}  // namespace wxtrain::models
