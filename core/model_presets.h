#pragma once
// The published configurations of the models people train, by name (`[model] preset =
// "graphcast-0.25"`, ModelPreset in core/model_options.h). Each model registers its own presets
// beside its options (models/<name>/<name>_options.cpp); these look them up across the registry.
#include <string>
#include <string_view>
#include <vector>

#include "core/model_options.h"

namespace wxtrain {

const std::vector<ModelPreset>& model_presets();  // every model's, in registry order
const ModelPreset* find_model_preset(std::string_view name);  // nullptr when there is none
std::vector<std::string> model_preset_names();

// "name_level" for every level of every variable, variable-major (z_50, z_100, ..., t_50, ...): the
// channel names a source with `levels` gets.
std::vector<std::string> level_channel_names(const std::vector<std::string>& variables,
                                             const std::vector<int>& levels);
// A TOML array of strings: ["z_50", "z_100"].
std::string toml_string_list(const std::vector<std::string>& names);

}  // namespace wxtrain
