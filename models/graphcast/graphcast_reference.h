#pragma once
// GraphCast's reference implementation, PhysicsNeMo's GraphCastNet: its constructor arguments and
// state_dict as ours and back (models/reference_model.h; graphcast_reference.cpp says how).
#include <utility>
#include <vector>

#include "models/reference_model.h"

namespace wxtrain::models {

ReferenceModel graphcast_reference();  // listed in graphcast_entry()

// The four mappings (ReferenceModel's members), for the tests.
std::pair<ModelConfig, ModelShape> graphcast_from_reference_args(const nlohmann::json& args);
nlohmann::json graphcast_to_reference_args(const ModelConfig& config, const ModelShape& shape);
// Parameters only: GraphCastNet's state_dict holds no graph, and ours is built by the model from
// its options and grid (the graph buffers are left out going in and ignored going out).
StateDict graphcast_from_reference_state(const StateDict& reference, const ModelConfig& config, const ModelShape& shape);
StateDict graphcast_to_reference_state(const StateDict& ours, const ModelConfig& config, const ModelShape& shape);

// GraphCastNet's grid for input_res = (lat, lon): latitudes linspace(-90, 90, lat) (south first),
// longitudes linspace(-180, 180, lon + 1)[1:], in float32 as it computes them.
std::pair<std::vector<double>, std::vector<double>> physicsnemo_grid(int64_t lat, int64_t lon);

}  // namespace wxtrain::models
