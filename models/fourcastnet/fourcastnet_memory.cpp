// estimate --analytic for FourCastNet (models/fourcastnet/fourcastnet.cpp), layer by layer.
#include <string>

#include "models/fourcastnet/fourcastnet.h"

namespace wxtrain::models {
namespace {

// FourCastNet (models/fourcastnet/fourcastnet.cpp): the ViT's patch embedding, AFNO blocks (LayerNorm, the
// AFNO2D filter's w1, b1, w2, b2 in real and imaginary parts, LayerNorm, MLP), a bias-free head and
// no final norm.
int64_t afno_filter_params(const FourCastNetOptions& c) {
  const int64_t D = c.embed_dim, nb = c.afno_blocks, bs = D / nb;  // hidden_size_factor 1
  return 2 * nb * bs * bs + 2 * nb * bs + 2 * nb * bs * bs + 2 * nb * bs;  // w1, b1, w2, b2
}

}  // namespace

int64_t fourcastnet_parameter_count(const FourCastNetOptions& c, const ModelShape& s) {
  const int64_t D = c.embed_dim, p = c.patch_size, hidden = mlp_hidden(c.embed_dim, c.mlp_ratio);
  const int64_t patches = ceil_div(s.lat, p) * ceil_div(s.lon, p);
  const int64_t embed = conv_params(s.in_channels, D, p, true) + patches * D;  // + pos_embed
  const int64_t block = norm_params(D) + afno_filter_params(c) + norm_params(D) + linear_params(D, hidden) +
                        linear_params(hidden, D);
  const int64_t head = linear_params(D, p * p * s.out_channels, false);
  return embed + c.depth * block + head;
}

// FourCastNet (models/fourcastnet/fourcastnet.cpp): the ViT's embedding, AFNO blocks on the [nh, nw] patch
// grid, a bias-free head on the last block's output. The spectral filter runs in fp32 whatever the
// precision (autocast off around the FFTs), so its tensors are 4 bytes per real element; a complex
// mode is two. M modes per channel: nh x (nw/2 + 1).
ModelMemory fourcastnet_activation_memory(const FourCastNetOptions& c, const ModelShape& s, const FormulaSettings& f) {
  const Widths& w = f.widths;
  ModelMemory m;
  const int64_t p = c.patch_size, D = c.embed_dim, hidden = mlp_hidden(c.embed_dim, c.mlp_ratio);
  const int64_t nh = ceil_div(s.lat, p), nw = ceil_div(s.lon, p);
  const double N = static_cast<double>(nh * nw), M = static_cast<double>(nh * (nw / 2 + 1));
  const double ND = N * D, NH = N * hidden;
  const double modes = 2 * M * D * 4;  // bytes of one fp32 complex [M, D] (or real [M, 2D]) tensor
  const double stream = w.high;

  m.blocks.push_back(patch_embed_block(s.in_channels, w, p, D, N, stream));

  const double D_ = static_cast<double>(D), nb = static_cast<double>(c.afno_blocks), bs = D_ / nb;
  for (int64_t i = 0; i < c.depth; ++i) {
    Block b;
    b.name = "block" + std::to_string(i);
    // x + filter(norm1(x)) + norm1(x): norm1's input is the block input.
    b.layers.push_back({"norm", 8 * N, ND * stream, ND * stream});
    // rfft2 and irfft2 are linear: they save nothing but sizes.
    b.layers.push_back({"rfft2", 0, ND * 4, modes});
    // [re | im] per block (a copy), saved by the first block matmul; bias add, ReLU saves its output,
    // which the second matmul saves too; bias add; softshrink saves its input.
    b.layers.push_back({"spectral matmul", modes, modes, 2 * modes});
    b.layers.push_back({"relu", modes, modes, modes});
    b.layers.push_back({"spectral matmul", 0, modes, 2 * modes});
    b.layers.push_back({"softshrink", modes, modes, modes});
    // The complex view's contiguous copy, irfft2's output, the two skip sums.
    b.layers.push_back({"irfft2", 0, modes, modes + ND * 4 + ND * stream});
    add_mlp_half(b, w, N, ND, NH, stream);  // norm2 keeps the double skip's sum
    b.inputs = ND * stream;
    b.carry = ND * stream;  // the residual branch's gradient
    b.output_grad = ND * stream;
    b.weights = static_cast<double>(linear_params(D, hidden) + linear_params(hidden, D));
    // The [[re, im], [-im, re]] fp32 weights the spectral matmuls save: batch-independent.
    b.fixed_saved = 2 * nb * (2 * bs) * (2 * bs) * 4;
    m.blocks.push_back(b);
  }

  Block head;
  head.name = "head";
  // The last block's output is its input: kept already in fp32, a fresh bf16 copy under autocast.
  head.layers.push_back({"conv/linear", w.autocast ? ND * w.low : 0, ND * w.high, N * p * p * s.out_channels * w.low});
  head.weights = static_cast<double>(linear_params(D, p * p * s.out_channels, false));
  head.output = head.output_grad = N * p * p * s.out_channels * w.low;
  m.blocks.push_back(head);
  m.output = static_cast<double>(s.out_channels) * s.lat * s.lon;
  return m;
}

}  // namespace wxtrain::models
