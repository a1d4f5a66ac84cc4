#include "estimator/analytic.h"

#include <algorithm>
#include <mutex>
#include <tuple>
#include <string>
#include <vector>

#include "core/error.h"
#include "estimator/model_states.h"
#include "models/graphcast.h"

// The memory model as a table (llm.c style): every zoo block is a list of layers, and every layer
// kind has one function saying what autograd keeps of it for backward. Sizes are per sample in
// elements; widths turn them into bytes for the run's precision. What is summed, and how
// checkpointing, rollout and accumulation combine the blocks, is in analytic_activations() below.

namespace wxtrain::estimator {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------------------------
// Parameter counts (exact; they follow models/{unet,vit,gnn}.cpp layer by layer).

int64_t conv_params(int64_t in, int64_t out, int64_t k, bool bias) { return in * out * k * k + (bias ? out : 0); }
int64_t linear_params(int64_t in, int64_t out, bool bias = true) { return in * out + (bias ? out : 0); }
int64_t norm_params(int64_t channels) { return 2 * channels; }  // GroupNorm / LayerNorm: weight + bias

int64_t conv_block_params(int64_t in, int64_t out) {  // unet ConvBlock: 3x3 conv (no bias), GN, 3x3 conv, GN
  return conv_params(in, out, 3, false) + norm_params(out) + conv_params(out, out, 3, false) + norm_params(out);
}

int64_t unet_params(const ModelConfig& c, const models::ModelShape& s) {
  const auto& ch = c.channels;
  int64_t n = 0;
  for (size_t i = 0; i < ch.size(); ++i) n += conv_block_params(i == 0 ? s.in_channels : ch[i - 1], ch[i]);
  for (size_t i = 0; i + 1 < ch.size(); ++i) n += conv_block_params(ch[i + 1] + ch[i], ch[i]);
  return n + conv_params(ch[0], s.out_channels, 1, true);
}

int64_t mlp_hidden(const ModelConfig& c) { return static_cast<int64_t>(static_cast<double>(c.embed_dim) * c.mlp_ratio); }

int64_t vit_params(const ModelConfig& c, const models::ModelShape& s) {
  const int64_t D = c.embed_dim, p = c.patch_size, hidden = mlp_hidden(c);
  const int64_t patches = ceil_div(s.lat, p) * ceil_div(s.lon, p);
  const int64_t embed = conv_params(s.in_channels, D, p, true) + patches * D;  // + pos_embed
  const int64_t block = norm_params(D) + linear_params(D, 3 * D) + linear_params(D, D) + norm_params(D) +
                        linear_params(D, hidden) + linear_params(hidden, D);
  const int64_t head = norm_params(D) + linear_params(D, p * p * s.out_channels);
  return embed + c.depth * block + head;
}

// FourCastNet (models/fourcastnet.cpp): the ViT's patch embedding, AFNO blocks (LayerNorm, the
// AFNO2D filter's w1, b1, w2, b2 in real and imaginary parts, LayerNorm, MLP), a bias-free head and
// no final norm.
int64_t afno_filter_params(const ModelConfig& c) {
  const int64_t D = c.embed_dim, nb = c.afno_blocks, bs = D / nb;  // hidden_size_factor 1
  return 2 * nb * bs * bs + 2 * nb * bs + 2 * nb * bs * bs + 2 * nb * bs;  // w1, b1, w2, b2
}

int64_t fourcastnet_params(const ModelConfig& c, const models::ModelShape& s) {
  const int64_t D = c.embed_dim, p = c.patch_size, hidden = mlp_hidden(c);
  const int64_t patches = ceil_div(s.lat, p) * ceil_div(s.lon, p);
  const int64_t embed = conv_params(s.in_channels, D, p, true) + patches * D;  // + pos_embed
  const int64_t block = norm_params(D) + afno_filter_params(c) + norm_params(D) + linear_params(D, hidden) +
                        linear_params(hidden, D);
  const int64_t head = linear_params(D, p * p * s.out_channels, false);
  return embed + c.depth * block + head;
}

// Pangu (models/pangu.cpp): the token grids of its stages and the window each stage runs (the
// configured one, cut to the grid), and the parameters layer by layer.
struct PanguGrid {
  int64_t V, Z, upper, Cs, Cso;  // upper-air variables, levels, their channels; surface-like in/out
  int64_t levels, h, w, h2, w2;  // token levels (surface + level patches); fine and coarse lat/lon
};

PanguGrid pangu_grid(const ModelConfig& c, const models::ModelShape& s) {
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
struct PanguStage {
  int64_t window[3], padded[3], types, tokens, padded_tokens, N;
};

PanguStage pangu_stage(const ModelConfig& c, int64_t levels, int64_t h, int64_t w) {
  PanguStage st{};
  const int64_t grid[3] = {levels, h, w};
  for (int d = 0; d < 3; ++d) {
    st.window[d] = std::min(c.window[static_cast<size_t>(d)], grid[d]);
    st.padded[d] = ceil_div(grid[d], st.window[d]) * st.window[d];
  }
  st.types = (st.padded[0] / st.window[0]) * (st.padded[1] / st.window[1]);
  st.tokens = levels * h * w;
  st.padded_tokens = st.padded[0] * st.padded[1] * st.padded[2];
  st.N = st.window[0] * st.window[1] * st.window[2];
  return st;
}

int64_t earth_block_params(const ModelConfig& c, int64_t dim, int64_t heads, const PanguStage& st) {
  const int64_t hidden = static_cast<int64_t>(static_cast<double>(dim) * c.mlp_ratio);
  const int64_t table = st.window[0] * st.window[0] * st.window[1] * st.window[1] * (2 * st.window[2] - 1);
  return linear_params(dim, 3 * dim) + linear_params(dim, dim) + table * st.types * heads + norm_params(dim) +
         linear_params(dim, hidden) + linear_params(hidden, dim) + norm_params(dim);
}

int64_t pangu_params(const ModelConfig& c, const models::ModelShape& s) {
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

// GraphMLP: one Linear per input (bias on the first only) summed, then layers-1 Linears, then an
// optional LayerNorm.
int64_t graph_mlp_params(const std::vector<int64_t>& in, int64_t hidden, int64_t out, int64_t layers, bool norm) {
  const int64_t first_out = layers == 1 ? out : hidden;
  int64_t n = 0;
  for (size_t k = 0; k < in.size(); ++k) n += linear_params(in[k], first_out, k == 0);
  for (int64_t i = 1; i < layers; ++i) n += linear_params(hidden, i + 1 == layers ? out : hidden);
  return n + (norm ? norm_params(out) : 0);
}

int64_t gnn_params(const ModelConfig& c, const models::ModelShape& s) {
  const int64_t L = c.latent, m = c.mlp_layers;
  const int64_t encoder = graph_mlp_params({s.in_channels, 2}, L, L, m, true) + graph_mlp_params({3}, L, L, m, true);
  const int64_t layer = graph_mlp_params({L, L, L}, L, L, m, true) + graph_mlp_params({L, L}, L, L, m, true);
  const int64_t decoder = graph_mlp_params({L}, L, s.out_channels, m, false);
  return encoder + c.processor_layers * layer + decoder;  // the graph itself is buffers, not parameters
}

// GraphCast (models/graphcast.cpp): GraphMLPs throughout. grid2mesh: embeddings of the grid nodes
// (variables + 3 positional features), mesh nodes (3), grid2mesh and mesh edges (4 each), the edge
// MLP on [e, h_grid, h_mesh], the mesh node MLP on [h, sum], the grid node MLP on h; a processor
// layer: the gnn's InteractionLayer; mesh2grid: the mesh2grid edge embedding, edge MLP, grid node
// MLP and the output MLP without LayerNorm. The graph is buffers.
int64_t graphcast_params(const ModelConfig& c, const models::ModelShape& s) {
  const int64_t L = c.latent, m = c.mlp_layers;
  auto mlp = [&](const std::vector<int64_t>& in, int64_t out = -1, bool norm = true) {
    return graph_mlp_params(in, L, out < 0 ? L : out, m, norm);
  };
  const int64_t grid2mesh = mlp({s.in_channels, 3}) + mlp({3}) + 2 * mlp({4}) + mlp({L, L, L}) + mlp({L, L}) + mlp({L});
  const int64_t processor = mlp({L, L, L}) + mlp({L, L});
  const int64_t mesh2grid = mlp({4}) + mlp({L, L, L}) + mlp({L, L}) + mlp({L}, s.out_channels, false);
  return grid2mesh + c.processor_layers * processor + mesh2grid;
}

// The sizes of GraphCast's graph for a run: built as the model builds it (fast: a spatial index),
// cached for the last (grid, refinement) asked, since the activations and the buffers both need it.
struct GraphCastSizes {
  double grid = 0, mesh = 0, g2m = 0, mesh_edges = 0, m2g = 0;
};
GraphCastSizes graphcast_sizes(const ModelConfig& c, const models::ModelShape& s) {
  static std::mutex mutex;
  static std::tuple<std::vector<double>, std::vector<double>, int64_t> key;
  static GraphCastSizes cached;
  auto [lat, lon] = models::graphcast_grid(s);
  std::lock_guard<std::mutex> lock(mutex);
  if (std::get<0>(key) == lat && std::get<1>(key) == lon && std::get<2>(key) == c.mesh_refinement) return cached;
  const models::GraphCastGraph g = models::build_graphcast_graph(lat, lon, c.mesh_refinement);
  cached = {static_cast<double>(g.grid_nodes), static_cast<double>(g.mesh_nodes),
            static_cast<double>(g.g2m_senders.size(0)), static_cast<double>(g.mesh_senders.size(0)),
            static_cast<double>(g.m2g_senders.size(0))};
  key = {std::move(lat), std::move(lon), c.mesh_refinement};
  return cached;
}

// Edges of the grid graph (models/gnn.cpp build_grid_graph): every cell within `radius` in both
// directions, the centre excepted, clipped at the grid's borders.
int64_t grid_edges(int64_t lat, int64_t lon, int64_t radius) {
  int64_t e = 0;
  for (int64_t dy = -radius; dy <= radius; ++dy)
    for (int64_t dx = -radius; dx <= radius; ++dx)
      if (dy != 0 || dx != 0) e += std::max<int64_t>(0, lat - std::abs(dy)) * std::max<int64_t>(0, lon - std::abs(dx));
  return e;
}

// ---------------------------------------------------------------------------------------------
// Element widths of a precision.

struct Widths {
  double low;     // conv/linear/matmul operands and outputs: bf16 under autocast and in pure bf16
  double high;    // what autocast leaves in the parameters' dtype: norms, residual stream, loss
  bool autocast;  // conv/linear inputs are saved as fresh bf16 copies, and so are the weights
};

Widths widths(Precision p) {
  switch (p) {
    case Precision::kFp32: return {4, 4, false};
    case Precision::kBf16Mixed:
    case Precision::kFp16Mixed: return {2, 4, true};
    case Precision::kBf16: return {2, 2, false};
  }
  return {4, 4, false};
}

// ---------------------------------------------------------------------------------------------
// The table. A block is its layers in forward order; per layer, per sample, in bytes:
//   saved: what autograd keeps of it until its backward runs;
//   grad:  the gradient it produces for its input (allocated while its output's gradient lives);
//   temp:  what its forward allocates beyond `saved` (outputs nothing keeps, copies), alive only
//          while it runs — matters when a checkpointed block is replayed.
// grad < 0 marks a pure keep (a tensor held for a later block): the flowing gradient passes.

struct Layer {
  const char* kind;
  double saved = 0;
  double grad = 0;
  double temp = 0;
};

struct Block {
  std::string name;
  std::vector<Layer> layers;
  double inputs = 0;       // what its checkpoint keeps: its inputs, unless another block's already
  double carry = 0;        // gradients held during its backward (residual and skip branches)
  double fixed_saved = 0;  // batch-independent saved bytes (the gnn's edge latents)
  double fixed_kept = 0;   // of those, what its checkpoint keeps (its batch-independent outputs)
  double forward_temp = 0; // alive through its whole forward (a local the block's layers run under)
  double weights = 0;      // conv/linear parameters: autocast saves their bf16 copies
  double output = 0;       // bytes it returns that none of its layers keeps (held by a replay)
  double output_grad = 0;  // bytes of the gradients arriving at its outputs
  double replay_grads = 0; // measured extra gradients in flight when it runs as a checkpoint replay
  double saved() const {
    double s = 0;
    for (const Layer& l : layers) s += l.saved;
    return s;
  }
};

// The layer kinds. `in` / `out` are per-sample element counts of the layer's input / output.
// Conv2d / Linear / the operand of a matmul: saves its input — under autocast a fresh bf16 copy.
Layer conv_or_linear(const Widths& w, double in, double out) { return {"conv/linear", in * w.low, in * w.high, out * w.low}; }
// GroupNorm / LayerNorm: the input (cast up to the parameters' dtype) and fp32 mean and rstd per group.
Layer norm(const Widths& w, double in, double groups) { return {"norm", in * w.high + 8 * groups, in * w.high, in * w.high}; }
// SiLU / GELU: the input, in the width it runs in.
Layer activation(double in, double width) { return {"activation", in * width, in * width, in * width}; }
// Softmax: its output.
Layer softmax(double elems, double width) { return {"softmax", elems * width, elems * width, elems * width}; }
// max_pool2d: int64 indices per output element (its input is the previous block's kept output).
Layer max_pool(double in, double width) { return {"max_pool", in / 4 * 8, in * width, in / 4 * width}; }
// A tensor the next block (or a skip connection) keeps: the block's output.
Layer keep(double elems, double width) { return {"keep", elems * width, -1, 0}; }
// index_select / index_add / cat / upsample / residual add: save only indices or sizes; their
// backward allocates a gradient of the input's size.
Layer gather(double in, double width, double out_temp = 0) { return {"gather", 0, in * width, out_temp}; }

// ---------------------------------------------------------------------------------------------
// The zoo, block by block (models/unet.cpp, vit.cpp, gnn.cpp, fourcastnet.cpp).

struct ModelMemory {
  std::vector<Block> blocks;
  double output = 0;  // per sample elements of one predicted state
};

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

ModelMemory unet_memory(const ModelConfig& c, const models::ModelShape& s, const Widths& w) {
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

// The MLP half both the ViT's and FourCastNet's blocks end with, x + fc2(gelu(fc1(norm2(x)))),
// on N tokens (ND = N x width, NH = N x hidden), and the block output kept in the stream's width.
void add_mlp_half(Block& b, const Widths& w, double N, double ND, double NH, double stream) {
  b.layers.push_back(norm(w, ND, N));
  b.layers.push_back(conv_or_linear(w, ND, NH));  // fc1
  b.layers.push_back(activation(NH, w.low));      // gelu
  b.layers.push_back(conv_or_linear(w, NH, ND));  // fc2
  b.layers.push_back(keep(ND, stream));           // the block output
}

// The patch embedding the ViT and FourCastNet share: a p x p conv with stride p from the padded
// input to N tokens of width D, plus the positional embedding promoting the stream to `stream`.
Block patch_embed_block(const models::ModelShape& s, const Widths& w, int64_t p, int64_t D, double N, double stream) {
  const double ND = N * static_cast<double>(D);
  Block embed;
  embed.name = "embed";
  embed.layers.push_back(conv_or_linear(w, static_cast<double>(s.in_channels) * N * p * p, ND));
  embed.layers.back().temp += s.in_channels * N * p * p * w.high;  // the padded input
  embed.layers.push_back(keep(ND, stream));
  embed.output_grad = ND * stream;
  embed.weights = static_cast<double>(conv_params(s.in_channels, D, p, true));
  return embed;
}

ModelMemory vit_memory(const ModelConfig& c, const models::ModelShape& s, const Widths& w) {
  ModelMemory m;
  const int64_t p = c.patch_size, D = c.embed_dim, hidden = mlp_hidden(c);
  const double N = static_cast<double>(ceil_div(s.lat, p) * ceil_div(s.lon, p));
  const double ND = N * D, NH = N * hidden, scores = static_cast<double>(c.heads) * N * N;
  // The residual stream is fp32 under autocast: the bf16 patch tokens plus the fp32 pos_embed promote.
  const double stream = w.high;

  m.blocks.push_back(patch_embed_block(s, w, p, D, N, stream));

  for (int64_t i = 0; i < c.depth; ++i) {
    Block b;
    b.name = "block" + std::to_string(i);
    // x + proj(softmax(q k^T) v), q k v from qkv(norm1(x)); norm1's input is the block input.
    b.layers.push_back({"norm", 8 * N, ND * stream, ND * stream});
    b.layers.push_back(conv_or_linear(w, ND, 3 * ND));                   // qkv
    b.layers.push_back({"matmul q k", 2 * ND * w.low, 3 * ND * w.low, scores * w.low});  // contiguous q, k copies
    if (w.low < w.high) {
      // Under autocast the GPU step takes the softmax in fp32, as CUDA's autocast does
      // (models::cuda_autocast_fp32): the bf16 scores cast up (a temporary), the fp32 output saved,
      // and its bf16 copy saved again by the attn x v matmul; backward holds the fp32 gradient and
      // its bf16 cast for the scores' matmul. Within 2.3% of the trace (tests/estimator).
      b.layers.push_back({"softmax", scores * w.high, scores * (w.high + w.low), scores * (w.high + w.high)});
      b.layers.push_back({"matmul attn v", ND * w.low + scores * w.low, scores * w.low, ND * w.low + scores * w.low});
    } else {
      b.layers.push_back(softmax(scores, w.low));
      b.layers.push_back({"matmul attn v", ND * w.low, scores * w.low, ND * w.low});  // the v copy
    }
    b.layers.push_back(conv_or_linear(w, ND, ND));                        // proj on the merged heads (a copy)
    add_mlp_half(b, w, N, ND, NH, stream);  // norm2 keeps the first residual sum
    b.inputs = ND * stream;
    b.carry = ND * stream;  // the residual branch's gradient
    b.output_grad = ND * stream;
    b.weights = static_cast<double>(linear_params(D, 3 * D) + linear_params(D, D) + linear_params(D, hidden) +
                                    linear_params(hidden, D));
    m.blocks.push_back(b);
  }

  Block head;
  head.name = "head";
  head.layers.push_back(norm(w, 0, N));
  head.layers.push_back(conv_or_linear(w, ND, N * p * p * s.out_channels));
  head.weights = static_cast<double>(linear_params(D, p * p * s.out_channels));
  head.output = head.output_grad = N * p * p * s.out_channels * w.low;
  m.blocks.push_back(head);
  m.output = static_cast<double>(s.out_channels) * s.lat * s.lon;
  return m;
}

// FourCastNet (models/fourcastnet.cpp): the ViT's embedding, AFNO blocks on the [nh, nw] patch
// grid, a bias-free head on the last block's output. The spectral filter runs in fp32 whatever the
// precision (autocast off around the FFTs), so its tensors are 4 bytes per real element; a complex
// mode is two. M modes per channel: nh x (nw/2 + 1).
ModelMemory fourcastnet_memory(const ModelConfig& c, const models::ModelShape& s, const Widths& w) {
  ModelMemory m;
  const int64_t p = c.patch_size, D = c.embed_dim, hidden = mlp_hidden(c);
  const int64_t nh = ceil_div(s.lat, p), nw = ceil_div(s.lon, p);
  const double N = static_cast<double>(nh * nw), M = static_cast<double>(nh * (nw / 2 + 1));
  const double ND = N * D, NH = N * hidden;
  const double modes = 2 * M * D * 4;  // bytes of one fp32 complex [M, D] (or real [M, 2D]) tensor
  const double stream = w.high;

  m.blocks.push_back(patch_embed_block(s, w, p, D, N, stream));

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

// Pangu (models/pangu.cpp). Per sample: a stage has n tokens of width C, P after padding to whole
// windows, windows of N tokens and H heads. An Earth-specific block copies its input into the padded,
// rolled windows (what qkv saves), splits q, k, v into contiguous copies, and its attention runs
// ATen's math path spelled out (models/pangu.cpp window_attention_math, the CPU's always): it keeps
// the scaled q and k, v, and the softmax of the windows' scores, P x H x N. Under autocast the GPU
// step takes that softmax in fp32, as CUDA's autocast does (models::cuda_autocast_fp32): the
// bf16 scores cast up (a temporary), the fp32 output saved and its bf16 copy saved again by the
// attn x v matmul. The gathered bias (+ mask), [types x H, N, N], is saved by nothing (its
// gradient is the scores' own). Back on the grid, norm1 is post-norm on the cropped attention
// output, norm2 on the MLP's output: both are Linear outputs, which CUDA's autocast casts up to
// fp32 for the LayerNorm (the fp32 copy is what it saves), and the norms' fp32 outputs make the
// residual sums fp32: a block's output is fp32, its input too except for a stage's first block,
// which reads the bf16 output of a Linear (the embedding, patch merging, up-sampling). On a GPU,
// SDPA's memory-efficient kernels do not materialise the scores (docs/estimator.md, Limits).
Block earth_block(const std::string& name, const ModelConfig& c, const Widths& w, int64_t dim, int64_t heads,
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

ModelMemory pangu_memory(const ModelConfig& c, const models::ModelShape& s, const Widths& w) {
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

// GraphMLP: the summed input projections, then (layers - 1) x [SiLU, Linear], then LayerNorm.
// The SiLU runs in fp32 even under autocast (models/gnn.cpp: LibTorch 1.13's bf16 SiLU is slow).
void graph_mlp(Block& b, const Widths& w, double rows, double hidden, double out, int64_t layers, bool layer_norm) {
  for (int64_t i = 1; i < layers; ++i) {
    b.layers.push_back(activation(rows * hidden, w.high));
    b.layers.push_back(conv_or_linear(w, rows * hidden, rows * (i + 1 == layers ? out : hidden)));
  }
  if (layer_norm) b.layers.push_back(norm(w, rows * out, rows));
}

ModelMemory gnn_memory(const ModelConfig& c, const models::ModelShape& s, const Widths& w) {
  ModelMemory m;
  const double N = static_cast<double>(s.lat * s.lon);
  const double E = static_cast<double>(grid_edges(s.lat, s.lon, c.neighbourhood));
  const double L = static_cast<double>(c.latent);
  const int64_t layers = c.mlp_layers;

  Block enc;
  enc.name = "encoder";
  enc.layers.push_back(conv_or_linear(w, N * s.in_channels, N * L));  // the transposed input's contiguous copy
  graph_mlp(enc, w, N, L, L, layers, true);
  enc.layers.push_back(keep(N * L, w.high));
  enc.output_grad = N * L * w.high;
  // The edge MLP reads the batch-independent edge features: its activations are fixed.
  Block edges;
  graph_mlp(edges, w, E, L, L, layers, true);
  enc.fixed_saved = edges.saved() + E * L * w.high;
  enc.fixed_kept = E * L * w.high;
  enc.weights = static_cast<double>(graph_mlp_params({s.in_channels, 2}, c.latent, c.latent, layers, true) +
                                    graph_mlp_params({3}, c.latent, c.latent, layers, true));
  m.blocks.push_back(enc);

  for (int64_t i = 0; i < c.processor_layers; ++i) {
    Block b;
    b.name = "processor" + std::to_string(i);
    // Edge update: sender and receiver projections gathered onto the edges, plus the edge projection.
    b.layers.push_back(gather(N * L, w.high, 2 * E * L * w.low + N * L * w.low));
    graph_mlp(b, w, E, L, L, layers, true);
    b.layers.push_back(keep(E * L, w.high));  // e_new: the residual sum
    // Aggregation into the receivers (index_add), saved by the node MLP's projection.
    b.layers.push_back(gather(E * L, w.high));
    b.layers.push_back(keep(N * L, w.low));
    graph_mlp(b, w, N, L, L, layers, true);
    b.layers.push_back(keep(N * L, w.high));  // h_new
    b.inputs = N * L * w.high + (i == 0 ? 0 : E * L * w.high);
    b.carry = N * L * w.high;  // the node residual's gradient, waiting for the edge path's
    // The decoder reads only the nodes: the last layer's edges get no gradient from above.
    b.output_grad = N * L * w.high + (i + 1 == c.processor_layers ? 0 : E * L * w.high);
    // Measured, not derived (tests/estimator): replayed under a checkpoint, the edge path's backward
    // holds about two more edge-sized gradients than the same layer without checkpointing.
    b.replay_grads = 2 * E * L * w.high;
    b.weights = static_cast<double>(graph_mlp_params({c.latent, c.latent, c.latent}, c.latent, c.latent, layers, true) +
                                    graph_mlp_params({c.latent, c.latent}, c.latent, c.latent, layers, true));
    m.blocks.push_back(b);
  }

  Block dec;
  dec.name = "decoder";
  dec.layers.push_back(conv_or_linear(w, 0, N * L));  // its input is the last processor's h_new
  graph_mlp(dec, w, N, L, static_cast<double>(s.out_channels), layers, false);
  dec.weights = static_cast<double>(graph_mlp_params({c.latent}, c.latent, s.out_channels, layers, false));
  dec.inputs = N * L * w.high;  // the last processor's nodes
  dec.output = dec.output_grad = N * s.out_channels * w.low;
  m.blocks.push_back(dec);
  m.output = static_cast<double>(s.out_channels) * N;
  return m;
}

// GraphCast (models/graphcast.cpp), per sample over Ng grid nodes, Nm mesh nodes, Eg grid2mesh,
// Em mesh and Ed = 3 Ng mesh2grid edges. What only the graph's features feed (the mesh node and
// the three edge embeddings, the edge and receiver shares of grid2mesh's edge MLP) is the same for
// every sample: batch-independent (fixed), as the gnn's edge embedding.
//
// With model.edge_block, checkpointed or in inference, grid2mesh's and mesh2grid's edges are updated
// a block at a time (checkpointed, each block inside its block's replay): one block of edges exists
// at a time (Eg and Ed become the block in the edge terms), and a block's partial sum waits beside
// the running sum (one more node-sized tensor). Training without checkpointing saves every block's
// tensors: the whole set, as unblocked.
ModelMemory graphcast_memory(const ModelConfig& c, const models::ModelShape& s, const Widths& w,
                             bool one_edge_block_at_a_time) {
  ModelMemory m;
  const GraphCastSizes g = graphcast_sizes(c, s);
  const double Nm = g.mesh, Ng = g.grid, Em = g.mesh_edges;
  const bool blocked_g2m = one_edge_block_at_a_time && c.edge_block > 0 && static_cast<double>(c.edge_block) < g.g2m;
  const bool blocked_m2g = one_edge_block_at_a_time && c.edge_block > 0 && static_cast<double>(c.edge_block) < g.m2g;
  const double Eg = blocked_g2m ? static_cast<double>(c.edge_block) : g.g2m;
  const double Ed = blocked_m2g ? static_cast<double>(c.edge_block) : g.m2g;
  const double L = static_cast<double>(c.latent), C = static_cast<double>(s.in_channels);
  const double O = static_cast<double>(s.out_channels);
  const int64_t layers = c.mlp_layers, Li = c.latent;
  // A latent read by two Linears: under autocast each takes a bf16 copy, otherwise both save it.
  const double read_twice = w.autocast ? 2 * w.low : w.high;
  // An embedding MLP of `rows` batch-independent inputs of width `in`: what it saves.
  auto embedding = [&](double rows, double in) {
    Block e;
    e.layers.push_back(conv_or_linear(w, rows * in, rows * L));
    graph_mlp(e, w, rows, L, L, layers, true);
    return e.saved();
  };

  Block enc;
  enc.name = "grid2mesh";
  enc.layers.push_back(conv_or_linear(w, Ng * C, Ng * L));  // the transposed input's contiguous copy
  graph_mlp(enc, w, Ng, L, L, layers, true);
  enc.layers.push_back(keep(Ng * L, read_twice));  // h_grid, read by the edge and grid node MLPs
  // The sender share gathered onto the edges, plus the per-edge shared term: the edge MLP's input.
  enc.layers.push_back(gather(Ng * L, w.high, 2 * Eg * L * w.low));
  graph_mlp(enc, w, Eg, L, L, layers, true);
  enc.layers.push_back(gather(Eg * L, w.high, blocked_g2m ? Nm * L * w.low : 0));  // index_add into the mesh nodes
  enc.layers.push_back(keep(Nm * L, w.low));      // the sum, saved by the mesh node MLP
  graph_mlp(enc, w, Nm, L, L, layers, true);
  enc.layers.push_back(keep(Nm * L, w.high));     // h_mesh
  graph_mlp(enc, w, Ng, L, L, layers, true);       // the grid node MLP
  enc.layers.push_back(keep(Ng * L, w.high));     // h_grid after its update
  enc.output_grad = (Nm + Ng) * L * w.high;
  enc.carry = Eg * L * w.high;  // measured as the processors' (one more edge-sized gradient)
  enc.fixed_saved = embedding(Nm, 3) + embedding(Eg, 4) + embedding(Em, 4) + (Eg + Nm) * L * read_twice / 2 +
                    Em * L * w.high;
  enc.fixed_kept = Em * L * w.high;  // the mesh edge latents, the processor's input
  enc.weights = static_cast<double>(graph_mlp_params({s.in_channels, 3}, Li, Li, layers, true) +
                                    graph_mlp_params({3}, Li, Li, layers, true) +
                                    2 * graph_mlp_params({4}, Li, Li, layers, true) +
                                    graph_mlp_params({Li, Li, Li}, Li, Li, layers, true) +
                                    graph_mlp_params({Li, Li}, Li, Li, layers, true) +
                                    graph_mlp_params({Li}, Li, Li, layers, true));
  m.blocks.push_back(enc);

  // The processor is the gnn's interaction layer on the mesh; the grid latents wait beside it,
  // and so does their gradient from mesh2grid (carry).
  for (int64_t i = 0; i < c.processor_layers; ++i) {
    Block b;
    b.name = "processor" + std::to_string(i);
    // The gathers' backward hands the layer before both its gradients: nodes and (after the first
    // layer, whose edges are the batch-independent embedding) edges.
    b.layers.push_back(gather((Nm + (i == 0 ? 0 : Em)) * L, w.high, 2 * Em * L * w.low + Nm * L * w.low));
    graph_mlp(b, w, Em, L, L, layers, true);
    b.layers.push_back(keep(Em * L, w.high));  // e_new: the residual sum
    b.layers.push_back(gather(Em * L, w.high));
    b.layers.push_back(keep(Nm * L, w.low));
    graph_mlp(b, w, Nm, L, L, layers, true);
    b.layers.push_back(keep(Nm * L, w.high));  // h_new
    b.inputs = Nm * L * w.high + (i == 0 ? 0 : Em * L * w.high);
    // Measured, not derived (tests/estimator): the edge path's backward holds about two more
    // edge-sized gradients than the layers' own, checkpointed or not (the gnn's replay_grads).
    // Under autocast the bf16 gradients of the edge Linears live beside their fp32 casts (measured).
    b.carry = (Nm + Ng) * L * w.high + 2 * Em * L * w.high + (w.autocast ? 2 * Em * L * w.low : 0);
    b.weights = static_cast<double>(graph_mlp_params({Li, Li, Li}, Li, Li, layers, true) +
                                    graph_mlp_params({Li, Li}, Li, Li, layers, true));
    m.blocks.push_back(b);
  }

  Block dec;
  dec.name = "mesh2grid";
  // Sender (mesh) and receiver (grid) shares gathered onto the 3 Ng edges, plus the edge share.
  dec.layers.push_back(gather((Nm + Ng) * L, w.high, 2 * Ed * L * w.low + (Nm + Ng) * L * w.low));
  graph_mlp(dec, w, Ed, L, L, layers, true);
  dec.layers.push_back(gather(Ed * L, w.high, blocked_m2g ? Ng * L * w.low : 0));  // index_add into the grid nodes
  dec.layers.push_back(keep(Ng * L, w.low));
  graph_mlp(dec, w, Ng, L, L, layers, true);
  dec.layers.push_back(conv_or_linear(w, Ng * L, Ng * L));  // the updated grid latents into the output MLP
  graph_mlp(dec, w, Ng, L, O, layers, false);
  dec.inputs = (Nm + Ng) * L * w.high;
  // Measured as the processors': one more edge-sized gradient, and under autocast the bf16 ones.
  // In blocks, the bf16 gradients that the blocks' replays hand back to the grid-sized node
  // projections, and their running sums, take the place of the edge-sized ones (measured: 3 x grid
  // nodes x latent, tests/estimator).
  dec.carry = Ed * L * w.high + (w.autocast ? 3 * (blocked_m2g ? Ng : Ed) * L * w.low : 0);
  dec.output = dec.output_grad = Ng * O * w.low;
  dec.fixed_saved = embedding(Ed, 4) + Ed * L * w.low;
  // Checkpointed, the mesh2grid edge embedding is replayed with the block, the first backward
  // runs, where the peak is: its batch-independent tensors count there too.
  dec.fixed_kept = dec.fixed_saved;
  dec.weights = static_cast<double>(graph_mlp_params({4}, Li, Li, layers, true) +
                                    graph_mlp_params({Li, Li, Li}, Li, Li, layers, true) +
                                    graph_mlp_params({Li, Li}, Li, Li, layers, true) +
                                    graph_mlp_params({Li}, Li, s.out_channels, layers, false));
  m.blocks.push_back(dec);
  m.output = O * Ng;
  return m;
}

ModelMemory model_memory(const ModelConfig& c, const models::ModelShape& s, const Widths& w, bool one_edge_block_at_a_time) {
  if (c.name == "unet") return unet_memory(c, s, w);
  if (c.name == "vit") return vit_memory(c, s, w);
  if (c.name == "gnn") return gnn_memory(c, s, w);
  if (c.name == "fourcastnet") return fourcastnet_memory(c, s, w);
  if (c.name == "graphcast") return graphcast_memory(c, s, w, one_edge_block_at_a_time);
  if (c.name == "pangu") return pangu_memory(c, s, w);
  throw ConfigError("model.name: unknown model '" + c.name + "' (expected unet, vit, gnn, fourcastnet, graphcast or pangu)");
}

// Backward through `b` with `below` bytes saved by everything that runs before it and `flowing`
// bytes of gradient arriving at its output: the highest live total while its layers run.
double backward_peak(const Block& b, double below, double& flowing) {
  double remaining = below + b.saved(), peak = 0;
  for (auto l = b.layers.rbegin(); l != b.layers.rend(); ++l) {
    const double grad = l->grad < 0 ? 0 : l->grad;
    peak = std::max(peak, remaining + b.carry + flowing + grad);
    remaining -= l->saved;
    if (l->grad >= 0) flowing = l->grad;
  }
  return peak;
}

// A checkpointed block's replay: its forward again (saving this time), with its temporaries.
double replay_peak(const Block& b, double below) {
  double saved = 0, peak = 0;
  for (const Layer& l : b.layers) {
    peak = std::max(peak, below + b.forward_temp + saved + l.temp);
    saved += l.saved;
  }
  return peak;
}

}  // namespace

int64_t analytic_param_count(const ModelConfig& config, const models::ModelShape& shape) {
  if (config.name == "unet") return unet_params(config, shape);
  if (config.name == "vit") return vit_params(config, shape);
  if (config.name == "gnn") return gnn_params(config, shape);
  if (config.name == "fourcastnet") return fourcastnet_params(config, shape);
  if (config.name == "graphcast") return graphcast_params(config, shape);
  if (config.name == "pangu") return pangu_params(config, shape);
  throw ConfigError("model.name: unknown model '" + config.name + "' (expected unet, vit, gnn, fourcastnet, graphcast or pangu)");
}

ActivationFit analytic_activations(const RunConfig& config, const models::ModelShape& shape, Mode mode) {
  const Widths w = widths(config.train.precision);
  // Edge blocks (graphcast) hold one block at a time when checkpointed, and in inference (no graph).
  const ModelMemory m = model_memory(config.model, shape, w, config.train.checkpointing || mode == Mode::kInference);
  ActivationFit fit;
  fit.num_params = analytic_param_count(config.model, shape);
  const StateLayout layout = state_layout(config.train.precision, config.train.optimizer, config.train.momentum);
  // What the trace counts as states: parameters, their flat gradients and optimizer state, the
  // latitude weights (training only), and the gnn's graph (int64 senders and receivers, fp32 edge features and
  // node positions).
  // The loss's channel weights (one float per output channel) and, for a limited-area run, the
  // boundary frame and interior mask (a float per grid point each).
  double buffers = mode == Mode::kTrain ? 4.0 * static_cast<double>(shape.lat + shape.out_channels) : 0.0;
  if (mode == Mode::kTrain && config.data.boundary > 0) buffers += 2 * 4.0 * static_cast<double>(shape.lat * shape.lon);
  if (config.model.name == "gnn") {
    const double E = static_cast<double>(grid_edges(shape.lat, shape.lon, config.model.neighbourhood));
    buffers += E * (8 + 8 + 3 * layout.param_bytes) + 2.0 * layout.param_bytes * shape.lat * shape.lon;
  }
  if (config.model.name == "graphcast") {
    // Three edge sets (int64 senders and receivers, 4 features each), 3 positional features per
    // grid and mesh node, and the kept mesh node ids (int64, not a buffer: never cast).
    const GraphCastSizes g = graphcast_sizes(config.model, shape);
    buffers += (g.g2m + g.mesh_edges + g.m2g) * (16 + 4 * layout.param_bytes) +
               3 * layout.param_bytes * (g.grid + g.mesh) + 8 * g.mesh;
  }
  if (config.model.name == "pangu") {
    // Each block's bias-table index (int64, N x N) and, in a block whose shift crosses a level or
    // latitude edge, its mask ([types, N, N] in the parameters' dtype).
    const ModelConfig& c = config.model;
    const PanguGrid g = pangu_grid(c, shape);
    for (int stage = 0; stage < 4; ++stage) {
      const bool fine = stage == 0 || stage == 3;
      const PanguStage st = pangu_stage(c, g.levels, fine ? g.h : g.h2, fine ? g.w : g.w2);
      const double NN = static_cast<double>(st.N * st.N);
      const bool masked = (st.padded[0] > st.window[0] && st.window[0] / 2 > 0) ||
                          (st.padded[1] > st.window[1] && st.window[1] / 2 > 0);
      const int64_t depth = c.stage_depths[static_cast<size_t>(stage)];
      buffers += static_cast<double>(depth) * NN * 8;
      if (masked) buffers += static_cast<double>(depth / 2) * static_cast<double>(st.types) * NN * layout.param_bytes;
    }
  }
  const double per_param = mode == Mode::kTrain ? 2 * layout.param_bytes + layout.optimizer_bytes : layout.param_bytes;
  fit.traced_states = static_cast<int64_t>(static_cast<double>(fit.num_params) * per_param + buffers);

  const double rollout = static_cast<double>(std::max<int64_t>(1, config.max_rollout()));
  const double accumulation = static_cast<double>(std::max<int64_t>(1, config.train.accumulation));
  const double in_elems = static_cast<double>(shape.in_channels) * shape.lat * shape.lon;
  // The step's micro-batches (fp32 input, forcings for every rollout step, target), all alive for
  // the whole step. in_elems counts one step's forcings already.
  const ChannelLayout layout_channels = config.channels();
  const double forcing_elems =
      static_cast<double>(layout_channels.forcing.size() + layout_channels.statics.size()) * shape.lat * shape.lon;
  const double batch_tensors = accumulation * 4 * (in_elems + (rollout - 1) * forcing_elems + rollout * m.output);

  double saved = 0, inputs = 0, fixed_saved = 0, fixed_kept = 0, weights = 0, worst_weights = 0;
  for (const Block& b : m.blocks) {
    saved += b.saved();
    inputs += b.inputs;
    fixed_saved += b.fixed_saved;
    fixed_kept += b.fixed_kept;
    weights += b.weights;
    worst_weights = std::max(worst_weights, b.weights);
  }

  if (mode == Mode::kInference) {
    // No graph: the largest block's forward temporaries on top of its input and output.
    double peak = 0;
    for (const Block& b : m.blocks) peak = std::max(peak, replay_peak(b, 0));
    fit.forward_backward.per_sample = 4 * in_elems + peak;
    fit.forward_backward.fixed = fixed_saved;
    return fit;
  }

  // The residual prediction and loss: the fp32 states, their stack, and the difference square() saves.
  const double loss_saved = rollout * m.output * 4;
  // How many rollout steps' model activations the forward keeps: all of them, or with
  // train.rollout_checkpointing only each step's input parts and one step's activations at a time,
  // rebuilt by the replay of the step whose backward is running (last step first). The parts are
  // views of the micro-batch (counted in batch_tensors) and the fed-back predictions: each
  // prediction but the last stays (fp32, prognostic and diagnostic; in pure bf16 a bf16 copy of the
  // prognostic part and of each step's forcings).
  const bool steps_checkpointed = config.train.rollout_checkpointing;
  const double kept_steps = steps_checkpointed ? 1 : rollout;
  const double state_elems =
      static_cast<double>(shape.state_channels > 0 ? shape.state_channels : shape.out_channels) * shape.lat * shape.lon;
  const double step_inputs =
      !steps_checkpointed ? 0
      : config.train.precision == Precision::kBf16 ? (rollout - 1) * (state_elems + forcing_elems) * 2
                                                   : (rollout - 1) * m.output * 4;
  double flowing = m.output * 4;  // the gradient of the last predicted state
  double peak = 0;
  if (config.train.checkpointing) {
    // Forward keeps each block's inputs (every kept rollout step); backward replays one block at a time.
    double below = step_inputs + kept_steps * inputs + loss_saved;
    for (auto b = m.blocks.rbegin(); b != m.blocks.rend(); ++b) {
      below -= b->inputs;
      // The replay's outputs and the gradients that arrived for them are held until it is done.
      const double held = below + b->inputs + b->output + b->output_grad + b->replay_grads;
      peak = std::max(peak, replay_peak(*b, held));
      double first = 0;
      peak = std::max(peak, backward_peak(*b, held, first));
      flowing = first;
    }
  } else {
    // Forward keeps everything (every kept rollout step); backward frees block by block.
    double below = step_inputs + kept_steps * saved + loss_saved;
    for (auto b = m.blocks.rbegin(); b != m.blocks.rend(); ++b) {
      below -= b->saved();
      peak = std::max(peak, backward_peak(*b, below, flowing));
    }
  }
  // A replayed rollout step hands back the gradient of its whole input (fp32, on its way to the
  // step before) and, in one piece, its parameters' gradients, before they are accumulated: one
  // more set of gradients at the peak (measured on the trace, tests/estimator).
  const double step_replay_grads = steps_checkpointed ? in_elems * 4 : 0;
  fit.forward_backward.per_sample = batch_tensors + peak + step_replay_grads;
  // Autocast's bf16 weight copies: cached and saved for the whole step, or (checkpointed, cache
  // off) one block's at a time during its replay.
  const double cast_weights = w.autocast ? 2 : 0;
  fit.forward_backward.fixed = config.train.checkpointing ? fixed_kept + cast_weights * worst_weights
                                                          : fixed_saved + cast_weights * weights;
  if (steps_checkpointed) fit.forward_backward.fixed += static_cast<double>(fit.num_params) * layout.param_bytes;
  // Optimizer phase: the batch tensors are still alive; pure bf16 updates an fp32 copy of the grads.
  fit.optimizer.per_sample = batch_tensors;
  fit.optimizer.fixed = config.train.precision == Precision::kBf16 ? 4.0 * static_cast<double>(fit.num_params) : 0.0;
  return fit;
}

}  // namespace wxtrain::estimator
