#pragma once
// The published configurations of the models people train, by name: `[model] preset =
// "fourcastnet-0.25"` fills the [model] keys of the paper's model and, for a run file without
// data sources (an estimate before the data exists), the [data] shape of its inputs and outputs:
// variables and levels, forcings, static fields, grid, history. Keys the run file sets itself win;
// a run file with [[data.sources]] keeps its own data. Each preset cites where its figures come
// from; docs/estimator.md sets the parameter counts and memory beside the papers'.
#include <string>
#include <string_view>
#include <vector>

namespace wxtrain {

struct ModelPreset {
  std::string name;       // the value of model.preset
  std::string summary;    // one line: the model, its grid, its channels
  std::string citation;   // the paper (and table) the figures come from
  std::string model_toml; // [model] keys, TOML
  std::string data_toml;  // [data] keys for a run file without sources, TOML
};

const std::vector<ModelPreset>& model_presets();
const ModelPreset* find_model_preset(std::string_view name);  // nullptr when there is none
std::vector<std::string> model_preset_names();

// "name_level" for every level of every variable, variable-major (z_50, z_100, ..., t_50, ...): the
// channel names a source with `levels` gets.
std::vector<std::string> level_channel_names(const std::vector<std::string>& variables,
                                             const std::vector<int>& levels);

}  // namespace wxtrain
