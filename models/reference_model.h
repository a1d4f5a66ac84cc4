#pragma once
// The boundary to the reference implementations (PhysicsNeMo's AFNO, Pangu and GraphCastNet, later
// anemoi's models): how one of our architectures reads and writes the checkpoints of the class it
// matches. Each architecture that has a reference fills these in its own folder
// (models/<name>/<name>_reference.cpp) and lists them in its registry entry; interop/ (the .mdlus
// and state_dict files, `wxtrain import` / `wxtrain export`, init_from of a foreign checkpoint)
// reads them from the registry. Nothing inside the trainer knows where weights came from.
#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/config.h"
#include "models/weather_model.h"

namespace wxtrain::models {

// Parameters and buffers by their full names, as a module's state_dict holds them.
using StateDict = std::map<std::string, torch::Tensor>;

struct ReferenceModel {
  // Who the reference is, as args.json of a .mdlus names it: "__name__" and "__module__"
  // (e.g. "AFNO", "physicsnemo.models.afno.afno").
  std::string python_class;
  std::string python_module;
  // The reference's constructor arguments (args.json "__args__", defaults filled in by the
  // reference's signature where a file leaves them out) as our [model] options and the shape they
  // imply. An argument we cannot honour is a ConfigError that names it and its value.
  std::function<std::pair<ModelConfig, ModelShape>(const nlohmann::json& args)> from_reference_args;
  // Our options and shape as the reference's constructor arguments, for export.
  std::function<nlohmann::json(const ModelConfig&, const ModelShape&)> to_reference_args;
  // The reference's state_dict (parameters and buffers) as ours: names mapped, tensors laid out as
  // our modules hold them. Every tensor of either side is accounted for, or a ConfigError names
  // the first one that is not.
  std::function<StateDict(const StateDict& reference, const ModelConfig&, const ModelShape&)> from_reference_state;
  // The reverse, for export: our state_dict as the reference's, loadable by the reference class.
  std::function<StateDict(const StateDict& ours, const ModelConfig&, const ModelShape&)> to_reference_state;
  // Where the reference reads its channels in a fixed order (Pangu: the surface, the masks, then
  // the upper air, each variable and level in its place), which its checkpoints do not record:
  // that order as our run file lists it, in words for `wxtrain import` ("" where any channels
  // go, matched by position, as GraphCastNet's and AFNO's), and the check of a run's channels
  // against it: "" when they are in that order, else what differs and the order expected
  // (init_from and `wxtrain import --config` refuse such a run with it). Unset: no check.
  std::string channel_order;
  std::function<std::string(const ChannelLayout& run)> check_channels;
};

}  // namespace wxtrain::models
