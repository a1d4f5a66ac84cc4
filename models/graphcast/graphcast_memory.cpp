// estimate --analytic for GraphCast (models/graphcast/graphcast.cpp), layer by layer.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "models/graphcast/graphcast.h"

namespace wxtrain::models {
namespace {

// The sizes of GraphCast's graph for a run: built as the model builds it (fast: a spatial index),
// cached for the last grid asked, per model-parallel size, since the activations and the buffers
// both need it.
//
// Under model parallelism (distributed.model_parallel = P > 1) the activations are one rank's: the
// grid split in bands as the trainer splits it, the graph cut as the model cuts it
// (shard_graphcast_graph, the code set_node_shard runs): the rank's grid cells and mesh nodes, the
// edges it receives, and per graph the halo it reads (halo: rows) through one exchange of every
// rank's send rows (exchanged; sent: the rank's own). Which rank: the one owning the most mesh
// nodes. Bands have equal rows, not equal area, and the mesh is uniform on the sphere, so a band
// near the equator owns more mesh nodes and edges than a polar one: at 0.25 degrees and P = 4
// rank 1 receives 2.4 times rank 0's mesh edges, and its activations are 55% larger. The grid's
// terms differ by at most a row between ranks, so the mesh decides which rank is largest, and GPUs
// per model must fit that one. On the storm region (a regional mesh) it is rank 0, the rank the
// traced stand-in runs (trainer/training_step.cpp BandGroup), which the tests compare with.
struct Halo {
  double halo = 0, exchanged = 0, sent = 0;
};
struct GraphCastSizes {
  double grid = 0, mesh = 0, g2m = 0, mesh_edges = 0, m2g = 0;
  int64_t ranks = 1;  // 1: the whole graph's (the buffers, whole on every rank)
  Halo g2m_halo, mesh_halo, m2g_halo;  // grid latents for grid2mesh; mesh latents for each processor layer and mesh2grid
};

GraphCastSizes graphcast_sizes(const GraphCastOptions& c, const ModelShape& s, int64_t model_parallel = 1) {
  // The last grid's sizes, per model-parallel size asked: GPUs per model (estimator/estimate.cpp)
  // asks for P = 1, 2, 3, ... in turn, and building the graph at 0.25 degrees takes seconds, so its
  // index tensors (16 bytes an edge) are kept and each further P costs only the partition (tenths
  // of a second at 0.25 degrees).
  using Key = std::tuple<std::vector<double>, std::vector<double>, int64_t, std::string, bool>;
  static std::mutex mutex;
  static Key key;
  static std::map<int64_t, GraphCastSizes> per_size;
  static std::shared_ptr<const GraphCastGraph> kept;
  auto [lat, lon] = graphcast_grid(s);
  const std::vector<int64_t> bounds = band_bounds(s, model_parallel);
  const int64_t P = bounds.empty() ? 1 : model_parallel;
  Key asked{std::move(lat), std::move(lon), c.mesh_refinement, c.graph, s.point_set};
  std::lock_guard<std::mutex> lock(mutex);
  if (asked != key) {
    key = std::move(asked);
    per_size.clear();
    kept.reset();
  }
  if (auto it = per_size.find(P); it != per_size.end()) return it->second;
  std::shared_ptr<const GraphCastGraph> g = kept;
  if (!g) {
    auto built = std::make_shared<GraphCastGraph>(build_model_graph(c, std::get<0>(key), std::get<1>(key), s.point_set));
    for (torch::Tensor* t : {&built->grid_features, &built->mesh_features, &built->g2m_features,
                             &built->mesh_edge_features, &built->m2g_features})
      *t = torch::Tensor();  // the partition reads the edges' ends only
    g = built;
  }
  kept = g;
  GraphCastSizes z;
  z.grid = static_cast<double>(g->grid_nodes);
  z.mesh = static_cast<double>(g->mesh_nodes);
  z.g2m = static_cast<double>(g->g2m_senders.size(0));
  z.mesh_edges = static_cast<double>(g->mesh_senders.size(0));
  z.m2g = static_cast<double>(g->m2g_senders.size(0));
  per_size[1] = z;
  if (P > 1) {
    // The rank owning the most mesh nodes (the first of equals).
    std::vector<int64_t> owned(static_cast<size_t>(P), 0);
    for (const int o : graphcast_mesh_owners(*g, bounds)) ++owned[static_cast<size_t>(o)];
    const int r = static_cast<int>(std::max_element(owned.begin(), owned.end()) - owned.begin());
    const GraphCastShard share = shard_graphcast_graph(*g, bounds, r);
    auto halo = [r](const ShardedGraph& sg) {
      return Halo{static_cast<double>(sg.halo_nodes()), static_cast<double>(sg.exchange_nodes()),
                  static_cast<double>(sg.send_rows[static_cast<size_t>(r)])};
    };
    z.ranks = P;
    z.grid = static_cast<double>(share.grid.owned_by(r));
    z.mesh = static_cast<double>(share.mesh.owned_by(r));
    z.g2m = static_cast<double>(share.g2m.edges.numel());
    z.mesh_edges = static_cast<double>(share.mesh_edges.edges.numel());
    z.m2g = static_cast<double>(share.m2g.edges.numel());
    z.g2m_halo = halo(share.g2m);
    z.mesh_halo = halo(share.mesh_edges);
    z.m2g_halo = halo(share.m2g);
    per_size[P] = z;
  }
  return z;
}

}  // namespace

// GraphCast (graphcast.cpp): GraphMLPs throughout. grid2mesh: embeddings of the grid nodes
// (variables + 3 positional features), mesh nodes (3), grid2mesh and mesh edges (4 each), the edge
// MLP on [e, h_grid, h_mesh], the mesh node MLP on [h, sum], the grid node MLP on h; a processor
// layer: the gnn's InteractionLayer; mesh2grid: the mesh2grid edge embedding, edge MLP, grid node
// MLP and the output MLP without LayerNorm. The graph is buffers.
int64_t graphcast_parameter_count(const GraphCastOptions& c, const ModelShape& s) {
  const int64_t L = c.latent, m = c.mlp_layers;
  auto mlp = [&](const std::vector<int64_t>& in, int64_t out = -1, bool norm = true) {
    return graph_mlp_params(in, L, out < 0 ? L : out, m, norm);
  };
  const int64_t k = s.conditional_noise;  // noise channels taken out of the input, into the norms
  const std::vector<int64_t> grid_in = c.grid_position_features ? std::vector<int64_t>{s.in_channels - k, 3}
                                                                 : std::vector<int64_t>{s.in_channels - k};
  const int64_t grid2mesh = mlp(grid_in) + mlp({3}) + 2 * mlp({4}) + mlp({L, L, L}) + mlp({L, L}) + mlp({L});
  // A conditional layer's two MLPs end in ConditionalLayerNorms instead of LayerNorms.
  const int64_t processor = k > 0 ? mlp({L, L, L}, -1, false) + mlp({L, L}, -1, false) + 2 * conditional_norm_params(L, k)
                                  : mlp({L, L, L}) + mlp({L, L});
  const int64_t mesh2grid = mlp({4}) + mlp({L, L, L}) + mlp({L, L}) + mlp({L}, s.out_channels, false);
  return grid2mesh + c.processor_layers * processor + mesh2grid + (k > 0 ? noise_mlp_params(k) : 0);
}

// GraphCast (graphcast.cpp), per sample over Ng grid nodes, Nm mesh nodes, Eg grid2mesh,
// Em mesh and Ed = 3 Ng mesh2grid edges (under model parallelism the rank's, graphcast_sizes: its
// cells and mesh nodes, the edges it receives, plus the halo each graph reads). What only the graph's features feed (the mesh node and
// the three edge embeddings, the edge and receiver shares of grid2mesh's edge MLP) is the same for
// every sample: batch-independent (fixed), as the gnn's edge embedding.
//
// With model.edge_block, checkpointed or in inference, grid2mesh's and mesh2grid's edges are updated
// a block at a time (checkpointed, each block inside its block's replay): one block of edges exists
// at a time (Eg and Ed become the block in the edge terms), and a block's partial sum waits beside
// the running sum (one more node-sized tensor). Training without checkpointing saves every block's
// tensors: the whole set, as unblocked.
ModelMemory graphcast_activation_memory(const GraphCastOptions& c, const ModelShape& s, const FormulaSettings& f) {
  const Widths& w = f.widths;
  // Edge blocks hold one block at a time when checkpointed, and in inference (no graph).
  const bool one_edge_block_at_a_time = f.checkpointing || f.inference;
  ModelMemory m;
  const GraphCastSizes g = graphcast_sizes(c, s, f.model_parallel);
  m.ranks = g.ranks;
  const bool sharded = g.ranks > 1;
  const double Nm = g.mesh, Ng = g.grid, Em = g.mesh_edges;
  const bool blocked_g2m = one_edge_block_at_a_time && c.edge_block > 0 && static_cast<double>(c.edge_block) < g.g2m;
  const bool blocked_m2g = one_edge_block_at_a_time && c.edge_block > 0 && static_cast<double>(c.edge_block) < g.m2g;
  const double Eg = blocked_g2m ? static_cast<double>(c.edge_block) : g.g2m;
  const double Ed = blocked_m2g ? static_cast<double>(c.edge_block) : g.m2g;
  const int64_t k = s.conditional_noise;
  const double K = static_cast<double>(k);
  // The noise channels are narrowed off the input (a view): grid2mesh reads the others.
  const double L = static_cast<double>(c.latent), C = static_cast<double>(s.in_channels - k);
  const double O = static_cast<double>(s.out_channels);
  const int64_t layers = c.mlp_layers, Li = c.latent;
  // A latent read by two Linears: under autocast each takes a bf16 copy, otherwise both save it.
  const double read_twice = w.autocast ? 2 * w.low : w.high;
  // A Linear's saved input: under autocast its fresh bf16 copy, otherwise the tensor itself.
  const double read_once = w.autocast ? w.low : w.high;
  // Model parallelism: a graph's senders are this rank's `own` rows followed by its halo, which
  // with_halo (models/graph_shard.cpp) builds per layer: the send rows picked, every rank's gathered
  // by the exchange, the halo picked from those and the whole concatenated. None of them is saved
  // (index_select and cat keep indices and sizes), but they exist while the layer's forward runs,
  // and in backward their gradients do (the exchange's reduce-scatter hands the halo's back).
  auto halo_rows = [&](double own, const Halo& h) {
    return gather(own * L, w.high, (h.sent + h.exchanged + h.halo + own + h.halo) * L * w.high);
  };
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
  if (!sharded) {
    enc.layers.push_back(keep(Ng * L, read_twice));  // h_grid, read by the edge and grid node MLPs
  } else {
    // The grid node MLP reads h_grid, the edge MLP's sender projection h_grid with its halo.
    enc.layers.push_back(keep(Ng * L, read_once));
    enc.layers.push_back(halo_rows(Ng, g.g2m_halo));
    enc.layers.push_back(keep((Ng + g.g2m_halo.halo) * L, read_once));
  }
  // The sender share gathered onto the edges, plus the per-edge shared term: the edge MLP's input.
  enc.layers.push_back(gather((Ng + g.g2m_halo.halo) * L, w.high, 2 * Eg * L * w.low));
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
  enc.weights = static_cast<double>(graph_mlp_params(c.grid_position_features ? std::vector<int64_t>{s.in_channels - k, 3}
                                                                               : std::vector<int64_t>{s.in_channels - k},
                                                     Li, Li, layers, true) +
                                    graph_mlp_params({3}, Li, Li, layers, true) +
                                    2 * graph_mlp_params({4}, Li, Li, layers, true) +
                                    graph_mlp_params({Li, Li, Li}, Li, Li, layers, true) +
                                    graph_mlp_params({Li, Li}, Li, Li, layers, true) +
                                    graph_mlp_params({Li}, Li, Li, layers, true));
  m.blocks.push_back(enc);

  // Conditional-norm noise: the grid noise averaged onto the mesh nodes and the noise MLP on them
  // (outside every block, never checkpointed), whose output every processor layer reads; each
  // conditional norm as the gnn's (models/gnn/gnn_memory.cpp), without the gnn's measured
  // edge-sized term: the trace of GraphCast's layer (which sums the edge updates, not the updated
  // edges) does not hold it (MembersVsTraceGraph).
  if (k > 0) {
    m.blocks.push_back(noise_injector_block(w, Nm, K, f.checkpointing));
  }
  auto conditional = [&](double rows) {
    return Layer{"conditional norm", 2 * rows * L * w.high + rows * K * w.high, 0, 2 * rows * L * w.high};
  };

  // The processor is the gnn's interaction layer on the mesh; the grid latents wait beside it,
  // and so does their gradient from mesh2grid (carry).
  for (int64_t i = 0; i < c.processor_layers; ++i) {
    Block b;
    b.name = "processor" + std::to_string(i);
    // The gathers' backward hands the layer before both its gradients: nodes and (after the first
    // layer, whose edges are the batch-independent embedding) edges.
    // Sharded, both node projections read the mesh latents with their halo: a tensor of its own,
    // saved (unsharded they read the layer's input, which its checkpoint or the layer before keeps;
    // under autocast their bf16 copies are in the measured carry below, and grow by the halo).
    const double Hm = g.mesh_halo.halo;
    if (sharded) {
      b.layers.push_back(halo_rows(Nm, g.mesh_halo));
      b.layers.push_back(keep(w.autocast ? 2 * Hm * L : (Nm + Hm) * L, w.autocast ? w.low : w.high));
    }
    b.layers.push_back(gather((Nm + Hm + (i == 0 ? 0 : Em)) * L, w.high, 2 * Em * L * w.low + Nm * L * w.low));
    graph_mlp(b, w, Em, L, L, layers, true);
    if (k > 0) b.layers.push_back(conditional(Em));
    b.layers.push_back(keep(Em * L, w.high));  // e_new: the residual sum
    b.layers.push_back(gather(Em * L, w.high));
    b.layers.push_back(keep(Nm * L, w.low));
    graph_mlp(b, w, Nm, L, L, layers, true);
    if (k > 0) b.layers.push_back(conditional(Nm));
    b.layers.push_back(keep(Nm * L, w.high));  // h_new
    b.inputs = Nm * L * w.high + (i == 0 ? 0 : Em * L * w.high) + Nm * K * w.high;  // with the noise embedding
    // Measured, not derived (tests/estimator): the edge path's backward holds about two more
    // edge-sized gradients than the layers' own, checkpointed or not (the gnn's replay_grads).
    // Under autocast the bf16 gradients of the edge Linears live beside their fp32 casts (measured).
    b.carry = (Nm + Ng) * L * w.high + 2 * Em * L * w.high + (w.autocast ? 2 * Em * L * w.low : 0);
    b.weights = static_cast<double>(graph_mlp_params({Li, Li, Li}, Li, Li, layers, k == 0) +
                                    graph_mlp_params({Li, Li}, Li, Li, layers, k == 0) +
                                    (k > 0 ? 2 * conditional_norm_params(Li, k) : 0));
    m.blocks.push_back(b);
  }

  Block dec;
  dec.name = "mesh2grid";
  // Sender (mesh) and receiver (grid) shares gathered onto the 3 Ng edges, plus the edge share.
  // Sharded, the sender projection reads the mesh latents with their halo (as a processor layer's).
  const double Hd = g.m2g_halo.halo;
  if (sharded) {
    dec.layers.push_back(halo_rows(Nm, g.m2g_halo));
    dec.layers.push_back(keep(w.autocast ? Hd * L : (Nm + Hd) * L, w.autocast ? w.low : w.high));
  }
  dec.layers.push_back(gather((Nm + Hd + Ng) * L, w.high, 2 * Ed * L * w.low + (Nm + Hd + Ng) * L * w.low));
  graph_mlp(dec, w, Ed, L, L, layers, true);
  dec.layers.push_back(gather(Ed * L, w.high, blocked_m2g ? Ng * L * w.low : 0));  // index_add into the grid nodes
  dec.layers.push_back(keep(Ng * L, w.low));
  graph_mlp(dec, w, Ng, L, L, layers, true);
  dec.layers.push_back(conv_or_linear(w, Ng * L, Ng * L));  // the updated grid latents into the output MLP
  graph_mlp(dec, w, Ng, L, O, layers, false);
  dec.inputs = (Nm + Ng) * L * w.high;
  // Measured, not derived: the gradients the edge path's backward holds beside the layers' own,
  // fitted to the trace on the storm region (AnalyticVsTrace.DISABLED_GraphCastCarryTerms in
  // tests/estimator prints the per-sample slopes), where mesh2grid's backward is the peak of every case:
  // - one edge-sized gradient (Ed x latent, fp32): the fp32 checkpointed trace to the byte;
  // - without checkpointing, one more: the fp32 trace holds 251 KB per sample above the formulas
  //   without it (Ed x latent x 4 = 228 KB), the bf16-mixed one the same;
  // - under autocast, the bf16 gradients handed back to the node projections and their running
  //   sums: 3 x grid nodes x latent, blocked or not (the blocked trace, and since the SiLU runs in
  //   bf16 the unblocked one too: with 3 x Ed the checkpointed bf16-mixed case was 216 KB per sample
  //   over, with 3 x Ng 12 KB under). Before the SiLU ran in bf16, the edges' bf16 gradients stood
  //   beside their fp32 casts: 3 x Ed.
  dec.carry = Ed * L * w.high + (f.checkpointing ? 0 : Ed * L * w.high) + (w.autocast ? 3 * Ng * L * w.low : 0);
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

double graphcast_buffer_bytes(const GraphCastOptions& c, const ModelShape& s, double param_bytes) {
  // Three edge sets (int64 senders and receivers, 4 features each), 3 positional features per
  // grid and mesh node, and the kept mesh node ids (int64, not a buffer: never cast).
  const GraphCastSizes g = graphcast_sizes(c, s);  // the whole graph's: every rank keeps it
  return (g.g2m + g.mesh_edges + g.m2g) * (16 + 4 * param_bytes) + 3 * param_bytes * (g.grid + g.mesh) + 8 * g.mesh;
}

}  // namespace wxtrain::models
