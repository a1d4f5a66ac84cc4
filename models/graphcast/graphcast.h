#pragma once
// GraphCast (Lam et al. 2023, "Learning skillful medium-range global weather forecasting", Science
// 382, arXiv:2212.12794; reference code google-deepmind/graphcast): an encoder-processor-decoder
// GNN whose processor runs on an icosahedral multi-mesh instead of the grid.
//
// The graph (built once, kept as buffers so it moves with the model):
//   mesh       the icosahedron refined model.mesh_refinement = R times, nodes on the unit sphere
//              (level r: 10 x 4^r + 2 nodes, 30 x 4^r edges); the multi-mesh keeps the edges of
//              every level 0..R in both directions (M6: 40,962 nodes, 327,660 directed edges).
//   grid2mesh  every grid point sends to every mesh node within 0.6 x the longest edge of the finest
//              mesh (chord distance on the unit sphere, the paper's radius).
//   mesh2grid  every grid point receives from the 3 nodes of the finest-mesh triangle holding it.
// Node features: sin(lat) (the reference's cosine of the polar angle; the paper says "cosine of
// the latitude", which could not tell the hemispheres apart), cos(lon), sin(lon); grid nodes add
// the input channels, mesh nodes have the positional features only. Edge features: the chord
// length and the sender-minus-receiver vector in the receiver's local frame (rotated to latitude
// 0, longitude 0), both divided by the longest edge of their edge set, as the reference does.
//
// The grid is where the data says (ModelShape latitudes/longitudes), or a regular global grid of
// lat x lon with both poles and longitudes from 0 (721 x 1440 is ERA5's 0.25 degrees). Mesh nodes
// that no grid point sends to or reads from are dropped with their edges, so a regional grid (the
// 33 x 36 storm data over North America) keeps a small regional mesh; on a global grid at the
// published pairings (1 degree with M5, 0.25 degree with M6) every node is kept.
//
// Blocks, in forward order:
//   grid2mesh                     embeds grid nodes, mesh nodes, grid2mesh and mesh edges; one
//                                 interaction round updates the mesh nodes, and the grid nodes by
//                                 their own MLP (residuals on both)
//   processor0 .. processor{P-1}  interaction networks on the multi-mesh (models/gnn/gnn.h
//                                 InteractionLayer, aggregating the edge updates as the paper)
//   mesh2grid                     embeds the mesh2grid edges; one interaction round updates the
//                                 grid nodes; an MLP without LayerNorm maps them to the outputs
// Every MLP is model.mlp_layers Linears with SiLU (swish) between them and LayerNorm on its output
// (GraphCast: 2 Linears, one hidden layer of model.latent). Widths: model.latent;
// depth: model.processor_layers.
//
// Edge blocks (model.edge_block = n > 0): grid2mesh's and mesh2grid's edge updates run n edges at a
// time (edge embedding, gathers, edge MLP, sum into the receivers), and with checkpointing each
// block is a checkpoint of its own inside the block's replay, saving only node-level inputs. At
// 0.25 degrees one edge-sized tensor of the whole set (3.1 M mesh2grid edges x 512 latents) is
// 3-6 GiB and the edge MLP makes several: blocks keep one block's worth at a time, as the GraphCast
// maintainers' "edge update in blocks" does. The result equals the unblocked update.
#include <array>
#include <functional>
#include <optional>
#include <vector>

#include "models/gnn/gnn.h"
#include "models/graph_shard.h"
#include "models/graphcast/graphcast_options.h"
#include "models/registry.h"
#include "models/weather_model.h"

namespace wxtrain::models {

// ---- the graph, exposed for the tests and the estimator ----

using Vec3 = std::array<double, 3>;
using Face = std::array<int64_t, 3>;

// The icosahedron and its refinements. Level r uses the first 10 x 4^r + 2 vertices (refining
// appends the edge midpoints, pushed out onto the sphere), so node ids are the same at every level.
// faces[r] are level r's triangles, counter-clockwise seen from outside; the four children of
// faces[r][f] are faces[r + 1][4f .. 4f + 3] (which walk_to_face relies on).
struct IcosahedralMesh {
  std::vector<Vec3> vertices;
  std::vector<std::vector<Face>> faces;
  int64_t refinement() const { return static_cast<int64_t>(faces.size()) - 1; }
};
IcosahedralMesh icosahedral_mesh(int64_t refinement);
// Splits every face of the finest level in four, `refinement` times; midpoint_of(a, b) places the
// new vertex of edge a-b.
void refine_icosahedral_mesh(IcosahedralMesh& mesh, int64_t refinement,
                             const std::function<Vec3(const Vec3&, const Vec3&)>& midpoint_of);
// DeepMind's icosahedron and refinements (google-deepmind/graphcast icosahedral_mesh.py, which
// PhysicsNeMo's GraphCastNet copies), vertex for vertex: the same node ids, and the same float32
// positions bit for bit (its numpy arithmetic reproduced; models/graphcast/physicsnemo_graph.cpp).
IcosahedralMesh deepmind_icosahedral_mesh(int64_t refinement);

// The directed edges of level r alone (both directions of each of its 30 x 4^r edges), and of the
// multi-mesh (levels 0..R together; no two levels share an edge: refining splits every edge).
void mesh_level_edges(const IcosahedralMesh& mesh, int64_t level, std::vector<int64_t>& senders,
                      std::vector<int64_t>& receivers);
void multimesh_edges(const IcosahedralMesh& mesh, std::vector<int64_t>& senders, std::vector<int64_t>& receivers);

// The longest edge of the finest level, as a chord of the unit sphere.
double longest_finest_edge(const IcosahedralMesh& mesh);

// The finest-level face holding `p` (a unit vector), found by walking down from the 20 faces of
// the icosahedron: R x 4 + 20 tests instead of a search over all 20 x 4^R faces.
int64_t walk_to_face(const IcosahedralMesh& mesh, const Vec3& p);

Vec3 lat_lon_to_xyz(double lat_deg, double lon_deg);

// A regular global grid: n latitudes from 90 to -90 (both poles), n longitudes from 0 eastwards.
std::vector<double> global_latitudes(int64_t n);
std::vector<double> global_longitudes(int64_t n);

// Everything the model keeps as buffers. Grid node i is row i / lon, column i % lon (the input's
// flattened [lat, lon]); mesh node k is kept_mesh_nodes[k] of the full mesh.
struct GraphCastGraph {
  int64_t grid_nodes = 0, mesh_nodes = 0;
  double g2m_radius = 0;                   // chord on the unit sphere
  torch::Tensor kept_mesh_nodes;           // [Nm] int64 ids in the full refined mesh
  torch::Tensor grid_features;             // [Ng, 3] float: sin lat, cos lon, sin lon
  torch::Tensor mesh_features;             // [Nm, 3]
  torch::Tensor g2m_senders, g2m_receivers, g2m_features;    // grid -> mesh: [Eg] int64 x2, [Eg, 4]
  torch::Tensor mesh_senders, mesh_receivers, mesh_edge_features;  // multi-mesh: [Em], [Em], [Em, 4]
  torch::Tensor m2g_senders, m2g_receivers, m2g_features;    // mesh -> grid: [3 Ng], [3 Ng], [3 Ng, 4]
};

// The graph for a grid of latitudes x longitudes (degrees) on the R-times refined mesh. Uses a
// spatial index (mesh nodes bucketed in cubes of the query radius) for grid2mesh and the
// refinement hierarchy for mesh2grid: O(grid points) rather than O(grid x mesh).
GraphCastGraph build_graphcast_graph(const std::vector<double>& latitudes, const std::vector<double>& longitudes,
                                     int64_t refinement, double radius_fraction = 0.6);
// The same graph on cells: one latitude and longitude per grid node (a point set: reduced
// Gaussian, anemoi's cells), in the tensors' order. build_graphcast_graph is this on the
// rectangle's cells, row-major, so a rectangle's graph is unchanged.
GraphCastGraph build_graphcast_cell_graph(const std::vector<double>& latitudes, const std::vector<double>& longitudes,
                                          int64_t refinement, double radius_fraction = 0.6);

// PhysicsNeMo's GraphCastNet graph (model.graph = "physicsnemo"; physicsnemo_graph.cpp), built by
// its rules on the given grid: DeepMind's mesh; grid2mesh from the 4 nearest mesh nodes within 0.6 x
// the longest finest edge; mesh2grid from the corners of the face (of any level) whose centroid is
// nearest; mesh node features (cos, sin, cos) of latitude and longitude in degrees, as it computes
// them; edge features (sender - receiver in the receiver's frame, then the length) over the longest
// edge of the set; float32 throughout, with the reference's own operations, so that on its grid the
// graph is the reference's. A grid that covers the sphere keeps every mesh node (as the reference);
// a regional grid keeps the nodes it talks to. Grid features are the wxtrain ones.
GraphCastGraph build_physicsnemo_graph(const std::vector<double>& latitudes, const std::vector<double>& longitudes,
                                       int64_t refinement);
// The graph a model with these options builds on this grid (model.graph picks the rules). With
// `point_set`, latitudes/longitudes are one per cell (graphcast_grid of a point-set shape), and
// model.graph = "physicsnemo", a rectangle's, is refused.
GraphCastGraph build_model_graph(const GraphCastOptions& options, const std::vector<double>& latitudes,
                                 const std::vector<double>& longitudes, bool point_set = false);
// Whether a grid reaches both poles (within one row) and closes the circle of longitudes (no gap
// wider than 1.5 columns): a global grid.
bool covers_the_sphere(const std::vector<double>& latitudes, const std::vector<double>& longitudes);

// The grid a model of `shape` is built on: the shape's coordinates, or a regular global grid; for
// a point set, one latitude and longitude per cell.
std::pair<std::vector<double>, std::vector<double>> graphcast_grid(const ModelShape& shape);

// Model parallelism's partition of a graph (GraphCastImpl::set_node_shard, and estimate --analytic's
// per-rank formula, graphcast_memory.cpp, which must count what the model keeps): the grid cells in
// the ranks' bands (bounds: rank r owns cells [bounds[r], bounds[r + 1])), the mesh nodes as
// graphcast_mesh_owners assigns them, and each of the three edge sets cut to `rank` (the edges whose
// receivers it owns, its halo and what each exchange moves).
struct GraphCastShard {
  NodePartition grid, mesh;
  ShardedGraph g2m, mesh_edges, m2g;
};
// The rank owning each mesh node (GraphCastImpl::mesh_owners says how it is chosen).
std::vector<int> graphcast_mesh_owners(const GraphCastGraph& graph, const std::vector<int64_t>& bounds);
GraphCastShard shard_graphcast_graph(const GraphCastGraph& graph, const std::vector<int64_t>& bounds, int rank);

// ---- blocks ----

// The encoder: embeddings, then grid -> mesh interaction. forward(grid inputs [B, Ng, C]) ->
// {grid latents [B, Ng, L], mesh latents [B, Nm, L], mesh edge latents [Em, L]}.
class Grid2MeshImpl : public torch::nn::Module {
 public:
  Grid2MeshImpl(int64_t in_channels, int64_t latent, int64_t mlp_layers, int64_t edge_block = 0,
                bool grid_position_features = true);
  // checkpoint_edge_blocks: checkpoint each edge block (the model's checkpointing is on).
  // grid_halo (model parallelism): the grid latents [B, Ng, L] -> those followed by the halo's,
  // which the graph's grid2mesh senders index; the grid's own rows are the first Ng.
  std::vector<torch::Tensor> forward(const torch::Tensor& grid, const GraphCastGraph& graph,
                                     bool checkpoint_edge_blocks = false,
                                     const std::function<torch::Tensor(const torch::Tensor&)>& grid_halo = {});

  GraphMLP grid_embed{nullptr};       // on [variables, grid features] (or the variables alone)
  GraphMLP mesh_embed{nullptr};       // on mesh features
  GraphMLP g2m_edge_embed{nullptr};   // on grid2mesh edge features
  GraphMLP mesh_edge_embed{nullptr};  // on multi-mesh edge features (used by the processor)
  GraphMLP edge_mlp{nullptr};         // on [e, h_grid sender, h_mesh receiver]
  GraphMLP mesh_node_mlp{nullptr};    // on [h_mesh, sum of incoming edge updates]
  GraphMLP grid_node_mlp{nullptr};    // on h_grid (grid nodes receive nothing here)
  int64_t edge_block = 0;             // model.edge_block
  bool grid_position_features = true;  // model.grid_position_features
};
TORCH_MODULE(Grid2Mesh);

// The decoder: forward(mesh latents [B, Nm, L], grid latents [B, Ng, L]) -> outputs [B, Ng, C_out].
class Mesh2GridImpl : public torch::nn::Module {
 public:
  Mesh2GridImpl(int64_t latent, int64_t out_channels, int64_t mlp_layers, int64_t edge_block = 0);
  // mesh_halo (model parallelism): the mesh latents -> those followed by the halo's, which the
  // graph's mesh2grid senders index.
  torch::Tensor forward(const torch::Tensor& mesh, const torch::Tensor& grid, const GraphCastGraph& graph,
                        bool checkpoint_edge_blocks = false,
                        const std::function<torch::Tensor(const torch::Tensor&)>& mesh_halo = {});

  GraphMLP m2g_edge_embed{nullptr};  // on mesh2grid edge features
  GraphMLP edge_mlp{nullptr};        // on [e, h_mesh sender, h_grid receiver]
  GraphMLP grid_node_mlp{nullptr};   // on [h_grid, sum of incoming edge updates]
  GraphMLP output_mlp{nullptr};      // h_grid -> outputs, no LayerNorm
  int64_t edge_block = 0;            // model.edge_block
};
TORCH_MODULE(Mesh2Grid);

class GraphCastImpl : public WeatherModelImpl {
 public:
  GraphCastImpl(const GraphCastOptions& options, const ModelShape& shape);
  torch::Tensor forward(torch::Tensor x) override;
  // The grid embedding's first Linear on the variables (input channels; the positional features
  // have a Linear of their own) and the output MLP's last Linear with its bias (output channels).
  std::vector<ChannelAxis> channel_axes() const override;

  // The graph's buffers: rebuilt, not loaded, when a checkpoint of another grid initialises the
  // model (a global GraphCast fine-tuned on a region keeps the mesh over the region, its edges cut
  // and their features as the global mesh has them), or one without them (a reference's
  // state_dict: GraphCastNet builds its graph when built). The checkpoint's, where any differs from
  // this model's, are all replaced by this model's, and grid_change gives the sizes of both.
  GridFit fit_checkpoint_to_grid(std::map<std::string, torch::Tensor>& weights, const GridPlacement& where,
                                 const ModelShape& from) const override;

  const GraphCastGraph& graph() const { return graph_; }

  // Model parallelism (docs/distributed.md): the rank owns its band of grid cells and the mesh
  // nodes assigned to the band (mesh_owners); each of the three graphs keeps the edges whose
  // receivers the rank owns, and the senders other ranks own come through a halo exchange before
  // each message-passing layer: the grid latents for grid2mesh, the mesh latents for each processor
  // layer and for mesh2grid. The buffers stay the whole graph's (checkpoints are one process's).
  bool can_shard_nodes() const override { return true; }
  void set_node_shard(const NodeShard& shard) override;
  // The processor's exchange (the one each of its layers runs): every rank's send rows.
  int64_t halo_exchange_nodes() const override { return sharded_ ? mesh_shard_.exchange_nodes() : 0; }
  int64_t halo_node_width() const override { return latent_; }
  // The encoder's and decoder's exchanges (grid and mesh latents of the same width).
  int64_t encoder_exchange_nodes() const { return sharded_ ? g2m_shard_.exchange_nodes() : 0; }
  int64_t decoder_exchange_nodes() const { return sharded_ ? m2g_shard_.exchange_nodes() : 0; }
  MapperHalos mapper_halos() const override {
    return {encoder_exchange_nodes(), latent_, decoder_exchange_nodes(), latent_};
  }
  // The rank owning each mesh node, given the grid's bands: the owner of the grid cell halfway
  // (by id) between the lowest and the highest cell the node exchanges edges with (grid2mesh
  // senders, mesh2grid receivers). Bands are whole latitude rows (or runs of cells in their order),
  // so a mesh node goes to the band its grid neighbourhood lies in, and where that straddles two, to
  // the one holding its middle. A node with no grid edge (a global mesh can keep some) goes by id:
  // node m of Nm to rank m x P / Nm.
  std::vector<int> mesh_owners(const std::vector<int64_t>& bounds) const;
  // After set_node_shard: this rank's mesh nodes (whole-graph ids, ascending).
  const std::vector<int64_t>& owned_mesh_nodes() const { return mesh_nodes_.owned[static_cast<size_t>(shard_.rank)]; }

 private:
  int64_t latent_ = 0;
  // Model parallelism (set_node_shard).
  bool sharded_ = false;
  NodeShard shard_;
  NodePartition mesh_nodes_;
  ShardedGraph g2m_shard_, mesh_shard_, m2g_shard_;
  GraphCastGraph local_;  // this rank's graph: its cells, its mesh nodes, its edges (senders: owned then halo)

  // Sizes, and handles of the registered buffers (Module::to moves those in place, set_data, so
  // the handles follow); kept_mesh_nodes is not a buffer (informational, stays on the CPU).
  GraphCastGraph graph_;
  Grid2Mesh grid2mesh_{nullptr};
  std::vector<InteractionLayer> processors_;
  Mesh2Grid mesh2grid_{nullptr};
  NoiseInjector noise_injector_{nullptr};  // conditional-norm noise: its noise_mlp
};

// estimate --analytic (graphcast_memory.cpp): exact parameters, activations block by block, the graph.
int64_t graphcast_parameter_count(const GraphCastOptions& o, const ModelShape& s);
ModelMemory graphcast_activation_memory(const GraphCastOptions& o, const ModelShape& s, const FormulaSettings& f);
double graphcast_buffer_bytes(const GraphCastOptions& o, const ModelShape& s, double param_bytes);

ModelEntry graphcast_entry();  // models/registry.cpp

}  // namespace wxtrain::models
