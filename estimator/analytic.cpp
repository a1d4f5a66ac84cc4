#include "estimator/analytic.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "estimator/model_states.h"

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
  double low;     // conv/linear/matmul operands autocast casts (and their outputs); bf16 under autocast
  double high;    // what autocast leaves alone: norms (run in the parameters' dtype), residuals, loss
  bool autocast;  // operands of conv/linear are cast copies (saved), weights too
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
// One block's memory, per sample unless named fixed. Built by the layer functions below.

struct Block {
  std::string name;
  double saved = 0;        // bytes autograd keeps for this block's backward
  double inputs = 0;       // bytes its checkpoint keeps instead (inputs not kept by anything else)
  double grads = 0;        // bytes of gradients in flight at this block's worst backward moment
  double fixed_saved = 0;  // batch-independent saved bytes (gnn edge latents of the first layer)
  double weights = 0;      // conv/linear parameters whose low-precision copies the block saves
};

// The layer kinds. `elems` is the per-sample element count of the tensor the layer saves.
// Conv / Linear / matmul operand: the (cast) input is saved — a fresh low-precision copy under
// autocast, so the caller says whether the input is already low precision.
void conv_or_linear(Block& b, const Widths& w, double in_elems, double weight_params, bool input_low) {
  b.saved += in_elems * (input_low || !w.autocast ? w.low : w.low);
  (void)input_low;
  b.weights += weight_params;
}
// GroupNorm / LayerNorm: the input, in the parameters' dtype (models cast it up under autocast).
void norm(Block& b, const Widths& w, double elems) { b.saved += elems * w.high; }
// SiLU / GELU: the input.
void activation(Block& b, double elems, double width) { b.saved += elems * width; }
// Softmax: the output.
void softmax(Block& b, double elems, double width) { b.saved += elems * width; }
// max_pool2d: the input (already kept as the previous block's output) and int64 indices.
void max_pool(Block& b, double out_elems) { b.saved += out_elems * 8; }
// A tensor kept by the next block (the block's output), in its dtype.
void output(Block& b, double elems, double width) { b.saved += elems * width; }
// Gradients in flight: the largest tensors whose gradients coexist during the block's backward.
void grads_in_flight(Block& b, double elems, double width, double how_many) {
  b.grads = std::max(b.grads, elems * width * how_many);
}

// ---------------------------------------------------------------------------------------------
// The zoo, block by block.

struct ModelMemory {
  std::vector<Block> blocks;
  double model_input = 0;   // per sample: the model's input as the first block sees it (elements)
  double output_elems = 0;  // per sample: one predicted state
};

// U-Net ConvBlock: [maxpool] conv3x3 GN SiLU conv3x3 GN SiLU. Everything after a conv is fp32 in
// bf16-mixed (the models cast up for GroupNorm), so the conv inputs are fresh bf16 copies there.
Block conv_block(const std::string& name, const Widths& w, int64_t in_ch, int64_t out_ch, double pixels,
                 bool downsample) {
  Block b;
  b.name = name;
  if (downsample) max_pool(b, in_ch * pixels);
  conv_or_linear(b, w, in_ch * pixels, static_cast<double>(conv_params(in_ch, out_ch, 3, false)), false);
  norm(b, w, out_ch * pixels);
  activation(b, out_ch * pixels, w.high);
  conv_or_linear(b, w, out_ch * pixels, static_cast<double>(conv_params(out_ch, out_ch, 3, false)), false);
  norm(b, w, out_ch * pixels);
  activation(b, out_ch * pixels, w.high);
  // fp32 training: the conv outputs are the norms' inputs, the SiLU outputs the convs' inputs,
  // counted once each above. The block output, kept by the next block or as a skip:
  output(b, out_ch * pixels, w.high);
  grads_in_flight(b, std::max(in_ch, out_ch) * pixels, w.high, 3);
  return b;
}

ModelMemory unet_memory(const ModelConfig& c, const models::ModelShape& s, const Widths& w) {
  ModelMemory m;
  const auto& ch = c.channels;
  const int64_t mult = int64_t{1} << (ch.size() - 1);
  const int64_t lat = ceil_div(s.lat, mult) * mult, lon = ceil_div(s.lon, mult) * mult;
  auto pixels = [&](size_t level) { return static_cast<double>((lat >> level) * (lon >> level)); };
  for (size_t i = 0; i < ch.size(); ++i) {
    const int64_t in = i == 0 ? s.in_channels : ch[i - 1];
    Block b = conv_block("encoder" + std::to_string(i), w, in, ch[i], pixels(i), i > 0);
    // A checkpoint keeps the block's input: the (unpadded) model input, or the previous output.
    b.inputs = i == 0 ? 0 : 0;
    if (i + 1 == ch.size()) b.saved -= ch[i] * pixels(i) * w.high;  // the deepest output feeds only the upsample
    m.blocks.push_back(b);
  }
  for (size_t i = ch.size() - 1; i-- > 0;) {
    // upsample + cat (nothing saved) then a ConvBlock on the concatenation.
    Block b = conv_block("decoder" + std::to_string(i), w, ch[i + 1] + ch[i], ch[i], pixels(i), false);
    b.saved -= ch[i] * pixels(i) * w.high;  // the output feeds the next upsample (nothing saved) or the head
    b.inputs = ch[i + 1] * pixels(i + 1) * w.high;  // the coarse input (the skip is an encoder's output)
    m.blocks.push_back(b);
  }
  Block head;
  head.name = "head";
  conv_or_linear(head, w, ch[0] * pixels(0), static_cast<double>(conv_params(ch[0], s.out_channels, 1, true)), false);
  head.inputs = ch[0] * pixels(0) * w.high;
  grads_in_flight(head, ch[0] * pixels(0), w.high, 1);
  m.blocks.push_back(head);
  // Encoder outputs are checkpoint inputs of the next encoder and their decoder: counted once.
  for (size_t i = 0; i + 1 < ch.size(); ++i) m.blocks[i].inputs = ch[i] * pixels(i) * w.high;
  m.model_input = static_cast<double>(s.in_channels) * lat * lon;
  m.output_elems = static_cast<double>(s.out_channels) * s.lat * s.lon;
  return m;
}

ModelMemory vit_memory(const ModelConfig& c, const models::ModelShape& s, const Widths& w) {
  ModelMemory m;
  const int64_t p = c.patch_size, D = c.embed_dim, heads = c.heads, hidden = mlp_hidden(c);
  const double N = static_cast<double>(ceil_div(s.lat, p) * ceil_div(s.lon, p));
  const double padded = N * p * p;
  // The residual stream: fp32 under autocast (tokens + fp32 pos_embed promote).
  const double stream = w.high;

  Block embed;
  embed.name = "embed";
  conv_or_linear(embed, w, s.in_channels * padded, static_cast<double>(conv_params(s.in_channels, D, p, true)), false);
  output(embed, N * D, stream);
  grads_in_flight(embed, N * D, stream, 2);
  m.blocks.push_back(embed);

  for (int64_t i = 0; i < c.depth; ++i) {
    Block b;
    b.name = "block" + std::to_string(i);
    // x + attn(norm1(x))
    norm(b, w, 0);  // norm1's input is the block input, kept by the previous block
    conv_or_linear(b, w, N * D, static_cast<double>(linear_params(D, 3 * D)), false);  // qkv
    b.saved += 2 * N * D * w.low;  // q and k: contiguous copies saved by the scores' bmm
    softmax(b, heads * N * N, w.low);
    b.saved += N * D * w.low;      // v: a contiguous copy saved by attn @ v
    conv_or_linear(b, w, N * D, static_cast<double>(linear_params(D, D)), true);  // proj on the merged heads
    // x + fc2(gelu(fc1(norm2(x))))
    norm(b, w, N * D);  // norm2's input: the first residual sum
    conv_or_linear(b, w, N * D, static_cast<double>(linear_params(D, hidden)), false);  // fc1
    activation(b, N * hidden, w.low);                                                   // gelu input
    conv_or_linear(b, w, N * hidden, static_cast<double>(linear_params(hidden, D)), true);  // fc2: gelu output
    output(b, N * D, stream);
    b.inputs = N * D * stream;
    // Backward of the attention: the scores' gradient next to the probabilities'.
    grads_in_flight(b, heads * N * N, w.low, 2);
    grads_in_flight(b, N * hidden, w.low, 2);
    m.blocks.push_back(b);
  }

  Block head;
  head.name = "head";
  norm(head, w, 0);
  conv_or_linear(head, w, N * D, static_cast<double>(linear_params(D, p * p * s.out_channels)), false);
  head.inputs = 0;  // the last block's output, counted there
  grads_in_flight(head, N * D, stream, 2);
  m.blocks.push_back(head);
  m.model_input = static_cast<double>(s.in_channels) * padded;
  m.output_elems = static_cast<double>(s.out_channels) * s.lat * s.lon;
  return m;
}

// GraphMLP finish: (layers - 1) x [SiLU, Linear] then LayerNorm — each SiLU saves its input, each
// Linear its input (the SiLU output), the norm its input.
void graph_mlp_finish(Block& b, const Widths& w, double elems, double out_elems, int64_t layers, bool layer_norm) {
  for (int64_t i = 1; i < layers; ++i) {
    const double width = i == 1 ? w.low : w.low;
    activation(b, elems, width);
    conv_or_linear(b, w, elems, 0, true);
  }
  if (layer_norm) norm(b, w, out_elems);
}

ModelMemory gnn_memory(const ModelConfig& c, const models::ModelShape& s, const Widths& w) {
  ModelMemory m;
  const double N = static_cast<double>(s.lat * s.lon);
  const double E = static_cast<double>(grid_edges(s.lat, s.lon, c.neighbourhood));
  const double L = static_cast<double>(c.latent);
  const int64_t layers = c.mlp_layers;

  Block enc;
  enc.name = "encoder";
  conv_or_linear(enc, w, N * s.in_channels, 0, false);  // the transposed input's contiguous copy
  graph_mlp_finish(enc, w, N * L, N * L, layers, true);
  output(enc, N * L, w.high);
  // The edge MLP reads the batch-independent edge features: fixed.
  Block edges;
  graph_mlp_finish(edges, w, E * L, E * L, layers, true);
  enc.fixed_saved = edges.saved + E * L * w.high;
  enc.weights = static_cast<double>(graph_mlp_params({s.in_channels, 2}, c.latent, c.latent, layers, true) +
                                    graph_mlp_params({3}, c.latent, c.latent, layers, true));
  grads_in_flight(enc, N * L, w.high, 3);
  m.blocks.push_back(enc);

  for (int64_t i = 0; i < c.processor_layers; ++i) {
    Block b;
    b.name = "processor" + std::to_string(i);
    // Edge update: gathered sender/receiver projections + edge projection, the MLP, the residual.
    graph_mlp_finish(b, w, E * L, E * L, layers, true);
    activation(b, E * L, 0);
    b.saved += E * L * w.low;  // the MLP's first activation input (the summed projections)
    output(b, E * L, w.high);  // e_new, kept by the next layer's edge projection
    // Aggregation: the receivers' sums, saved by the node MLP's projection.
    b.saved += N * L * w.high;
    graph_mlp_finish(b, w, N * L, N * L, layers, true);
    b.saved += N * L * w.low;
    output(b, N * L, w.high);
    b.inputs = N * L * w.high + (i == 0 ? 0 : E * L * w.high);
    b.weights = static_cast<double>(graph_mlp_params({c.latent, c.latent, c.latent}, c.latent, c.latent, layers, true) +
                                    graph_mlp_params({c.latent, c.latent}, c.latent, c.latent, layers, true));
    grads_in_flight(b, E * L, w.high, 3);
    m.blocks.push_back(b);
  }

  Block dec;
  dec.name = "decoder";
  graph_mlp_finish(dec, w, N * L, N * s.out_channels, layers, false);
  dec.saved += N * L * w.low;
  dec.inputs = 0;
  grads_in_flight(dec, N * L, w.high, 2);
  m.blocks.push_back(dec);
  m.model_input = static_cast<double>(s.in_channels) * N;
  m.output_elems = static_cast<double>(s.out_channels) * N;
  return m;
}

ModelMemory model_memory(const ModelConfig& c, const models::ModelShape& s, const Widths& w) {
  if (c.name == "unet") return unet_memory(c, s, w);
  if (c.name == "vit") return vit_memory(c, s, w);
  if (c.name == "gnn") return gnn_memory(c, s, w);
  throw ConfigError("model.name: unknown model '" + c.name + "' (expected unet, vit or gnn)");
}

}  // namespace

int64_t analytic_param_count(const ModelConfig& config, const models::ModelShape& shape) {
  if (config.name == "unet") return unet_params(config, shape);
  if (config.name == "vit") return vit_params(config, shape);
  if (config.name == "gnn") return gnn_params(config, shape);
  throw ConfigError("model.name: unknown model '" + config.name + "' (expected unet, vit or gnn)");
}

ActivationFit analytic_activations(const RunConfig& config, const models::ModelShape& shape, Mode mode) {
  const Widths w = widths(config.train.precision);
  const ModelMemory m = model_memory(config.model, shape, w);
  ActivationFit fit;
  fit.num_params = analytic_param_count(config.model, shape);
  const StateLayout layout = state_layout(config.train.precision, config.train.optimizer, config.train.momentum);
  fit.traced_states = fit.num_params * (mode == Mode::kTrain ? 2 * layout.param_bytes + layout.optimizer_bytes
                                                             : layout.param_bytes);

  const double rollout = static_cast<double>(std::max<int64_t>(1, config.data.rollout_steps));
  const double accumulation = static_cast<double>(std::max<int64_t>(1, config.train.accumulation));
  const double in_elems = static_cast<double>(shape.in_channels) * shape.lat * shape.lon;
  // The micro-batches' input and target tensors (fp32), all of the step's micro-batches at once.
  const double batch_tensors = accumulation * 4 * (in_elems + rollout * m.output_elems);

  double saved = 0, inputs = 0, fixed_saved = 0, weights = 0, worst_block = 0, worst_grads = 0, worst_weights = 0;
  for (const Block& b : m.blocks) {
    saved += b.saved;
    inputs += b.inputs;
    fixed_saved += b.fixed_saved;
    weights += b.weights;
    worst_grads = std::max(worst_grads, b.grads);
    worst_block = std::max(worst_block, b.saved + b.grads);
    worst_weights = std::max(worst_weights, b.weights);
  }
  // The loss: the stacked prediction cast to fp32, the difference saved by square().
  const double loss = rollout * m.output_elems * (4 + 4 + w.low);

  if (mode == Mode::kInference) {
    fit.forward_backward.per_sample = 4 * in_elems + worst_block;
    fit.forward_backward.fixed = fixed_saved;
    return fit;
  }
  const double cast_weights = w.autocast ? 2 : 0;
  if (config.train.checkpointing) {
    fit.forward_backward.per_sample = batch_tensors + rollout * inputs + worst_block + loss;
    fit.forward_backward.fixed = fixed_saved + cast_weights * worst_weights;
  } else {
    fit.forward_backward.per_sample = batch_tensors + rollout * saved + worst_grads + loss;
    fit.forward_backward.fixed = fixed_saved + cast_weights * weights;
  }
  // Optimizer phase: the batch tensors are still alive; pure bf16 updates fp32 copies of the grads.
  fit.optimizer.per_sample = batch_tensors;
  fit.optimizer.fixed = config.train.precision == Precision::kBf16 ? 4.0 * static_cast<double>(fit.num_params) : 0.0;
  return fit;
}

}  // namespace wxtrain::estimator
