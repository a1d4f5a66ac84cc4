// estimate --analytic for the grid GNN (models/gnn/gnn.cpp), layer by layer.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "models/gnn/gnn.h"

namespace wxtrain::models {
namespace {

// Edges of the grid graph (gnn.cpp build_grid_graph): every cell within `radius` in both
// directions, the centre excepted, clipped at the grid's borders.
int64_t grid_edges(int64_t lat, int64_t lon, int64_t radius) {
  int64_t e = 0;
  for (int64_t dy = -radius; dy <= radius; ++dy)
    for (int64_t dx = -radius; dx <= radius; ++dx)
      if (dy != 0 || dx != 0) e += std::max<int64_t>(0, lat - std::abs(dy)) * std::max<int64_t>(0, lon - std::abs(dx));
  return e;
}

// The graph's edges: the rectangle's, or on a point set the (2r+1)^2 - 1 nearest cells of each.
int64_t edges_of(const ModelShape& s, int64_t radius) {
  if (s.point_set) return s.lon * std::min<int64_t>(s.lon - 1, (2 * radius + 1) * (2 * radius + 1) - 1);
  return grid_edges(s.lat, s.lon, radius);
}

// Rank 0 of a model-parallel group of P on a rectangle (docs/distributed.md, "Model parallelism";
// GraphNetImpl::set_node_shard): its band of rows (the widest: the first lat % P ranks take one
// more), the edges it receives (every sender within `radius`, above or below the band too), its
// halo (the rows within `radius` below the band) and what one exchange gathers (every rank's rows
// that another band reads: within `radius` of a neighbouring band). Counted from the grid as the
// partition counts them from the graph.
struct Band {
  int64_t rows = 0;
  double nodes = 0, edges = 0, halo = 0, exchanged = 0;
};

Band rank0_band(int64_t lat, int64_t lon, int64_t radius, int64_t P) {
  std::vector<int64_t> start{0};
  for (int64_t q = 0; q < P; ++q) start.push_back(start.back() + lat / P + (q < lat % P ? 1 : 0));
  Band b;
  b.rows = start[1];
  b.nodes = static_cast<double>(b.rows * lon);
  for (int64_t dy = -radius; dy <= radius; ++dy) {
    int64_t receivers = 0;  // rows y of the band whose sender row y + dy lies in the grid
    for (int64_t y = 0; y < b.rows; ++y) receivers += (y + dy >= 0 && y + dy < lat) ? 1 : 0;
    for (int64_t dx = -radius; dx <= radius; ++dx)
      if (dy != 0 || dx != 0) b.edges += static_cast<double>(receivers * std::max<int64_t>(0, lon - std::abs(dx)));
  }
  b.halo = static_cast<double>(std::min(radius, lat - b.rows) * lon);
  for (int64_t q = 0; q < P; ++q) {
    int64_t sent = 0;
    for (int64_t y = start[q]; y < start[q + 1]; ++y)
      sent += ((q > 0 && y < start[q] + radius) || (q + 1 < P && y >= start[q + 1] - radius)) ? 1 : 0;
    b.exchanged += static_cast<double>(sent * lon);
  }
  return b;
}

}  // namespace

// GraphMLP: one Linear per input (bias on the first only) summed, then layers-1 Linears, then an
// optional LayerNorm.
int64_t graph_mlp_params(const std::vector<int64_t>& in, int64_t hidden, int64_t out, int64_t layers, bool norm) {
  const int64_t first_out = layers == 1 ? out : hidden;
  int64_t n = 0;
  for (size_t k = 0; k < in.size(); ++k) n += linear_params(in[k], first_out, k == 0);
  for (int64_t i = 1; i < layers; ++i) n += linear_params(hidden, i + 1 == layers ? out : hidden);
  return n + (norm ? norm_params(out) : 0);
}

// GraphMLP: the summed input projections, then (layers - 1) x [SiLU, Linear], then LayerNorm.
// The SiLU runs in the Linear's output dtype, bf16 under autocast as on CUDA (gnn.cpp:
// silu_between_linears): it saves its bf16 input, and the next Linear its bf16 output as it is.
void graph_mlp(Block& b, const Widths& w, double rows, double hidden, double out, int64_t layers, bool layer_norm) {
  for (int64_t i = 1; i < layers; ++i) {
    b.layers.push_back(activation(rows * hidden, w.low));
    b.layers.push_back(conv_or_linear(w, rows * hidden, rows * (i + 1 == layers ? out : hidden)));
  }
  if (layer_norm) b.layers.push_back(norm(w, rows * out, rows));
}

int64_t gnn_parameter_count(const GraphNetOptions& c, const ModelShape& s) {
  const int64_t L = c.latent, m = c.mlp_layers;
  const int64_t k = s.conditional_noise;  // noise channels taken out of the input, into the norms
  const int64_t encoder =
      graph_mlp_params({s.in_channels - k, 2}, L, L, m, true) + graph_mlp_params({3}, L, L, m, true);
  // A conditional layer's two MLPs end in ConditionalLayerNorms instead of LayerNorms.
  const int64_t norms = k > 0 ? 2 * conditional_norm_params(L, k) : 0;
  const int64_t layer = graph_mlp_params({L, L, L}, L, L, m, k == 0) + graph_mlp_params({L, L}, L, L, m, k == 0) + norms;
  const int64_t decoder = graph_mlp_params({L}, L, s.out_channels, m, false);
  // The graph itself is buffers, not parameters.
  return encoder + c.processor_layers * layer + decoder + (k > 0 ? noise_mlp_params(k) : 0);
}

ModelMemory gnn_activation_memory(const GraphNetOptions& c, const ModelShape& s, const FormulaSettings& f) {
  const Widths& w = f.widths;
  ModelMemory m;
  double N = static_cast<double>(s.lat * s.lon);
  double E = static_cast<double>(edges_of(s, c.neighbourhood));
  const double L = static_cast<double>(c.latent);
  const int64_t layers = c.mlp_layers;
  const int64_t k = s.conditional_noise;
  const double K = static_cast<double>(k);
  // Model parallelism on a rectangle: rank 0's band, its received edges, and per processor layer the
  // halo it fetches (H senders read beside its N nodes) through an exchange of X rows.
  double H = 0, X = 0;
  if (f.model_parallel > 1 && !s.point_set && s.lat >= f.model_parallel) {
    const Band band = rank0_band(s.lat, s.lon, c.neighbourhood, f.model_parallel);
    N = band.nodes;
    E = band.edges;
    H = band.halo;
    X = band.exchanged;
    m.ranks = f.model_parallel;
  }

  Block enc;
  enc.name = "encoder";
  // The transposed input's contiguous copy (the noise channels are narrowed off: a view).
  enc.layers.push_back(conv_or_linear(w, N * (s.in_channels - k), N * L));
  graph_mlp(enc, w, N, L, L, layers, true);
  enc.layers.push_back(keep(N * L, w.high));
  enc.output_grad = N * L * w.high;
  // The edge MLP reads the batch-independent edge features: its activations are fixed.
  Block edges;
  graph_mlp(edges, w, E, L, L, layers, true);
  enc.fixed_saved = edges.saved() + E * L * w.high;
  enc.fixed_kept = E * L * w.high;
  enc.weights = static_cast<double>(graph_mlp_params({s.in_channels - k, 2}, c.latent, c.latent, layers, true) +
                                    graph_mlp_params({3}, c.latent, c.latent, layers, true));
  m.blocks.push_back(enc);
  // Conditional-norm noise: the noise MLP on the nodes (outside every block, never checkpointed),
  // whose output every processor layer reads; a conditional norm saves, beyond a LayerNorm, the
  // normalised tensor and 1 + scale(noise) for their product, and the embedding for its Linears
  // (an edge's, gathered from its receiver, E x k).
  if (k > 0) {
    m.blocks.push_back(noise_injector_block(w, N, K, f.checkpointing));
  }
  auto conditional = [&](double rows) {
    return Layer{"conditional norm", 2 * rows * L * w.high + rows * K * w.high, 0, 2 * rows * L * w.high};
  };

  for (int64_t i = 0; i < c.processor_layers; ++i) {
    Block b;
    b.name = "processor" + std::to_string(i);
    // Edge update: sender and receiver projections gathered onto the edges, plus the edge projection.
    // Sharded, the senders are the band's nodes and the halo (cat of the two, saved by nothing), the
    // halo gathered through the exchange's X rows: temporaries of the forward, and their gradients
    // in backward.
    if (H > 0) b.layers.push_back(gather(N * L, w.high, (X + 2 * H + N + H) * L * w.high));
    b.layers.push_back(gather((N + H) * L, w.high, 2 * E * L * w.low + (N + H) * L * w.low));
    graph_mlp(b, w, E, L, L, layers, true);
    if (k > 0) {
      b.layers.push_back(conditional(E));
      // Measured, not derived (tests/estimator Zoo/MembersVsTraceGraph): the traced step holds about one
      // more edge-sized fp32 tensor per conditional edge norm than the terms above (0.89 E x L on
      // the storm grid at latent 32; without it the formulas are 27% under what the trace adds).
      b.layers.push_back(keep(E * L, w.high));
    }
    b.layers.push_back(keep(E * L, w.high));  // e_new: the residual sum
    // Aggregation into the receivers (index_add), saved by the node MLP's projection.
    b.layers.push_back(gather(E * L, w.high));
    b.layers.push_back(keep(N * L, w.low));
    graph_mlp(b, w, N, L, L, layers, true);
    if (k > 0) b.layers.push_back(conditional(N));
    b.layers.push_back(keep(N * L, w.high));  // h_new
    b.inputs = N * L * w.high + (i == 0 ? 0 : E * L * w.high) + N * K * w.high;  // with the noise embedding
    b.carry = N * L * w.high;  // the node residual's gradient, waiting for the edge path's
    // The decoder reads only the nodes: the last layer's edges get no gradient from above.
    b.output_grad = N * L * w.high + (i + 1 == c.processor_layers ? 0 : E * L * w.high);
    // Measured, not derived (tests/estimator): replayed under a checkpoint, the edge path's backward
    // holds about two more edge-sized gradients than the same layer without checkpointing.
    b.replay_grads = 2 * E * L * w.high;
    b.weights = static_cast<double>(graph_mlp_params({c.latent, c.latent, c.latent}, c.latent, c.latent, layers, k == 0) +
                                    graph_mlp_params({c.latent, c.latent}, c.latent, c.latent, layers, k == 0) +
                                    (k > 0 ? 2 * conditional_norm_params(c.latent, k) : 0));
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

double gnn_buffer_bytes(const GraphNetOptions& c, const ModelShape& s, double param_bytes) {
  // The grid graph: int64 senders and receivers, 3 edge features per edge and 2 positional
  // features per node in the parameters' dtype.
  const double E = static_cast<double>(edges_of(s, c.neighbourhood));
  return E * (8 + 8 + 3 * param_bytes) + 2.0 * param_bytes * s.lat * s.lon;
}

}  // namespace wxtrain::models
