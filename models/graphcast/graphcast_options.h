#pragma once
// [model] keys of GraphCast (model.name = "graphcast"), read by graphcast_schema(), and its
// published presets (graphcast-0.25, graphcast-1.0).
#include <cstdint>
#include <string>

#include "core/model_options.h"

namespace wxtrain::models {

struct GraphCastOptions : ModelOptionsOf<GraphCastOptions> {
  int64_t latent = 64;           // model.latent: node and edge latent width
  int64_t processor_layers = 4;  // model.processor_layers: message-passing rounds on the mesh
  int64_t mlp_layers = 2;        // model.mlp_layers: depth of every MLP
  int64_t mesh_refinement = 5;   // model.mesh_refinement: icosahedron refinements of the multi-mesh (GraphCast 0.25: 6)
  // model.edge_block: grid2mesh and mesh2grid edges updated this many at a time (0 = all at once);
  // with train.checkpointing each block is replayed on its own in backward.
  int64_t edge_block = 0;
  // How the reference implementation differs, each available (models/graphcast/graphcast.h and
  // docs/interop_graphcast.md): PhysicsNeMo's GraphCastNet uses all three.
  // model.graph: "wxtrain" (the paper's rules: every mesh node within the radius, the triangle
  // holding the point) or "physicsnemo" (GraphCastNet's: DeepMind's icosahedron, the 4 nearest
  // mesh nodes within the radius, the nearest face centroid, its node and edge feature formulas).
  std::string graph = "wxtrain";
  bool grid_position_features = true;  // model.grid_position_features: grid nodes get their position (the paper)
  bool aggregate_residual = false;     // model.aggregate_residual: processor nodes sum e + MLP (PhysicsNeMo)
};

ModelSchema graphcast_schema();

}  // namespace wxtrain::models
