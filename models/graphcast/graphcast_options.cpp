#include "models/graphcast/graphcast_options.h"

#include <string>
#include <vector>

#include "core/config_reader.h"
#include "core/model_presets.h"

namespace wxtrain::models {
namespace {

void read(SectionReader& r, GraphCastOptions& o) {
  r.get("latent", o.latent, 1, 1 << 16);
  r.describe("latent", "node and edge latent width");
  r.get("processor_layers", o.processor_layers, 1, 512);
  r.describe("processor_layers", "message-passing rounds on the multi-mesh");
  r.get("mlp_layers", o.mlp_layers, 1, 8);
  r.describe("mlp_layers", "Linear layers of every MLP (GraphCast: 2)");
  r.get("mesh_refinement", o.mesh_refinement, 0, 7);
  r.describe("mesh_refinement", "icosahedron refinements of the multi-mesh (10 x 4^r + 2 nodes; GraphCast 0.25: 6)");
  r.get("edge_block", o.edge_block, 0, int64_t{1} << 40);  // M7: 163,842 nodes, beyond any published GraphCast
  r.describe("edge_block", "grid2mesh/mesh2grid edges updated this many at a time (0 = all); with checkpointing "
                           "no edge-sized tensor of the whole set is held");
  r.get_choice("graph", o.graph, {"wxtrain", "physicsnemo"});
  r.describe("graph", "graph construction: \"wxtrain\" (the paper: grid2mesh from every mesh node within 0.6 x "
                      "the longest finest edge, mesh2grid from the triangle holding the point) or \"physicsnemo\" "
                      "(PhysicsNeMo's GraphCastNet: DeepMind's icosahedron, the 4 nearest mesh nodes within the "
                      "radius, the nearest face centroid, its node and edge features; what imported checkpoints use)");
  r.get("grid_position_features", o.grid_position_features);
  r.describe("grid_position_features", "grid nodes get their position (3 features) beside the variables (the paper; "
                                       "PhysicsNeMo's GraphCastNet reads only the input channels)");
  r.get("aggregate_residual", o.aggregate_residual);
  r.describe("aggregate_residual", "processor nodes sum their incoming edges after the edges' residual, e + MLP "
                                   "(PhysicsNeMo's GraphCastNet), rather than the MLP's update alone (the paper)");
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// GraphCast (Lam et al. 2023, Science 382 eadi2336; arXiv:2212.12794, supplement sections 3-4):
// 5 surface variables (the 6-hour precipitation among them, input and output) and 6 atmospheric
// variables on the pressure levels, two input states; latent 512, 16 processor layers, MLPs with
// one hidden layer, the M6 multi-mesh at 0.25 degree (M5 for the 1-degree GraphCast_small of
// google-deepmind/graphcast). Forcings: top-of-atmosphere insolation, local time and year
// progress (sin, cos) at the predicted state's time; constants: the land-sea mask and surface
// geopotential as input-only channels, and the position (cos lat, sin/cos lon) the model adds
// itself. The paper's forcings also come at the two input times (10 more input channels: 5,120
// weights of the grid embedding, 0.014% of the parameters). Edge blocks of 2^18: the maintainers
// trained with the grid2mesh/mesh2grid edge updates in blocks (model.edge_block; the output is the
// same), which the 0.25-degree model's 3.1 M mesh2grid edges need to train on one GPU.
ModelPreset graphcast(const std::string& name, const std::vector<int>& levels, int refinement, int lat, int lon,
                      const std::string& summary, const std::string& citation) {
  const std::vector<std::string> variables =
      concat({"t2m", "u10", "v10", "msl", "tp6h"}, level_channel_names({"t", "u", "v", "z", "q", "w"}, levels));
  return {name, summary, citation,
          "name = \"graphcast\"\nlatent = 512\nprocessor_layers = 16\nmlp_layers = 2\nmesh_refinement = " +
              std::to_string(refinement) + "\nedge_block = 262144\n",
          "variables = " + toml_string_list(variables) +
              "\nforcings = [\"insolation\", \"cos_local_time\", \"sin_local_time\", \"cos_day_of_year\", "
              "\"sin_day_of_year\"]\nforcing_variables = [\"land_sea_mask\", \"surface_geopotential\"]\ngrid = [" +
              std::to_string(lat) + ", " + std::to_string(lon) + "]\nhistory = 2\n"};
}

ModelPreset graphcast_025() {
  const std::vector<int> levels = {1,   2,   3,   5,   7,   10,  20,  30,  50,  70,  100, 125, 150,
                                   175, 200, 225, 250, 300, 350, 400, 450, 500, 550, 600, 650, 700,
                                   750, 775, 800, 825, 850, 875, 900, 925, 950, 975, 1000};
  return graphcast("graphcast-0.25", levels, 6, 721, 1440,
                   "GraphCast, 0.25 degree (721 x 1440), 37 levels, M6 multi-mesh, two input states",
                   "Lam et al. 2023, Science 382 eadi2336, supplement sections 3.3, 3.7, 4; arXiv:2212.12794");
}

ModelPreset graphcast_1() {
  return graphcast("graphcast-1.0", {50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 925, 1000}, 5, 181, 360,
                   "GraphCast_small, 1 degree (181 x 360), 13 levels, M5 multi-mesh, two input states",
                   "google-deepmind/graphcast (now weathernext) README: GraphCast_small; Lam et al. 2023");
}

}  // namespace

ModelSchema graphcast_schema() {
  ModelSchema s = make_model_schema<GraphCastOptions>(
      "graphcast", "GraphCast: encoder-processor-decoder on an icosahedral multi-mesh", &read,
      {graphcast_025(), graphcast_1()});
  s.shards_grid = true;  // grid bands, mesh nodes by their grid neighbourhood (graphcast.cpp set_node_shard)
  return s;
}

}  // namespace wxtrain::models
