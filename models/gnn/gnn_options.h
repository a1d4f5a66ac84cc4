#pragma once
// [model] keys of the grid GNN (model.name = "gnn"), read by gnn_schema().
#include <cstdint>

#include "core/model_options.h"

namespace wxtrain::models {

struct GraphNetOptions : ModelOptionsOf<GraphNetOptions> {
  int64_t latent = 64;           // model.latent: node and edge latent width
  int64_t processor_layers = 4;  // model.processor_layers: message-passing rounds
  int64_t neighbourhood = 1;     // model.neighbourhood: grid radius of each node's edges (1 = 8 neighbours)
  int64_t mlp_layers = 2;        // model.mlp_layers: depth of every GNN MLP
};

ModelSchema gnn_schema();

}  // namespace wxtrain::models
