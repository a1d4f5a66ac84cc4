#pragma once
// AIFS (Lang et al. 2024, "AIFS -- ECMWF's data-driven forecasting system", arXiv:2406.01465):
// ECMWF's encoder-processor-decoder, as anemoi-models 0.19 builds it (AnemoiModelEncProcDec with
// GraphTransformerForwardMapper, TransformerProcessor, GraphTransformerBackwardMapper; layers/
// {mapper,block,processor,attention}.py), on the graphs of models/aifs/aifs_graph.h.
//
// The grid is any ModelShape: its cells (cell_coordinates(): a rectangle row-major, a point set in
// its own order) are the data nodes. Per cell the encoder reads the input channels, sin/cos of the
// cell's latitude and longitude and model.data_trainable learned features; per hidden node
// (octahedral grid model.hidden_grid) sin/cos of its position and model.hidden_trainable learned
// features; per encoder/decoder edge its 3 features (length, direction) and model.edge_trainable
// learned ones.
//
// Blocks, in forward order:
//   encoder                   graph transformer, data cells -> hidden nodes (cut-off edges): both
//                             sides embedded by a Linear, one graph-attention layer (per head,
//                             softmax over a node's incoming edges of q_i . (k_j + e_ij) / sqrt(d),
//                             summing alpha (v_j + e_ij)), a projection with a self term, the
//                             residual of the embedded hidden node and an MLP (GELU, ratio
//                             model.mlp_ratio) with its residual
//   noise_injector            only with ModelShape::conditional_noise (AIFS-ENS): the last input
//                             channels (an ensemble member's noise fields) averaged onto the hidden
//                             nodes over the encoder's edges and embedded by anemoi's noise MLP; the
//                             processor's LayerNorms are then conditional on it
//   processor0 .. P-1         pre-norm transformer layers on the hidden nodes: multi-head
//                             self-attention (no q/k/v bias), each node attending to the nodes within
//                             model.window_size places of it (anemoi's sliding window in SDPA), and
//                             an MLP; model.latent_skip adds the processor's input to its output
//   decoder                   graph transformer, hidden nodes -> data cells (k nearest hidden nodes):
//                             the cells' own input features embedded as the receivers, then
//                             LayerNorm + Linear to the output channels
// The model returns the decoder's output; anemoi's SkipConnection residual (the newest input
// state) is what wxtrain's rollout adds.
//
// Chunks (model.encoder_chunks, model.decoder_chunks): the receivers are split into contiguous
// groups and each group is computed with only its edges and the senders they read, one group after
// another (anemoi's GraphPartition); with train.checkpointing each group is its own checkpoint, so
// backward holds one group's edge-sized tensors at a time. model.processor_chunks groups processor
// layers into checkpoints. None changes the output.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/aifs/aifs_graph.h"
#include "models/aifs/aifs_options.h"
#include "models/graph_shard.h"
#include "models/noise_conditioning.h"
#include "models/registry.h"
#include "models/weather_model.h"

namespace wxtrain::models {

// anemoi's compute_mlp_hidden_dim: num_channels x mlp_hidden_ratio, halves rounded up.
inline int64_t aifs_mlp_hidden(const AifsOptions& o) {
  return static_cast<int64_t>(static_cast<double>(o.num_channels) * o.mlp_hidden_ratio + 0.5);
}

// anemoi's MLP(n_extra_layers=0, layer_norm=False): Linear, GELU, Linear (submodules "0" and "2",
// as anemoi names them).
torch::nn::Sequential anemoi_mlp(int64_t in, int64_t hidden, int64_t out);

// One graph-transformer layer with its embeddings and output head (a mapper): anemoi's
// GraphTransformerForwardMapper (out_channels = 0: returns the hidden latents) or
// GraphTransformerBackwardMapper (node_data_extractor to out_channels).
// anemoi embeds [input channels, node features] with one Linear; here the node features (sin/cos of
// the position and the learned ones, the same for every sample) have a Linear of their own without
// bias, summed: the same function (the import splits anemoi's weight by columns), the channels'
// weight alone depends on the run's channels (channel_axes), and the node-feature term is computed
// once for the batch.
class GraphTransformerMapperImpl : public torch::nn::Module {
 public:
  // src_channels: the senders' per-sample width (0: the senders are latents, used as they are);
  // src_nodes / dst_nodes: widths of the batch-independent node features (0: none);
  // dst_channels: the receivers' per-sample width (0: none).
  GraphTransformerMapperImpl(int64_t src_channels, int64_t src_nodes, int64_t dst_channels, int64_t dst_nodes,
                             int64_t channels, int64_t heads, int64_t mlp_hidden, int64_t edge_dim, int64_t out_channels);
  // One chunk: the senders' per-sample input [B, Ns, *] and node features [Ns, *] (either may be
  // undefined where the mapper has none), the receivers' likewise, edge features [E, edge_dim],
  // edge endpoints local to these senders and receivers. Returns [B, Nr, channels or out_channels].
  torch::Tensor forward(const torch::Tensor& src, const torch::Tensor& src_nodes, const torch::Tensor& dst,
                        const torch::Tensor& dst_nodes, const torch::Tensor& edge_attr, const torch::Tensor& senders,
                        const torch::Tensor& receivers);

  int64_t heads, head_dim;
  torch::nn::Linear emb_nodes_src{nullptr}, emb_nodes_src_position{nullptr};
  torch::nn::Linear emb_nodes_dst{nullptr}, emb_nodes_dst_position{nullptr};
  torch::nn::Linear lin_key{nullptr}, lin_query{nullptr}, lin_value{nullptr}, lin_self{nullptr}, lin_edge{nullptr},
      projection{nullptr};
  torch::nn::LayerNorm layer_norm_attention_src{nullptr}, layer_norm_attention_dest{nullptr},
      layer_norm_mlp_dst{nullptr};
  torch::nn::Sequential node_dst_mlp{nullptr};
  torch::nn::Sequential node_data_extractor{nullptr};  // decoder: LayerNorm, Linear
};
TORCH_MODULE(GraphTransformerMapper);

// Model parallelism: this rank's queries are a contiguous range of the hidden sequence, and its keys
// and values come from that range widened by the window on either side. fetch: the layer's normed
// input of the range [B, n, C] -> that of the widened range [B, before + n + after, C], in sequence
// order, the other ranks' rows through a halo exchange. Empty: the layer holds the whole sequence.
struct WindowKeys {
  std::function<torch::Tensor(const torch::Tensor&)> fetch;
  int64_t before = 0;  // key rows ahead of this rank's first query
};

// anemoi's TransformerProcessorBlock: x + attention(LN(x)), then + MLP(LN(x)). With condition > 0
// both LayerNorms are conditional (AIFS-ENS) and forward takes the conditioning vector.
class TransformerLayerImpl : public torch::nn::Module {
 public:
  TransformerLayerImpl(int64_t channels, int64_t heads, int64_t mlp_hidden, int64_t window, int64_t condition = 0);
  // [B, N, C], [B, N, condition]
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cond = {}, const WindowKeys& keys = {});

  int64_t heads, window;
  torch::nn::LayerNorm layer_norm_attention{nullptr}, layer_norm_mlp{nullptr};
  ConditionalLayerNorm cond_norm_attention{nullptr}, cond_norm_mlp{nullptr};  // registered under the names above
  torch::nn::Linear lin_q{nullptr}, lin_k{nullptr}, lin_v{nullptr}, projection{nullptr};
  torch::nn::Sequential mlp{nullptr};
};
TORCH_MODULE(TransformerLayer);

// Sliding-window attention, exact: softmax over the keys within `window` places of each query
// (all keys when window = 0 or window >= N), computed in query blocks of the window's size so that
// no N x N score matrix is made. q: [B, H, N, d]; k, v: [B, H, K, d], query i at key position
// i + q_offset (model parallelism: a rank's queries against its widened range of keys; K = N and
// q_offset 0 otherwise).
torch::Tensor sliding_window_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       int64_t window, int64_t q_offset = 0);

// The receivers of a dst-sorted edge set split into `chunks` contiguous groups as anemoi's
// get_balanced_partition_sizes splits them, and for each group its edges [edge_begin, edge_end)
// and the distinct senders they read.
struct EdgeChunk {
  int64_t dst_begin = 0, dst_end = 0, edge_begin = 0, edge_end = 0;
  torch::Tensor senders;        // [S] the distinct senders, ascending
  torch::Tensor local_senders;  // [E_chunk] positions in `senders`
  torch::Tensor local_receivers;  // [E_chunk] receiver - dst_begin
};
std::vector<EdgeChunk> chunk_edges(const BipartiteEdges& edges, int64_t receivers, int64_t chunks);

// Model parallelism (docs/distributed.md): rank `rank`'s share of AIFS's graphs when the data cells
// are split at `bounds` (NodeShard::bounds): its cells and its contiguous range of the hidden
// sequence (aifs_hidden_owners), the encoder's and decoder's kept edges with their halos, the
// processor's window halo (window_size nodes on either side of its range, clipped; every node when
// the window covers the sequence) and the mappers' chunks of its local edges (on the CPU).
// AifsImpl::set_node_shard builds the model's from it, and the formulas (aifs_memory.cpp) count
// it, so both see the same partition.
struct AifsPartition {
  int64_t cell_begin = 0, cell_count = 0, hidden_begin = 0, hidden_count = 0;
  ShardedGraph encoder, decoder, window;
  int64_t window_before = 0;  // key rows ahead of the rank's first query
  std::vector<EdgeChunk> encoder_chunks, decoder_chunks;
};
AifsPartition aifs_partition(const LatLonPoints& data, const LatLonPoints& hidden, const BipartiteEdges& encoder,
                             const BipartiteEdges& decoder, const std::vector<int64_t>& bounds, int rank,
                             const AifsOptions& options);
// The rank owning each hidden node (AifsImpl::hidden_owners).
std::vector<int> aifs_hidden_owners(const LatLonPoints& data, const LatLonPoints& hidden,
                                    const std::vector<int64_t>& bounds);

class AifsImpl : public WeatherModelImpl {
 public:
  AifsImpl(const AifsOptions& options, const ModelShape& shape);
  torch::Tensor forward(torch::Tensor x) override;
  // The encoder's source embedding on the input channels (its first in_channels columns) and the
  // decoder's receiver embedding likewise; the output head's last Linear (output channels).
  std::vector<ChannelAxis> channel_axes() const override;

  const AifsOptions& options() const { return options_; }
  const LatLonPoints& hidden_grid() const { return hidden_; }
  const BipartiteEdges& encoder_edges() const { return encoder_edges_; }
  const BipartiteEdges& decoder_edges() const { return decoder_edges_; }

  // Model parallelism (docs/distributed.md): the rank owns its band of data cells and a contiguous
  // range of the hidden sequence (hidden_owners); the encoder keeps the edges into its hidden
  // nodes, fetching the input rows of the data cells other ranks own; each processor layer
  // attends for its own hidden nodes, fetching the normed input of the window_size nodes on either
  // side of its range; the decoder keeps the edges into its cells, fetching the hidden latents
  // other ranks own. Buffers and learned features stay whole (checkpoints are one process's).
  // Conditional-norm noise (AIFS-ENS) is refused.
  bool can_shard_nodes() const override { return true; }
  void set_node_shard(const NodeShard& shard) override;
  // The processor's exchange (one per layer): every rank's send rows, of num_channels values.
  int64_t halo_exchange_nodes() const override { return sharded_ ? window_halo_.exchange_nodes() : 0; }
  int64_t halo_node_width() const override { return options_.num_channels; }
  // The encoder's exchange (input rows of the data cells, in_channels wide) and the decoder's
  // (hidden latents, num_channels wide).
  int64_t encoder_exchange_nodes() const { return sharded_ ? encoder_shard_.exchange_nodes() : 0; }
  int64_t decoder_exchange_nodes() const { return sharded_ ? decoder_shard_.exchange_nodes() : 0; }
  MapperHalos mapper_halos() const override {
    return {encoder_exchange_nodes(), shape().in_channels, decoder_exchange_nodes(), options_.num_channels};
  }
  // The rank owning each hidden node, given the data cells' bands: the hidden sequence (north to
  // south) cut into equal contiguous ranges, one per rank (the first nodes % ranks of them one node
  // longer), the northernmost range to the northernmost band: the hidden space's work is per node,
  // so equal ranges balance it, wherever the bands lie.
  std::vector<int> hidden_owners(const std::vector<int64_t>& bounds) const;

  // ZeRO-3's units: the blocks' parameters less the learned node and edge features, which the
  // forward reads before the mappers run (and the decoder reads the encoder's data features).
  std::vector<std::vector<torch::Tensor>> block_parameters() const override;

 private:
  // Model parallelism (set_node_shard).
  bool sharded_ = false;
  NodeShard shard_;
  int64_t cell_begin_ = 0, cell_count_ = 0, hidden_begin_ = 0, hidden_count_ = 0;
  ShardedGraph encoder_shard_, decoder_shard_, window_halo_;
  int64_t window_before_ = 0;
  torch::Tensor encoder_source_ids_;  // [cells + halo] the encoder's local senders' cell ids
  std::vector<EdgeChunk> local_encoder_chunks_, local_decoder_chunks_;
  // The mapper chunk by chunk; inputs as GraphTransformerMapperImpl::forward takes them whole.
  torch::Tensor run_mapper(const GraphTransformerMapper& mapper, const std::vector<EdgeChunk>& chunks,
                           const std::vector<torch::Tensor>& inputs, bool checkpointed) const;

  AifsOptions options_;
  LatLonPoints data_, hidden_;
  BipartiteEdges encoder_edges_, decoder_edges_;
  std::vector<EdgeChunk> encoder_chunks_, decoder_chunks_;
  torch::Tensor latlons_data_, latlons_hidden_;  // buffers [N, 4]: sin lat, sin lon, cos lat, cos lon
  // Learned features (anemoi's TrainableTensor, zeros at first), parameters of the encoder (the
  // decoder reads the cells' too): encoder.data_trainable [Nd, *], encoder.hidden_trainable
  // [Nh, *], {encoder,decoder}.edge_trainable [E, *]; undefined when their width is 0.
  torch::Tensor data_trainable_, hidden_trainable_, encoder_edge_trainable_, decoder_edge_trainable_;
  GraphTransformerMapper encoder_{nullptr}, decoder_{nullptr};
  std::vector<TransformerLayer> processor_;
  // Conditional-norm noise (ModelShape::conditional_noise > 0): noise_injector.noise_mlp.
  NoiseInjector noise_injector_{nullptr};  // conditional-norm noise: its noise_mlp
};

// anemoi-models' AnemoiModelEncProcDec state_dict as ours: names mapped, the edges' learned
// features permuted from anemoi's edge order (its graph provider's dst-sorted edge_index, [2, E]:
// senders, receivers) to ours. Every tensor of anemoi's is accounted for, or an Error names it.
StateDict aifs_state_from_anemoi(const StateDict& anemoi, const AifsImpl& model,
                                 const torch::Tensor& anemoi_encoder_edge_index,
                                 const torch::Tensor& anemoi_decoder_edge_index);

// estimate --analytic (aifs_memory.cpp).
int64_t aifs_parameter_count(const AifsOptions& o, const ModelShape& s);
ModelMemory aifs_activation_memory(const AifsOptions& o, const ModelShape& s, const FormulaSettings& f);
double aifs_buffer_bytes(const AifsOptions& o, const ModelShape& s, double param_bytes);
// Twice the mapper chunks (up to 64): always for inference; for training where the mappers hold
// more than the processor in the formulas (chunking then lowers the peak).
std::vector<ModelMemorySaver> aifs_memory_savers(const RunConfig& config, bool inference);

ModelEntry aifs_entry();  // models/registry.cpp

}  // namespace wxtrain::models
