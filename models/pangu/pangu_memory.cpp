// estimate --analytic for Pangu-Weather (models/pangu/pangu.cpp), layer by layer.
#include <algorithm>
#include <string>

#include "models/pangu/pangu.h"

namespace wxtrain::models {
namespace {

// Pangu (pangu.cpp): the token grids of its stages and the window each stage runs (the
// configured one, cut to the grid unless model.fit_window = false), and the parameters layer by layer.
struct PanguGrid {
  int64_t V, Z, upper, Cs, Cso;  // upper-air variables, levels, their channels; surface-like in/out
  int64_t levels, h, w, h2, w2;  // token levels (surface + level patches); fine and coarse lat/lon
};

PanguGrid pangu_grid(const PanguOptions& c, const ModelShape& s) {
  PanguGrid g{};
  g.V = c.upper_variables;
  g.Z = c.levels;
  g.upper = g.V * g.Z;
  g.Cs = s.in_channels - g.upper;
  g.Cso = s.out_channels - g.upper;
  g.levels = 1 + (g.V > 0 ? ceil_div(g.Z, c.level_patch) : 0);
  g.h = ceil_div(s.lat, c.patch_size);
  g.w = ceil_div(s.lon, c.patch_size);
  g.h2 = ceil_div(g.h, 2);
  g.w2 = ceil_div(g.w, 2);
  return g;
}

// A stage's window on its grid (levels, lat, lon), its padded grid, and its window types
// (level windows x latitude windows: one bias table each).
// `shift`: the roll of its shifted blocks (pangu.cpp EarthSpecificBlockImpl).
struct PanguStage {
  int64_t window[3], padded[3], shift[3], types, tokens, padded_tokens, N;
};

PanguStage pangu_stage(const PanguOptions& c, int64_t levels, int64_t h, int64_t w) {
  PanguStage st{};
  const int64_t grid[3] = {levels, h, w};
  const Extent3 window = pangu_stage_window(c, {levels, h, w});
  for (size_t d = 0; d < 3; ++d) {
    st.window[d] = window[d];
    st.padded[d] = ceil_div(grid[d], st.window[d]) * st.window[d];
    st.shift[d] = c.window_shift.empty() ? (st.padded[d] > st.window[d] ? st.window[d] / 2 : 0) : c.window_shift[d];
  }
  st.types = (st.padded[0] / st.window[0]) * (st.padded[1] / st.window[1]);
  st.tokens = levels * h * w;
  st.padded_tokens = st.padded[0] * st.padded[1] * st.padded[2];
  st.N = st.window[0] * st.window[1] * st.window[2];
  return st;
}

int64_t earth_block_params(const PanguOptions& c, int64_t dim, int64_t heads, const PanguStage& st) {
  const int64_t hidden = static_cast<int64_t>(static_cast<double>(dim) * c.mlp_ratio);
  const int64_t table = st.window[0] * st.window[0] * st.window[1] * st.window[1] * (2 * st.window[2] - 1);
  return linear_params(dim, 3 * dim) + linear_params(dim, dim) + table * st.types * heads + norm_params(dim) +
         linear_params(dim, hidden) + linear_params(hidden, dim) + norm_params(dim);
}

// Pangu (pangu.cpp). Per sample: a stage has n tokens of width C, P after padding to whole
// windows, windows of N tokens and H heads. An Earth-specific block copies its input into the padded,
// rolled windows (what qkv saves), splits q, k, v into contiguous copies, and its attention runs
// ATen's math path spelled out (pangu.cpp window_attention_math, the CPU's always): it keeps
// the scaled q and k, v, and the softmax of the windows' scores, P x H x N. Under autocast the GPU
// step takes that softmax in fp32, as CUDA's autocast does (ops::cuda_autocast_fp32): the
// bf16 scores cast up (a temporary), the fp32 output saved and its bf16 copy saved again by the
// attn x v matmul. The gathered bias (+ mask), [types x H, N, N], is saved by nothing (its
// gradient is the scores' own). Back on the grid, norm1 is post-norm on the cropped attention
// output, norm2 on the MLP's output: both are Linear outputs, which CUDA's autocast casts up to
// fp32 for the LayerNorm (the fp32 copy is what it saves), and the norms' fp32 outputs make the
// residual sums fp32: a block's output is fp32, its input too except for a stage's first block,
// which reads the bf16 output of a Linear (the embedding, patch merging, up-sampling). On a GPU,
// SDPA's memory-efficient kernels do not materialise the scores (docs/estimator.md, Limits).
Block earth_block(const std::string& name, const PanguOptions& c, const Widths& w, int64_t dim, int64_t heads,
                  const PanguStage& st, double input_width) {
  const double n = static_cast<double>(st.tokens), P = static_cast<double>(st.padded_tokens);
  const double C = static_cast<double>(dim), nC = n * C, PC = P * C;
  const double hidden = static_cast<double>(static_cast<int64_t>(static_cast<double>(dim) * c.mlp_ratio));
  const double scores = P * static_cast<double>(heads) * static_cast<double>(st.N);
  const double stream = w.high, in = input_width;
  Block b;
  b.name = name;
  // pad, roll and the windows' permute: copies of the input; qkv saves the last (a bf16 copy under autocast).
  b.layers.push_back({"pad/roll/windows", 0, nC * in, 3 * PC * in});
  b.layers.push_back(conv_or_linear(w, PC, 3 * PC));                                          // qkv
  b.layers.push_back({"q, k, v", 3 * PC * w.low, 3 * PC * w.low, 6 * PC * w.low});  // copies, the scaled q and k
  b.layers.push_back({"scores + bias", 0, scores * w.low, scores * w.low});
  if (w.low < w.high) {
    // fp32 softmax: its output saved, the bf16 copy the matmul saves; backward holds the fp32
    // gradient and its bf16 cast for the scores' matmul (as the ViT's, vit_memory).
    b.layers.push_back({"softmax", scores * w.high, scores * (w.high + w.low), scores * (w.high + w.high)});
    b.layers.push_back({"matmul attn v", scores * w.low, scores * w.low, 2 * PC * w.low});
  } else {
    b.layers.push_back(softmax(scores, w.low));
    b.layers.push_back({"matmul attn v", 0, scores * w.low, 2 * PC * w.low});
  }
  b.layers.push_back(conv_or_linear(w, PC, PC));  // proj on the merged heads (a copy)
  // Windows back, roll back, crop; norm1 on its (fp32) contiguous copy, then the residual sum.
  b.layers.push_back({"windows back", 0, PC * w.low, 2 * PC * w.low});
  b.layers.push_back(norm(w, nC, n));
  b.layers.push_back(conv_or_linear(w, nC, n * hidden));  // fc1 on the residual sum
  b.layers.push_back(activation(n * hidden, w.low));      // gelu
  b.layers.push_back(conv_or_linear(w, n * hidden, nC));  // fc2
  b.layers.push_back(norm(w, nC, n));                     // norm2, on fc2's output cast up
  b.inputs = nC * in;
  b.carry = nC * stream;  // the residual branch's gradient
  b.output_grad = nC * stream;
  b.output = nC * stream;
  b.weights = static_cast<double>(linear_params(dim, 3 * dim) + linear_params(dim, dim) +
                                  linear_params(dim, static_cast<int64_t>(hidden)) +
                                  linear_params(static_cast<int64_t>(hidden), dim));
  return b;
}

}  // namespace

int64_t pangu_parameter_count(const PanguOptions& c, const ModelShape& s) {
  const PanguGrid g = pangu_grid(c, s);
  const int64_t D = c.embed_dim, p = c.patch_size, pz = c.level_patch;
  const PanguStage fine = pangu_stage(c, g.levels, g.h, g.w), coarse = pangu_stage(c, g.levels, g.h2, g.w2);
  // The patch embedding: the pseudocode's Conv3d (V -> D, kernel pz x p x p) and Conv2d (Cs -> D).
  int64_t n = (g.V > 0 ? linear_params(g.V * pz * p * p, D) : 0) + linear_params(g.Cs * p * p, D);
  n += c.stage_depths[0] * earth_block_params(c, D, c.stage_heads[0], fine);
  n += norm_params(4 * D) + linear_params(4 * D, 2 * D, false);  // downsample
  n += c.stage_depths[1] * earth_block_params(c, 2 * D, c.stage_heads[1], coarse);
  n += c.stage_depths[2] * earth_block_params(c, 2 * D, c.stage_heads[2], coarse);
  n += linear_params(2 * D, 4 * D, false) + norm_params(D) + linear_params(D, D, false);  // upsample
  n += c.stage_depths[3] * earth_block_params(c, D, c.stage_heads[3], fine);
  // Patch recovery on the 2D-wide concatenation: the transposed convolutions' weights, a bias per channel.
  if (g.V > 0) n += linear_params(2 * D, g.V * pz * p * p, false) + g.V;
  if (g.Cso > 0) n += linear_params(2 * D, g.Cso * p * p, false) + g.Cso;
  return n;
}

ModelMemory pangu_activation_memory(const PanguOptions& c, const ModelShape& s, const FormulaSettings& f) {
  const Widths& w = f.widths;
  ModelMemory m;
  const PanguGrid g = pangu_grid(c, s);
  const int64_t D = c.embed_dim, p = c.patch_size, pz = c.level_patch;
  const PanguStage fine = pangu_stage(c, g.levels, g.h, g.w), coarse = pangu_stage(c, g.levels, g.h2, g.w2);
  const double n1 = static_cast<double>(fine.tokens), n2 = static_cast<double>(coarse.tokens);
  const double hw = static_cast<double>(g.h * g.w), zu = static_cast<double>(g.levels - 1);
  const double D_ = static_cast<double>(D), stream = w.high;  // see earth_block

  // The embedding: the surface-like channels' concatenation (fp32), each half's patches (copies the
  // Linears save), the tokens' concatenation.
  Block embed;
  embed.name = "embed";
  const double surface_patches = static_cast<double>(g.Cs * p * p) * hw;
  const double upper_patches = static_cast<double>(g.V * pz * p * p) * hw * zu;
  embed.layers.push_back({"split", 0, 0, static_cast<double>(g.Cs) * s.lat * s.lon * 4});
  embed.layers.push_back(conv_or_linear(w, surface_patches, hw * D_));
  if (g.V > 0) embed.layers.push_back(conv_or_linear(w, upper_patches, hw * zu * D_));
  embed.layers.push_back({"cat", 0, n1 * D_ * w.low, n1 * D_ * w.low});
  embed.output = embed.output_grad = n1 * D_ * w.low;
  embed.weights = static_cast<double>((g.V > 0 ? linear_params(g.V * pz * p * p, D) : 0) + linear_params(g.Cs * p * p, D));
  m.blocks.push_back(embed);

  auto stage = [&](int number, int64_t dim, const PanguStage& st) {
    for (int64_t i = 0; i < c.stage_depths[static_cast<size_t>(number - 1)]; ++i)
      m.blocks.push_back(earth_block("layer" + std::to_string(number) + "_block" + std::to_string(i), c, w, dim,
                                     c.stage_heads[static_cast<size_t>(number - 1)], st, i == 0 ? w.low : stream));
  };
  stage(1, D, fine);

  // Patch merging: the merged copy (LayerNorm's input), the reduction. Layer 1's output is held
  // as the skip until the head.
  Block down;
  down.name = "downsample";
  const double merged = n2 * 4 * D_;
  down.layers.push_back(keep(n1 * D_, stream));
  down.layers.push_back({"merge", 0, n1 * D_ * stream, merged * stream});
  down.layers.push_back(norm(w, merged, n2));
  down.layers.push_back(conv_or_linear(w, merged, n2 * 2 * D_));
  down.inputs = n1 * D_ * stream;
  down.output = down.output_grad = n2 * 2 * D_ * w.low;
  down.weights = static_cast<double>(linear_params(4 * D, 2 * D, false));
  m.blocks.push_back(down);

  stage(2, 2 * D, coarse);
  stage(3, 2 * D, coarse);

  Block up;
  up.name = "upsample";
  const double expanded = n2 * 4 * D_;
  up.layers.push_back(conv_or_linear(w, n2 * 2 * D_, expanded));
  up.layers.push_back({"unmerge", 0, expanded * w.low, expanded * w.low});
  up.layers.push_back(norm(w, n1 * D_, n1));
  up.layers.push_back(conv_or_linear(w, n1 * D_, n1 * D_));
  up.inputs = n2 * 2 * D_ * stream;
  up.output = up.output_grad = n1 * D_ * w.low;
  up.weights = static_cast<double>(linear_params(2 * D, 4 * D, false) + linear_params(D, D, false));
  m.blocks.push_back(up);

  stage(4, D, fine);

  // Patch recovery: the skip and layer 4's output side by side, the upper levels' and the surface
  // level's slices copied for their Linears.
  Block head;
  head.name = "head";
  head.layers.push_back({"cat", 0, n1 * D_ * stream, n1 * 2 * D_ * stream});
  const double out_elems = static_cast<double>(s.out_channels) * s.lat * s.lon;
  if (g.V > 0) head.layers.push_back(conv_or_linear(w, hw * zu * 2 * D_, static_cast<double>(g.V * pz * p * p) * hw * zu));
  if (g.Cso > 0) head.layers.push_back(conv_or_linear(w, hw * 2 * D_, static_cast<double>(g.Cso * p * p) * hw));
  head.inputs = n1 * D_ * stream;
  head.output = head.output_grad = out_elems * w.low;
  head.weights = static_cast<double>((g.V > 0 ? linear_params(2 * D, g.V * pz * p * p, false) : 0) +
                                     (g.Cso > 0 ? linear_params(2 * D, g.Cso * p * p, false) : 0));
  m.blocks.push_back(head);
  m.output = out_elems;
  return m;
}

double pangu_buffer_bytes(const PanguOptions& c, const ModelShape& shape, double param_bytes) {
  // Each block's bias-table index (int64, N x N) and, in a block whose shift crosses a level or
  // latitude edge, its mask ([types, N, N] in the parameters' dtype); with model.shift_mask =
  // "all_edges", every shifted block's, one per longitude window.
  const PanguGrid g = pangu_grid(c, shape);
  double buffers = 0;
  for (int stage = 0; stage < 4; ++stage) {
    const bool fine = stage == 0 || stage == 3;
    const PanguStage st = pangu_stage(c, g.levels, fine ? g.h : g.h2, fine ? g.w : g.w2);
    const double NN = static_cast<double>(st.N * st.N);
    const bool all_edges = c.shift_mask == "all_edges";
    const bool masked = st.shift[0] > 0 || st.shift[1] > 0 || (all_edges && st.shift[2] > 0);
    const double masks = all_edges ? static_cast<double>(st.padded[2] / st.window[2]) : 1.0;
    const int64_t depth = c.stage_depths[static_cast<size_t>(stage)];
    buffers += static_cast<double>(depth) * NN * 8;
    if (masked) buffers += static_cast<double>(depth / 2) * masks * static_cast<double>(st.types) * NN * param_bytes;
  }
  return buffers;
}

}  // namespace wxtrain::models
