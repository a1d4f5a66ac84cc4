#pragma once
// GraphCast-style encoder-processor-decoder on the grid's own graph. Nodes are grid points; each
// node receives an edge from every node within model.neighbourhood cells (Chebyshev distance,
// radius 1 = 8 neighbours, no wraparound). Edge features are the sender's offset from the receiver
// (dlat, dlon) and its length, in units of the radius; node inputs are the variables plus the
// node's position (lat, lon scaled to [-1, 1]), so the network can tell regions apart.
//
// Blocks, in forward order:
//   encoder                       node MLP and edge MLP to model.latent
//   processor0 .. processor{P-1}  interaction networks: e += MLP(e, h_src, h_dst);
//                                 h += MLP(h, sum of incoming e)
//   decoder                       node MLP to the output variables
// Every MLP has model.mlp_layers Linear layers with SiLU between them and a LayerNorm on the
// output (except the decoder's).
// With ModelShape::conditional_noise (train.noise_injection = "conditional_norm") the last input
// channels are an ensemble member's noise fields: the encoder does not read them; embedded per node
// by noise_injector (models/noise_conditioning.h) they condition the LayerNorms that end every
// processor layer's node MLP (on the node's embedding) and edge MLP (on its receiver's).
#include <numeric>

#include "models/gnn/gnn_options.h"
#include "models/noise_conditioning.h"
#include "models/registry.h"
#include "models/weather_model.h"

namespace wxtrain::models {

struct GraphMLPOptions {
  GraphMLPOptions(std::vector<int64_t> in_features, int64_t hidden, int64_t out)
      : in_features_(std::move(in_features)), hidden_(hidden), out_(out) {}
  TORCH_ARG(std::vector<int64_t>, in_features);  // widths of the inputs the MLP reads as one concatenation
  TORCH_ARG(int64_t, hidden);
  TORCH_ARG(int64_t, out);
  TORCH_ARG(int64_t, layers) = 2;      // Linear layers
  TORCH_ARG(bool, layer_norm) = true;  // LayerNorm on the output
  // > 0 (with layer_norm): the output LayerNorm is conditional on an embedding this wide
  // (ConditionalLayerNorm, zero-initialised: the MLP starts as the plain one).
  TORCH_ARG(int64_t, condition) = 0;
};

// An MLP on the concatenation of several inputs, without materialising the concatenation: the
// first Linear is stored split per input (first.k, bias on first.0 only; the same parameters as one
// Linear on the concatenation), so each input can be projected where it is cheapest — a node's
// projection once per node instead of once per edge.
class GraphMLPImpl : public torch::nn::Module {
 public:
  explicit GraphMLPImpl(const GraphMLPOptions& options);
  // Input k's share of the first layer.
  torch::Tensor project(size_t k, const torch::Tensor& x);
  // The rest of the MLP, given the summed first-layer projections; `cond` [..., condition] is the
  // embedding a conditional norm reads (and only it).
  torch::Tensor finish(torch::Tensor first, const torch::Tensor& cond = {});
  torch::Tensor forward(const std::vector<torch::Tensor>& inputs, const torch::Tensor& cond = {});

  GraphMLPOptions options;
  torch::nn::ModuleList first{nullptr};         // one Linear per input (registered names)
  std::vector<torch::nn::Linear> first_linears;  // the same Linears, typed
  std::vector<torch::nn::Linear> layers;  // layers 1 .. layers-1, registered as layer1, layer2, ...
  torch::nn::LayerNorm norm{nullptr};
  ConditionalLayerNorm cond_norm{nullptr};  // instead of norm, under the same name
};
TORCH_MODULE(GraphMLP);

// The grid graph; edges run sender -> receiver and are sorted by receiver.
struct GridGraph {
  torch::Tensor senders;         // [E] int64
  torch::Tensor receivers;       // [E] int64
  torch::Tensor edge_features;   // [E, 3] (dlat, dlon, length) / radius
  torch::Tensor node_positions;  // [N, 2] (lat, lon) scaled to [-1, 1]
};
GridGraph build_grid_graph(int64_t lat, int64_t lon, int64_t radius);
// The same on a point set (one latitude and longitude per cell, degrees): each cell receives from
// its (2r+1)^2 - 1 nearest cells by great-circle distance, as many as a rectangle's interior cell;
// edge features are (dlat, dlon cos(lat), length) in units of the grid's spacing (the mean distance
// to the nearest cell), over r; node positions (lat / 90, lon / 180 - 1).
GridGraph build_cell_graph(const std::vector<double>& latitudes, const std::vector<double>& longitudes, int64_t radius);

// Embeds nodes [B, N, C] and the (batch-independent) edges [E, 3] into latents.
class GraphEncoderImpl : public torch::nn::Module {
 public:
  GraphEncoderImpl(int64_t node_in, int64_t latent, int64_t mlp_layers);
  // -> {h [B, N, L], e [E, L]}
  std::vector<torch::Tensor> forward(const torch::Tensor& nodes, const torch::Tensor& node_positions,
                                     const torch::Tensor& edge_features);

  GraphMLP node_mlp{nullptr}, edge_mlp{nullptr};
};
TORCH_MODULE(GraphEncoder);

// One interaction-network round with residual updates of edges and nodes. The node MLP sums the
// incoming edges' new latents e' = e + MLP(...) (aggregate_residual, the gnn's way), or only their
// update MLP(...) (GraphCast's, Lam et al. 2023 eq. 9-11: the residual is added after the round).
class InteractionLayerImpl : public torch::nn::Module {
 public:
  // condition > 0: both MLPs' LayerNorms are conditional on a noise embedding this wide.
  InteractionLayerImpl(int64_t latent, int64_t mlp_layers, bool aggregate_residual = true, int64_t condition = 0);
  // h [B, N, L], e [B, E, L] or [E, L] -> {h', e' [B, E, L]}. h_senders [B, N + halo, L] (model
  // parallelism: h followed by the halo nodes other ranks own) is what senders index when given;
  // receivers index h. cond [B, N, condition]: the nodes' noise embedding (conditional layers only);
  // an edge's norm reads its receiver's.
  std::vector<torch::Tensor> forward(const torch::Tensor& h, const torch::Tensor& e, const torch::Tensor& senders,
                                     const torch::Tensor& receivers, const torch::Tensor& h_senders = {},
                                     const torch::Tensor& cond = {});

  GraphMLP edge_mlp{nullptr};  // on [e, h_sender, h_receiver]
  GraphMLP node_mlp{nullptr};  // on [h, sum of incoming e']
  bool aggregate_residual = true;
};
TORCH_MODULE(InteractionLayer);

class GraphNetImpl : public WeatherModelImpl {
 public:
  GraphNetImpl(const GraphNetOptions& options, const ModelShape& shape);
  torch::Tensor forward(torch::Tensor x) override;
  // The encoder node MLP's first Linear on the variables (input channels; the positions have a
  // Linear of their own) and the decoder's last Linear with its bias (output channels).
  std::vector<ChannelAxis> channel_axes() const override;

  int64_t num_nodes() const { return node_positions_.size(0); }
  int64_t num_edges() const { return senders_.size(0); }

  bool can_shard_nodes() const override { return true; }
  // Keeps the edges whose receivers this rank owns (a contiguous range: edges are sorted by
  // receiver) and works out the halo: the senders of those edges that other ranks own, fetched
  // before each processor layer by one exchange of every rank's send rows. The registered buffers
  // stay the whole graph's, so checkpoints are those of an unsharded run.
  void set_node_shard(const NodeShard& shard) override;
  // This rank's halo nodes (0 when not sharded).
  int64_t halo_nodes() const { return halo_index_.defined() ? halo_index_.numel() : 0; }
  int64_t halo_exchange_nodes() const override {
    return std::accumulate(send_rows_.begin(), send_rows_.end(), int64_t{0});
  }
  int64_t halo_node_width() const override { return latent_; }

 private:
  // Model parallelism (set_node_shard): the local graph, owned nodes first then the halo.
  bool sharded_ = false;
  int64_t owned_ = 0, latent_ = 0;
  torch::Tensor local_senders_, local_receivers_, local_edge_features_, local_positions_;
  torch::Tensor send_index_;  // [S] local rows this rank sends
  torch::Tensor halo_index_;  // [H] rows of the exchange's output that are this rank's halo nodes
  std::vector<int64_t> send_rows_;  // S of every rank
  std::function<torch::Tensor(const torch::Tensor&, const std::vector<int64_t>&)> exchange_;

  // Buffers, so that they move with the model.
  torch::Tensor senders_, receivers_, edge_features_, node_positions_;
  GraphEncoder encoder_{nullptr};
  std::vector<InteractionLayer> processors_;
  GraphMLP decoder_{nullptr};
  NoiseInjector noise_injector_{nullptr};  // conditional-norm noise: its noise_mlp
};

// estimate --analytic (gnn_memory.cpp): exact parameters, activations block by block, the graph.
int64_t gnn_parameter_count(const GraphNetOptions& o, const ModelShape& s);
ModelMemory gnn_activation_memory(const GraphNetOptions& o, const ModelShape& s, const FormulaSettings& f);
double gnn_buffer_bytes(const GraphNetOptions& o, const ModelShape& s, double param_bytes);
// The pieces GraphCast's formulas share: a GraphMLP's parameters and what it saves, on `rows`
// rows of width `hidden` out to `out` (models/graphcast).
int64_t graph_mlp_params(const std::vector<int64_t>& in, int64_t hidden, int64_t out, int64_t layers, bool norm);
void graph_mlp(Block& b, const Widths& w, double rows, double hidden, double out, int64_t layers, bool layer_norm);

ModelEntry gnn_entry();  // models/registry.cpp

}  // namespace wxtrain::models
