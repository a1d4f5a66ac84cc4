#pragma once
// Checkpoints of the reference implementations, translated at the boundary into ours and back
// (models/reference_model.h says how for each architecture; this file does the files):
//   in:  a PhysicsNeMo .mdlus (zip, or the tar of Modulus and PhysicsNeMo before 2.0): args.json
//        names the class and its constructor arguments, which become our [model] options and
//        shape; model.pt (torch.save of the state_dict) becomes our weights. A bare torch.save
//        state_dict of such a class, with the architecture from the run file's [model].
//        Normalisation statistics beside the file (global_means.npy, global_stds.npy) come along.
//   out: our weights as a .mdlus that PhysicsNeMo's Module.from_checkpoint loads, with the
//        statistics beside it as Earth2Studio reads them ([1, C, 1, 1] float32).
// Nothing inside the trainer knows where weights came from: init_from and forecast take what this
// returns as they take a wxtrain checkpoint's.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/config.h"
#include "models/reference_model.h"
#include "models/weather_model.h"

namespace wxtrain::interop {

enum class CheckpointKind {
  kWxtrain,    // what wxtrain train writes (LibTorch's archive), or a file no reader recognises
  kMdlus,      // a PhysicsNeMo / Modulus .mdlus, zip or tar
  kStateDict,  // a torch.save file (a state_dict, or a training checkpoint holding one)
};
// By content, not by name: a zip or tar holding args.json and model.pt is a .mdlus; a zip whose
// pickle is not a TorchScript module's is a torch.save file. Reads the file's head (and, for a zip
// of unknown layout, its directory).
CheckpointKind checkpoint_kind(const std::string& path);
const char* describe(CheckpointKind kind);

struct ImportedModel {
  std::string path;
  std::string container;       // "PhysicsNeMo .mdlus (zip)", ".mdlus (tar)", "torch.save state_dict"
  std::string reference;       // the reference class, "physicsnemo.models.afno.afno.AFNO"
  std::string model_name;      // ours that reads it
  bool has_args = false;       // the architecture came from args.json (else: from the run's [model])
  ModelConfig model;           // [model] (from args.json, or the run's)
  models::ModelShape shape;    // in/out channels and grid (from args.json, or the run's)
  nlohmann::json args;         // args.json's "__args__" as written
  nlohmann::json metadata;     // metadata.json
  models::StateDict weights;   // mapped onto our names
  int64_t values = 0;          // numbers in the weights
  std::string state_from;      // where in model.pt the state_dict was ("" = the top)
  // The statistics beside the file, flattened to [C] float32; undefined when there are none.
  torch::Tensor means, stds;
  std::string statistics_from;  // "global_means.npy, global_stds.npy in <dir>"
  // The channels, when the file records them (a .mdlus wxtrain exported: metadata.json's
  // "wxtrain_channels"); empty otherwise.
  std::vector<std::string> input_channels, output_channels;
  // The grid's coordinates in degrees: as metadata.json's "wxtrain_grid" records them, else the
  // reference's own grid where it has one, else a
  // global grid of shape.lat x shape.lon with its first row at the North Pole and its first column
  // at 0 degrees east, the layout of ERA5 and of Earth2Studio's FourCastNet (720 rows: 90 to -89.75).
  std::vector<double> latitudes, longitudes;
  bool grid_recorded = false;
  // No record, but the reference builds on a grid of its own, which its mapping gives
  // (ModelShape::latitudes; GraphCastNet's: latitudes -90..90, longitudes -180..180 without -180).
  bool grid_from_reference = false;
  // The reference's fixed channel order and its check (ReferenceModel::channel_order,
  // check_channels): "" / unset where it takes any channels by position.
  std::string channel_order;
  std::function<std::string(const ChannelLayout&)> check_channels;

  // Lines for the terminal: what was read, what it became, what came with it.
  std::string summary() const;
};

// Reads the reference checkpoint at `path`. A .mdlus gives its own architecture; a state_dict
// takes `run_model` and `run_shape` (the run's [model] and shape; nullptr: Error asking for a run
// file), tried against each reference of that model. Errors name the file and the tensor, argument
// or entry at fault; an argument wxtrain cannot honour is refused by name.
ImportedModel import_reference_checkpoint(const std::string& path, const ModelConfig* run_model = nullptr,
                                          const models::ModelShape* run_shape = nullptr);

// The keys where `imported` and `run` differ, "model.embed_dim = 768 (the file) but 128 (the run)";
// empty when they build the same network.
std::vector<std::string> model_differences(const ModelConfig& imported, const ModelConfig& run);

struct MdlusExport {
  std::string path;            // the .mdlus to write; the statistics go beside it
  ModelConfig model;
  models::ModelShape shape;
  models::StateDict weights;   // ours
  // Per input channel (the model's input order), or undefined to write no statistics.
  torch::Tensor means, stds;
  std::vector<std::string> input_channels, output_channels;  // recorded in metadata.json
  // shape.latitudes / longitudes, when known, are recorded too (metadata.json "wxtrain_grid").
  std::string source;          // what it was made from, for metadata.json
};
// Writes the .mdlus (and global_means.npy / global_stds.npy beside it when statistics are given),
// each atomically; returns the paths written. ConfigError when the model has no reference or its
// configuration is one the reference cannot build (named).
std::vector<std::string> export_mdlus(const MdlusExport& request);

}  // namespace wxtrain::interop
