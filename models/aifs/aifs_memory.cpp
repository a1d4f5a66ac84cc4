// estimate --analytic for AIFS (models/aifs/aifs.cpp): exact parameters, activations per chunk.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "models/aifs/aifs.h"

namespace wxtrain::models {
namespace {

// The sizes of a mapper chunk: its senders, receivers and edges.
struct ChunkSizes {
  double senders = 0, receivers = 0, edges = 0;
};
// One halo exchange as a rank sees it (models/graph_shard.h ShardedGraph): the rows it sends
// (index_select of its own), the rows the exchange gathers (every rank's send rows: the all-gather's
// output), and its halo (picked out of them and concatenated after its own rows).
struct Exchange {
  double sent = 0, gathered = 0, halo = 0;
};
// The graph's sizes, of the whole grid or (ranks > 1) of one rank of a model-parallel group: its
// cells, hidden nodes, kept edges and chunks of them, and the three exchanges (aifs.cpp
// AifsImpl::forward: the encoder's input rows, the processor's window, the decoder's latents).
struct AifsSizes {
  double data = 0, hidden = 0, encoder_edges = 0, decoder_edges = 0;
  std::vector<ChunkSizes> encoder, decoder;
  int64_t ranks = 1;
  Exchange encoder_halo, window_halo, decoder_halo;
  double window_before = 0;  // the processor's key rows ahead of the rank's first query
};

// The graph as the model builds it (a spatial index: a second for N320 on O96), cached for the
// last grid and graph options asked, with its sizes per chunk counts and model-parallel size asked
// since: the parameters (learned edge features), activations and buffers all need it, and
// `estimate` asks for several chunk counts (the memory savers) and model-parallel sizes (GPUs per
// model).
struct AifsGraph {
  LatLonPoints data, hidden;
  BipartiteEdges encoder, decoder;
};

ChunkSizes chunk_sizes(const EdgeChunk& c) {
  return {static_cast<double>(c.senders.size(0)), static_cast<double>(c.dst_end - c.dst_begin),
          static_cast<double>(c.edge_end - c.edge_begin)};
}

Exchange exchange_of(const ShardedGraph& g, int rank) {
  return {static_cast<double>(g.send_rows[static_cast<size_t>(rank)]), static_cast<double>(g.exchange_nodes()),
          static_cast<double>(g.halo_nodes())};
}

// model_parallel: the sizes of rank 0 (the widest band, what a one-process trace runs) of a group of
// that many; 1 (or a grid with fewer rows than ranks): the whole grid.
AifsSizes aifs_sizes(const AifsOptions& o, const ModelShape& s, int64_t model_parallel = 1) {
  static std::mutex mutex;
  static std::tuple<std::vector<double>, std::vector<double>, std::string, double, int64_t, int64_t> key;
  static AifsGraph graph;
  static std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, AifsSizes> cached;
  const CellCoordinates cells = cell_coordinates(s);
  const std::vector<int64_t> bounds = band_bounds(s, model_parallel);
  const int64_t P = bounds.empty() ? 1 : model_parallel;
  std::lock_guard<std::mutex> lock(mutex);
  auto k = std::make_tuple(cells.latitudes, cells.longitudes, o.hidden_grid, o.cutoff_factor, o.max_neighbours,
                           o.decoder_neighbours);
  if (k != key || !graph.encoder.senders.defined()) {
    graph.data = LatLonPoints{cells.latitudes, cells.longitudes};
    graph.hidden = octahedral_grid(octahedral_number(o.hidden_grid, "model.hidden_grid"));
    graph.encoder = cutoff_edges(graph.data, graph.hidden, o.cutoff_factor, o.max_neighbours);
    graph.decoder = knn_edges(graph.hidden, graph.data, o.decoder_neighbours);
    cached.clear();
    key = std::move(k);
  }
  // The window matters only to a rank's halo.
  const auto sizes_key = std::make_tuple(o.encoder_chunks, o.decoder_chunks, P, P > 1 ? o.window_size : 0);
  if (auto it = cached.find(sizes_key); it != cached.end()) return it->second;
  AifsSizes sizes;
  if (P == 1) {
    sizes = {static_cast<double>(graph.data.size()), static_cast<double>(graph.hidden.size()),
             static_cast<double>(graph.encoder.edges()), static_cast<double>(graph.decoder.edges()), {}, {}, 1, {}, {}, {}};
    for (const EdgeChunk& c : chunk_edges(graph.encoder, graph.hidden.size(), o.encoder_chunks))
      sizes.encoder.push_back(chunk_sizes(c));
    for (const EdgeChunk& c : chunk_edges(graph.decoder, graph.data.size(), o.decoder_chunks))
      sizes.decoder.push_back(chunk_sizes(c));
  } else {
    // Rank 0's share, partitioned by the model's own code (AifsImpl::set_node_shard).
    const AifsPartition part = aifs_partition(graph.data, graph.hidden, graph.encoder, graph.decoder, bounds, 0, o);
    sizes.data = static_cast<double>(part.cell_count);
    sizes.hidden = static_cast<double>(part.hidden_count);
    sizes.encoder_edges = static_cast<double>(part.encoder.edges.numel());
    sizes.decoder_edges = static_cast<double>(part.decoder.edges.numel());
    for (const EdgeChunk& c : part.encoder_chunks) sizes.encoder.push_back(chunk_sizes(c));
    for (const EdgeChunk& c : part.decoder_chunks) sizes.decoder.push_back(chunk_sizes(c));
    sizes.ranks = P;
    sizes.encoder_halo = exchange_of(part.encoder, 0);
    sizes.window_halo = exchange_of(part.window, 0);
    sizes.decoder_halo = exchange_of(part.decoder, 0);
    sizes.window_before = static_cast<double>(part.window_before);
  }
  cached[sizes_key] = sizes;
  return sizes;
}

// The additive masks of a processor layer's sliding-window attention, in elements (aifs.cpp
// sliding_window_attention, whose blocks this walks): per block of queries [a, b), its slab of keys
// [k0, k1); SDPA turns the boolean mask into one in the queries' dtype and saves it for its
// backward, so every layer's masks live as long as its activations, whatever the batch. None when
// the layer attends to the whole sequence. Seen at the traced peak (tests/models/test_aifs.cpp
// AifsChunks.DISABLED_PeakTensors: rows x keys x 2 bytes per block under bf16-mixed).
double window_mask_elements(int64_t N, int64_t K, int64_t window, int64_t q_offset) {
  if (q_offset == 0 && K == N && (window <= 0 || window >= N - 1)) return 0;
  if (window <= 0 || window >= K) window = K;
  const int64_t block = std::max<int64_t>(std::min(window, K), 64);
  double elements = 0;
  for (int64_t a = 0; a < N; a += block) {
    const int64_t b = std::min(N, a + block);
    const int64_t k0 = std::max<int64_t>(0, a + q_offset - window), k1 = std::min(K, b + q_offset + window);
    elements += static_cast<double>((b - a) * (k1 - k0));
  }
  return elements;
}

int64_t mapper_params(int64_t src_in, int64_t dst_in, int64_t C, int64_t M, int64_t edge_dim, int64_t out, bool embed_src) {
  int64_t n = (embed_src ? linear_params(src_in, C) : 0) + linear_params(dst_in, C);
  n += 5 * linear_params(C, C) + linear_params(edge_dim, C);  // key, query, value, self, projection; edge
  n += 3 * norm_params(C) + linear_params(C, M) + linear_params(M, C);
  if (out > 0) n += norm_params(C) + linear_params(C, out);
  return n;
}

// One mapper chunk, per sample (aifs.cpp GraphTransformerMapperImpl::forward): Ns senders of width
// `src_in`, Nr receivers of width `dst_in`, E edges, C channels in H heads, MLP width M; the edge
// features (batch-independent) go to `fixed`.
Block mapper_chunk(const std::string& name, const Widths& w, const ChunkSizes& c, double src_in, double dst_in, double C,
                   double H, double M, double edge_dim, double out, bool embed_src) {
  const double Ns = c.senders, Nr = c.receivers, E = c.edges;
  // A tensor two Linears read: one saved copy in fp32, one bf16 copy each under autocast.
  const double read_twice = w.autocast ? 2 * w.low : w.high;
  Block b;
  b.name = name;
  b.layers.push_back(gather(Ns * src_in, w.high));  // the chunk's senders
  if (embed_src) b.layers.push_back(conv_or_linear(w, Ns * src_in, Ns * C));
  b.layers.push_back(conv_or_linear(w, Nr * dst_in, Nr * C));
  b.layers.push_back(norm(w, Ns * C, Ns));
  b.layers.push_back(norm(w, Nr * C, Nr));
  b.layers.push_back({"key/value", Ns * C * read_twice, Ns * C * w.high, 2 * Ns * C * w.low});
  b.layers.push_back({"query/self", Nr * C * read_twice, Nr * C * w.high, 2 * Nr * C * w.low});
  // q_i . (k_j + e): the product saves both edge-sized operands; exp its output; the division its
  // denominator; alpha (v_j + e) both factors.
  b.layers.push_back({"q.k", 2 * E * C * w.low, E * C * w.low, E * C * w.low});
  b.layers.push_back(softmax(E * H, 4));
  b.layers.push_back({"normalise", E * H * 4, E * H * 4, E * H * 4});
  b.layers.push_back({"alpha v", (E * C + E * H) * w.low, E * C * w.low, E * C * w.low});
  // The messages summed into the receivers (index_add): its backward hands an edge-sized gradient on.
  b.layers.push_back(gather(E * C, w.high));
  const size_t after_attention = b.layers.size();
  b.layers.push_back(conv_or_linear(w, Nr * C, Nr * C));  // projection
  b.layers.push_back(norm(w, Nr * C, Nr));
  b.layers.push_back(conv_or_linear(w, Nr * C, Nr * M));
  b.layers.push_back(activation(Nr * M, w.low));
  b.layers.push_back(conv_or_linear(w, Nr * M, Nr * C));
  if (out > 0) {
    b.layers.push_back(norm(w, Nr * C, Nr));
    b.layers.push_back(conv_or_linear(w, Nr * C, Nr * out));
  }
  // The chunk's locals that nothing saves, alive from their statement until the chunk returns
  // (aifs.cpp GraphTransformerMapperImpl::forward): q, k, v, x_r, alpha, the receivers' max and sum,
  // the messages and their sum `attention`. They are beside every layer from the projection on, so
  // the end of a chunk's forward (or of its replay) can be the step's peak: seen at the traced peak,
  // tests/models/test_aifs.cpp AifsChunks.DISABLED_PeakTensors.
  const double locals = (3 * Nr * C + 2 * Ns * C + E * C + E * H + 2 * Nr * H) * w.low;
  for (size_t i = after_attention; i < b.layers.size(); ++i) b.layers[i].temp += locals;
  b.forward_peak = true;
  // The edge term e = lin_edge(edge features) [E, C] is the same for every sample: alive through the
  // chunk's forward, and the add that broadcasts it hands back its gradient summed over the batch,
  // one batch-independent edge-sized tensor while the chunk's backward runs (seen at the traced
  // peak, as above). The edge features themselves are the caller's (fixed).
  (void)edge_dim;
  b.fixed_forward = E * C * w.low;
  b.fixed_backward = E * C * w.low;
  b.output = Nr * (out > 0 ? out : C) * w.high;
  return b;
}

// The highest point of anemoi_mlp in inference on N nodes (aifs.cpp run_mlp): its input (a norm's
// output) beside the first Linear's output, let go before GELU, which runs in place; the second
// Linear beside the hidden one. Under autocast GELU runs out of place, and the traced decoder chunk
// holds at its peak a node-sized bf16 tensor beside the step's `out`, the bf16 hidden one and two
// fp32 hidden-sized tensors (models.AifsChunks.DISABLED_PeakTensors with AIFS_INFERENCE=1
// AIFS_PRECISION=bf16-mixed AIFS_CHUNKS=1): counted as seen; which op makes the fp32 pair was not
// traced down (not GELU's autocast: the CPU's runs GELU in bf16).
double mlp_inference(const Widths& w, double N, double C, double M) {
  const double lo = w.low, hi = w.high;
  if (w.autocast) return N * C * lo + N * M * lo + 2 * N * M * hi;
  return std::max({N * C * hi + N * M * lo, N * M * lo + N * C * lo});
}

// Inference: nothing is saved for backward; the mapper's forward (aifs.cpp
// GraphTransformerMapperImpl::forward) lets each intermediate go once it is read and, with autograd
// off, sums and multiplies in place, so the live set is what the computation needs (issue 23). Each
// "layer" here is one step of it: `temp` all it allocates (its result included), `saved` what it
// leaves alive after it (negative where it frees more than it makes), so that the estimator's
// forward walk (analytic.cpp replay_peak: earlier layers' saved + this one's temp) is the live set.
// Per sample; the chunk's edge term e = lin_edge(edge features) is batch-independent and is counted
// by the caller (fixed). Linears give `lo`, norms `hi`; under autocast a Linear on an fp32 input
// makes a bf16 copy of it while it runs.
Block mapper_chunk_inference(const std::string& name, const Widths& w, const ChunkSizes& c, double src_in, double C,
                             double H, double M, double out, bool embed_src, bool embed_dst_input) {
  const double Ns = c.senders, Nr = c.receivers, E = c.edges, lo = w.low, hi = w.high;
  const double cast = w.autocast ? lo : 0;  // a Linear's bf16 copy of its fp32 input, per element
  Block b;
  b.name = name;
  b.layers.push_back({"senders", Ns * src_in * hi, 0, Ns * src_in * hi});  // the caller's index_select, alive throughout
  // The embeddings: the per-sample Linear, the node features' Linear added in place.
  const double src_embedded = embed_src ? Ns * C * lo : 0, dst_embedded = embed_dst_input ? Nr * C * lo : 0;
  if (embed_src) b.layers.push_back({"embed src", src_embedded, 0, Ns * C * lo + Ns * src_in * cast});
  if (embed_dst_input) b.layers.push_back({"embed dst", dst_embedded, 0, Nr * C * lo});
  // The norms (the embedded source let go after its norm); each Linear reads its norm's output,
  // which is let go after the last of them.
  b.layers.push_back({"norm src", Ns * C * hi - src_embedded, 0, Ns * C * hi + 8 * Ns});
  b.layers.push_back({"norm dst", Nr * C * hi, 0, Nr * C * hi + 8 * Nr});
  b.layers.push_back({"self/query", 2 * Nr * C * lo - Nr * C * hi, 0, 2 * Nr * C * lo + Nr * C * cast});
  b.layers.push_back({"key/value", 2 * Ns * C * lo - Ns * C * hi, 0, 2 * Ns * C * lo + Ns * C * cast});
  // k[senders] + e in place, then k let go; q[receivers] times it in place, then the keys and q let go.
  b.layers.push_back({"key_j", E * C * lo - Ns * C * lo, 0, E * C * lo});
  b.layers.push_back({"q.k", -Nr * C * lo, 0, E * C * lo});
  // alpha = the product summed over each head's channels (divided in place); the product let go.
  b.layers.push_back({"alpha", E * H * lo - E * C * lo, 0, E * H * lo});
  // The softmax per receiver: the receivers' max and its gather (subtracted in place), exp (a new
  // tensor, alpha let go), the receivers' sum and its gather (divided in place).
  b.layers.push_back({"softmax", 0, 0, E * H * lo + Nr * H * lo});
  // (v[senders] + e) * a in place; v and a let go; summed into the receivers' zeros in place.
  b.layers.push_back({"messages", E * C * lo - Ns * C * lo - E * H * lo, 0, E * C * lo});
  b.layers.push_back({"index_add", Nr * C * lo - E * C * lo, 0, Nr * C * lo});
  // attention + x_r in place (x_r let go), the projection (attention let go), + dst in place.
  b.layers.push_back({"projection", -Nr * C * lo - dst_embedded, 0, Nr * C * lo});
  // out + mlp(norm(out)) in place (aifs.cpp run_mlp): the norm's output and the first Linear's,
  // then GELU (in place, or a second hidden-sized tensor under autocast), then the second Linear's.
  b.layers.push_back({"mlp", 0, 0, mlp_inference(w, Nr, C, M)});
  if (out > 0) b.layers.push_back({"extractor", 0, 0, Nr * C * hi + Nr * out * hi});
  b.output = Nr * (out > 0 ? out : C) * hi;
  return b;
}

}  // namespace

// AIFS (aifs.cpp): the learned node and edge features, the two mappers (graph-transformer layers
// with their embeddings; the decoder's head), the processor's transformer layers.
int64_t aifs_parameter_count(const AifsOptions& o, const ModelShape& s) {
  const AifsSizes g = aifs_sizes(o, s);
  const int64_t C = o.num_channels, M = aifs_mlp_hidden(o), edge_dim = 3 + o.edge_trainable;
  const int64_t k = s.conditional_noise;  // noise channels taken out of the input, into the norms
  const int64_t data_in = s.in_channels - k + 4 + o.data_trainable, hidden_in = 4 + o.hidden_trainable;
  int64_t n = static_cast<int64_t>(g.data) * o.data_trainable + static_cast<int64_t>(g.hidden) * o.hidden_trainable +
              static_cast<int64_t>(g.encoder_edges + g.decoder_edges) * o.edge_trainable;
  n += mapper_params(data_in, hidden_in, C, M, edge_dim, 0, true);
  n += mapper_params(C, data_in, C, M, edge_dim, s.out_channels, false);
  // A conditional norm has no affine parameters, but Linears of the noise embedding to its scale
  // and bias; the noise MLP is Linear, GELU, Linear, LayerNorm.
  const int64_t norms = k > 0 ? 2 * conditional_norm_params(C, k) : 2 * norm_params(C);
  const int64_t layer = norms + 3 * linear_params(C, C, false) + linear_params(C, C) + linear_params(C, M) +
                        linear_params(M, C);
  if (k > 0) n += noise_mlp_params(k);
  return n + o.processor_layers * layer;
}

// Inference (no graph), walked as the forward runs (aifs.cpp AifsImpl::forward): a block per mapper
// chunk and per processor layer, each with what is alive beside it (forward_temp: the chunks'
// outputs so far, the latents the decoder reads). Checked against the traced forward at small sizes
// (tests/estimator AnalyticVsTrace, the aifs rows).
ModelMemory aifs_inference_memory(const AifsOptions& o, const ModelShape& s, const FormulaSettings& f,
                                  const AifsSizes& g) {
  const Widths& w = f.widths;
  const double C = static_cast<double>(o.num_channels), M = static_cast<double>(aifs_mlp_hidden(o));
  const double data_in = static_cast<double>(s.in_channels - s.conditional_noise + 4 + o.data_trainable);
  const double Nh = g.hidden, Nd = g.data, H = static_cast<double>(o.mapper_num_heads), out = static_cast<double>(s.out_channels);
  const double hi = w.high, lo = w.low;
  ModelMemory m;
  m.output = out * Nd;
  // The largest chunk's e (lin_edge of its edges, shared by the batch), the edge features of both
  // mappers and the node features (trainable cat positions), alive through the whole forward.
  double largest_e = 0;
  for (const auto* chunks : {&g.encoder, &g.decoder})
    for (const ChunkSizes& c : *chunks) largest_e = std::max(largest_e, c.edges * C * lo);
  const double edge_dim = static_cast<double>(3 + o.edge_trainable);
  const double fixed = largest_e + (g.encoder_edges + g.decoder_edges) * edge_dim * hi +
                       (Nd * (4 + o.data_trainable) + Nh * (4 + o.hidden_trainable)) * hi;
  // The outputs of a mapper's chunks are kept until they are concatenated (a copy, when chunked).
  auto add_mapper = [&](const std::vector<ChunkSizes>& chunks, const std::string& name, double src_in, double o_ch,
                        bool embed_src, bool embed_dst_input, double beside) {
    double done = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      Block b = mapper_chunk_inference(name + std::to_string(i), w, chunks[i], src_in, C, H, M, o_ch, embed_src,
                                       embed_dst_input);
      b.forward_temp = beside + done;
      done += b.output;
      m.blocks.push_back(std::move(b));
    }
    if (chunks.size() > 1) {  // torch::cat of the chunks' outputs
      Block cat;
      cat.name = name + "_cat";
      cat.layers.push_back({"cat", 0, 0, done});
      cat.forward_temp = beside + done;
      m.blocks.push_back(std::move(cat));
    }
  };
  add_mapper(g.encoder, "encoder", data_in, 0, true, false, 0);
  // A transformer layer: the layer's input and the processor's input (latent_skip) beside it; the
  // norm, q/k/v, the attention's output and its parts' concatenation, the projection and the MLP.
  for (int64_t l = 0; l < o.processor_layers; ++l) {
    Block b;
    b.name = "processor" + std::to_string(l);
    // (aifs.cpp TransformerLayerImpl::forward: the norm's output and q/k/v let go after the
    // attention, its output after its reshaped copy, that after the projection; y += mlp in place.)
    b.forward_temp = 2 * Nh * C * hi;
    b.layers.push_back({"norm", Nh * C * hi, 0, Nh * C * hi});
    b.layers.push_back({"attention", Nh * C * lo - Nh * C * hi, 0, 5 * Nh * C * lo});
    b.layers.push_back({"reshape", 0, 0, Nh * C * lo});
    b.layers.push_back({"projection", Nh * C * hi - Nh * C * lo, 0, Nh * C * lo + Nh * C * hi});
    b.layers.push_back({"mlp", 0, 0, mlp_inference(w, Nh, C, M)});
    m.blocks.push_back(std::move(b));
  }
  add_mapper(g.decoder, "decoder", C, out, false, true, 2 * Nh * C * hi);
  // The output [B, Nd, out] transposed back to [B, out, 1, Nd]: reshape copies it.
  Block last;
  last.name = "output";
  last.forward_temp = Nd * out * hi;
  last.layers.push_back({"reshape", 0, 0, Nd * out * hi});
  m.blocks.push_back(std::move(last));
  m.blocks.front().fixed_saved = fixed;
  return m;
}

// Per sample, block by block: a block per encoder chunk, per group of processor layers
// (model.processor_chunks) and per decoder chunk, which are what a checkpointed step replays. A
// component whose checkpoint_* is off keeps everything it saved even with train.checkpointing
// (its block keeps its saved bytes as its "inputs" and replays nothing).
ModelMemory aifs_activation_memory(const AifsOptions& o, const ModelShape& s, const FormulaSettings& f) {
  const Widths& w = f.widths;
  // Model parallelism (FormulaSettings::model_parallel): rank 0 of the group, partitioned as the
  // model partitions itself (aifs_partition); its band's cells, its range of hidden nodes, its kept
  // edges, and the halos it reads. The whole graph's tensors every rank keeps whole (the node and
  // edge features with their learned columns) are counted whole.
  const AifsSizes g = aifs_sizes(o, s, f.inference ? 1 : f.model_parallel);
  const AifsSizes whole = g.ranks > 1 ? aifs_sizes(o, s) : g;
  const double C = static_cast<double>(o.num_channels), M = static_cast<double>(aifs_mlp_hidden(o));
  const double k = static_cast<double>(s.conditional_noise);
  const double data_in = static_cast<double>(s.in_channels - s.conditional_noise + 4 + o.data_trainable);
  const double hidden_in = static_cast<double>(4 + o.hidden_trainable), edge_dim = static_cast<double>(3 + o.edge_trainable);
  const double Nh = g.hidden, Nd = g.data, H = static_cast<double>(o.num_heads), out = static_cast<double>(s.out_channels);
  ModelMemory m;
  m.output = out * Nd;
  m.ranks = g.ranks;
  if (f.inference) return aifs_inference_memory(o, s, f, g);
  auto finish = [&](Block b, bool checkpointed, double inputs) {
    b.inputs = inputs;
    if (f.checkpointing && !checkpointed) {
      b.inputs += b.saved();
      b.layers.clear();
    }
    m.blocks.push_back(std::move(b));
  };
  // The graph's batch-independent inputs, made once per step (aifs.cpp AifsImpl::forward: the node
  // and edge features cat their learned columns, a copy even without them) and alive through it:
  // the mappers' Linears save them, and a checkpointed chunk keeps them as its inputs.
  const double hi = w.high;
  const double cell_features = 4.0 + static_cast<double>(o.data_trainable);
  const double hidden_features = 4.0 + static_cast<double>(o.hidden_trainable);
  // Sharded, the node features are made whole and the mappers read a view of the rank's rows (kept
  // whole by it), the encoder's senders a gathered copy of its cells and halo; the edge features
  // are made whole and the rank's edges gathered from them (the copies the mappers save).
  const double He = g.encoder_halo.halo;
  const double graph_inputs =
      g.ranks > 1 ? (whole.data * cell_features + whole.hidden * hidden_features + (Nd + He) * cell_features +
                     (g.encoder_edges + g.decoder_edges) * edge_dim) * hi
                  : (Nd * cell_features + Nh * hidden_features + (g.encoder_edges + g.decoder_edges) * edge_dim) * hi;
  // Their gradients, where they have learned columns (model.*_trainable > 0): each mapper's chunks
  // hand back a gradient of the whole tensor they narrow or gather from (the edge features, the
  // cells'), summed over the chunks and held until the mapper's last chunk is done; the cells' are
  // read by both mappers, so two of them meet (the sum so far and the chunk's; both seen at the
  // traced peak of the decoder's backward, tests/models/test_aifs.cpp AifsChunks.DISABLED_PeakTensors).
  // Sharded, the tensor a mapper narrows is the rank's copy of its edges; the cells' and hidden
  // nodes' the whole ones (a narrow's or a gather's gradient is of its whole input).
  const double edge_grads_enc = o.edge_trainable > 0 ? g.encoder_edges * edge_dim * hi : 0;
  const double edge_grads_dec = o.edge_trainable > 0 ? g.decoder_edges * edge_dim * hi : 0;
  const double cell_grads = o.data_trainable > 0 ? 2 * whole.data * cell_features * hi : 0;
  const double hidden_grads = o.hidden_trainable > 0 ? whole.hidden * hidden_features * hi : 0;
  // Once the decoder's backward is done, the gradients of the whole tensors it read (the decoder's
  // edge features, the cells') wait for the node that made them, at the start of the forward: the
  // autograd engine runs it last (its sequence number is the lowest), so they are alive through the
  // processor's and the encoder's backward. Seen at the traced peak in the processor's backward
  // (tests/models/test_aifs.cpp AifsChunks.DISABLED_PeakTensors with AIFS_MP=2: [Ed_whole, 11] and
  // [Nd_whole, 12] fp32).
  const double after_decoder = (o.edge_trainable > 0 ? whole.decoder_edges * edge_dim * hi : 0) +
                               (o.data_trainable > 0 ? whole.data * cell_features * hi : 0);
  // Each checkpoint keeps the CPU generator's state until its backward (ops/checkpoint.cpp, on a GPU
  // too: 5,056 bytes in this LibTorch, seen at the traced peak beside every checkpointed chunk).
  const double checkpoints =
      !f.checkpointing ? 0
                       : (o.checkpoint_encoder ? static_cast<double>(g.encoder.size()) : 0) +
                             (o.checkpoint_processor ? static_cast<double>(o.processor_chunks) : 0) +
                             (o.checkpoint_decoder ? static_cast<double>(g.decoder.size()) : 0);
  const double rng_states = checkpoints * 5056;
  for (size_t i = 0; i < g.encoder.size(); ++i) {
    Block b = mapper_chunk("encoder" + std::to_string(i), w, g.encoder[i], data_in, hidden_in, C,
                           static_cast<double>(o.mapper_num_heads), M, edge_dim, 0, true);
    b.fixed_backward += edge_grads_enc + cell_grads + hidden_grads +
                        (o.edge_trainable > 0 ? whole.decoder_edges * edge_dim * hi : 0);
    if (i == 0) b.fixed_saved = b.fixed_kept = graph_inputs + rng_states;
    // Sharded, the senders are the band's input rows and the halo's (their concatenation, which the
    // chunks read and a checkpoint keeps).
    finish(std::move(b), o.checkpoint_encoder, i == 0 ? (Nd + He) * data_in * w.high : 0);
  }
  // Conditional-norm noise: the noise MLP on the hidden nodes (never checkpointed), whose output
  // every processor layer reads; a conditional norm saves its input, the normalised tensor and
  // 1 + scale(noise) for the product, and the noise embedding for its two Linears.
  if (k > 0) {
    m.blocks.push_back(noise_injector_block(w, Nh, k, f.checkpointing));
  }
  // The processor's stream (its input, the residual sums) is the encoder's output: a Linear's plus
  // a Linear's, bf16 under autocast, and so is each LayerNorm's input, which it saves (seen at the
  // traced peak: [B, Nh, C] bf16 norm inputs, tests/models/test_aifs.cpp
  // AifsChunks.DISABLED_PeakTensors with AIFS_MP=2 AIFS_PRECISION=bf16-mixed).
  const double stream = w.autocast ? w.low : w.high;
  auto layer_norm = [&]() -> Layer {
    if (k <= 0) return {"norm", Nh * C * stream + 8 * Nh, Nh * C * stream, Nh * C * stream};
    return {"conditional norm", 3 * Nh * C * w.high + 8 * Nh + Nh * k * w.high, Nh * C * w.high, 2 * Nh * C * w.high};
  };
  // A transformer layer on Nh nodes: LayerNorm, q/k/v (one input), attention (q, k, v, its output
  // and log-sum-exp per head), the projection's input, LayerNorm, MLP. Sharded, the keys and values
  // are of the rank's nodes widened by the window halo (K nodes: aifs.cpp WindowKeys), fetched per
  // layer: the rows sent, the exchange's, the halo, their concatenation with the rank's rows and
  // that reordered into sequence order (the keys' input, which k and v save).
  const Exchange& wh = g.window_halo;
  const double K = Nh + wh.halo;
  const bool sharded = g.ranks > 1;
  const int64_t groups = o.processor_chunks;
  const int64_t per_chunk = o.processor_layers / groups;
  for (int64_t c = 0; c < groups; ++c) {
    Block b;
    b.name = "processor" + std::to_string(c);
    for (int64_t l = 0; l < per_chunk; ++l) {
      b.layers.push_back(layer_norm());
      if (sharded) {
        b.layers.push_back({"window halo", 0, (wh.gathered + 2 * K) * C * w.high,
                            (wh.sent + wh.gathered + wh.halo + 2 * K) * C * w.high});
        b.layers.push_back({"q/k/v", (Nh * C + K * C) * (w.autocast ? w.low : w.high) + (w.autocast ? K * C * w.low : 0),
                            (Nh + K) * C * w.high, (Nh + 2 * K) * C * w.low});
        b.layers.push_back({"attention", (2 * Nh + 2 * K) * C * w.low + Nh * H * 4, (Nh + 2 * K) * C * w.low, Nh * C * w.low});
      } else {
        b.layers.push_back({"q/k/v", Nh * C * (w.autocast ? 3 * w.low : w.high), Nh * C * w.high, 3 * Nh * C * w.low});
        b.layers.push_back({"attention", (4 * Nh * C) * w.low + Nh * H * 4, 3 * Nh * C * w.low, Nh * C * w.low});
      }
      b.layers.push_back(conv_or_linear(w, Nh * C, Nh * C));
      b.layers.push_back(layer_norm());
      b.layers.push_back(conv_or_linear(w, Nh * C, Nh * M));
      b.layers.push_back(activation(Nh * M, w.low));
      b.layers.push_back(conv_or_linear(w, Nh * M, Nh * C));
    }
    b.output = Nh * C * stream;
    // The attention masks, batch-independent: with the block's saved tensors (all of them without
    // checkpointing; during its replay and backward with it).
    const double masks = static_cast<double>(per_chunk) * w.low *
                         window_mask_elements(static_cast<int64_t>(Nh), static_cast<int64_t>(K), o.window_size,
                                              static_cast<int64_t>(g.window_before));
    b.fixed_saved = masks;
    b.fixed_backward = after_decoder;
    if (f.checkpointing && o.checkpoint_processor) b.fixed_forward = masks, b.fixed_backward += masks;
    if (f.checkpointing && !o.checkpoint_processor) b.fixed_kept = masks;
    finish(std::move(b), o.checkpoint_processor, Nh * C * stream + Nh * k * w.high);
  }
  // Sharded, the decoder's senders are the rank's latents and the halo's (their concatenation,
  // which a checkpoint keeps), gathered through one exchange whose backward hands the halo's
  // gradients back to their owners.
  const Exchange& dh = g.decoder_halo;
  for (size_t i = 0; i < g.decoder.size(); ++i) {
    Block b = mapper_chunk("decoder" + std::to_string(i), w, g.decoder[i], C, data_in, C,
                           static_cast<double>(o.mapper_num_heads), M, edge_dim, out, false);
    b.fixed_backward += edge_grads_dec + cell_grads;
    if (sharded && i == 0)
      b.layers.insert(b.layers.begin(), Layer{"decoder halo", 0, (dh.gathered + Nh) * C * w.high,
                                              (dh.sent + dh.gathered + dh.halo + Nh + dh.halo) * C * w.high});
    finish(std::move(b), o.checkpoint_decoder, i == 0 ? (Nh + dh.halo) * C * stream : 0);
  }
  return m;
}

// The graph: both edge sets (two int64 indices and 3 features each), the node positions.
double aifs_buffer_bytes(const AifsOptions& o, const ModelShape& s, double param_bytes) {
  const AifsSizes g = aifs_sizes(o, s);
  const double edges = g.encoder_edges + g.decoder_edges;
  return edges * (2 * 8 + 3 * param_bytes) + (g.data + g.hidden) * 4 * param_bytes;
}

// Whether the encoder's and decoder's chunks save more than the processor's blocks in the formulas
// (per sample, what a step keeps or replays): chunking then lowers the peak. Without a grid (a run
// file not yet set up) the answer is yes: the mappers dominate at every published size.
static bool aifs_mappers_dominate(const RunConfig& config) {
  ModelShape shape;
  try {
    shape = model_shape(config);
  } catch (const std::exception&) {
    return true;
  }
  const ModelMemory m = aifs_activation_memory(config.model.options.as<AifsOptions>(), shape,
                                               {widths(config.train.precision), config.train.checkpointing, false});
  // What the step holds of each: all it saves, or, checkpointed (one block replayed at a time),
  // the largest block's.
  double mappers = 0, processor = 0;
  for (const Block& b : m.blocks) {
    double& side = b.name.rfind("processor", 0) == 0 ? processor : mappers;
    side = config.train.checkpointing ? std::max(side, b.saved()) : side + b.saved();
  }
  return mappers > processor;
}

// The mappers' edge-sized tensors are computed in encoder_chunks / decoder_chunks groups of
// receivers, one after another (anemoi's num_chunks).
std::vector<ModelMemorySaver> aifs_memory_savers(const RunConfig& config, bool inference) {
  const auto& o = config.model.options.as<AifsOptions>();
  const int64_t chunks = std::max(o.encoder_chunks, o.decoder_chunks);
  if (chunks >= 64 || (!inference && !aifs_mappers_dominate(config))) return {};
  const std::string more = std::to_string(2 * chunks);
  return {{"model.encoder_chunks = " + more + ", model.decoder_chunks = " + more, [chunks](RunConfig& c) {
             auto& a = c.model.options.as<AifsOptions>();
             a.encoder_chunks = 2 * chunks;
             a.decoder_chunks = 2 * chunks;
           }}};
}

}  // namespace wxtrain::models
