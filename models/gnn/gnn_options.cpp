#include "models/gnn/gnn_options.h"

#include "core/config_reader.h"

namespace wxtrain::models {
namespace {

void read(SectionReader& r, GraphNetOptions& o) {
  r.get("latent", o.latent, 1, 1 << 16);
  r.describe("latent", "node and edge latent width");
  r.get("processor_layers", o.processor_layers, 1, 512);
  r.describe("processor_layers", "message-passing rounds");
  r.get("neighbourhood", o.neighbourhood, 1, 8);
  r.describe("neighbourhood", "grid radius of each node's edges (1 = 8 neighbours)");
  r.get("mlp_layers", o.mlp_layers, 1, 8);
  r.describe("mlp_layers", "Linear layers of every MLP");
}

}  // namespace

ModelSchema gnn_schema() {
  ModelSchema s = make_model_schema<GraphNetOptions>("gnn", "message-passing network on the grid's own graph", &read);
  s.shards_grid = true;  // by latitude band (gnn.cpp set_node_shard)
  return s;
}

}  // namespace wxtrain::models
