#pragma once
// Training checkpoints: everything a run needs to continue exactly (model, optimizer, loss scaler,
// step, data position, RNG, normalisation, the run file), written atomically — a temporary file,
// fsync, then rename — so a job killed mid-write leaves the previous checkpoint intact.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "data/loader.h"
#include "models/weather_model.h"

namespace wxtrain::trainer {

using TensorMap = std::map<std::string, torch::Tensor>;

struct Checkpoint {
  int64_t step = 0;                // optimizer steps completed
  data::LoaderState loader;        // the next batch to read
  TensorMap model;                 // parameters and buffers by name
  TensorMap optimizer;             // consolidated (any world size / ZeRO stage)
  TensorMap scaler;
  TensorMap normalization;
  torch::Tensor rng_state;         // CPU generator
  // An ensemble's noise generators (TrainingState::rollout.noise), one row per rank: uint8
  // [world_size, state bytes]; undefined for a deterministic run.
  torch::Tensor noise_rng_state;
  std::string config_text;         // the run file this model was trained with
  std::vector<std::string> overrides;  // and the --set values applied to it
  std::string model_name;
  int64_t world_size = 1;          // ranks that wrote it (for messages)
  // The ensemble it was trained as (train.ensemble_members, distributed.ensemble_group,
  // train.crps_alpha, train.noise_channels, train.noise_std); members 0 in a checkpoint written
  // before they were recorded (its noise rows are then one per rank, as with group 1).
  int64_t ensemble_members = 0;
  int64_t ensemble_group = 1;
  double crps_alpha = 0;
  int64_t noise_channels = 0;
  double noise_std = 0;
  double noise_correlation = 0;
  // JSON: the model's input and output channel names and every channel's role, level, units,
  // source and statistics ("" in checkpoints written before channels were recorded).
  std::string channels;
};

// The model's input and output channel names a checkpoint was trained with: from its channels
// record, or for an older checkpoint from the run file it keeps. Throws Error naming `path`
// when neither can be read.
struct ChannelNames {
  std::vector<std::string> inputs, outputs;
};
ChannelNames checkpoint_channels(const Checkpoint& checkpoint, const std::string& path);
// The grid a checkpoint was trained on (lat, lon and their coordinates), from its channels record;
// nothing for a checkpoint written before grids were recorded.
std::optional<models::ModelShape> checkpoint_grid(const Checkpoint& checkpoint, const std::string& path);

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);

// Throws wxtrain::Error naming the path when the file is missing, truncated or not a checkpoint.
Checkpoint load_checkpoint(const std::string& path);

TensorMap model_weights(const models::WeatherModelImpl& model);

struct WeightLoadReport {
  std::vector<std::string> loaded, missing, unexpected;
};
// Copies `weights` into the model. Strict: any missing or unexpected name, or a shape mismatch, is
// an error listing them. Non-strict: loads what matches and reports the rest (shape mismatches are
// always errors: silently skipping them would train a different model than the user thinks). The
// errors are ConfigErrors (exit 2: the checkpoint does not fit the run file), nothing copied; they
// end with `remedy`, what the caller's user can do about it.
inline const char* const kStrictLoadRemedy = "set train.strict = false to load what matches";
WeightLoadReport load_weights(models::WeatherModelImpl& model, const TensorMap& weights, bool strict,
                              const std::string& source, const std::string& remedy = kStrictLoadRemedy);

}  // namespace wxtrain::trainer
