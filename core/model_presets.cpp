#include "core/model_presets.h"

#include "core/config_reader.h"

namespace wxtrain {

std::vector<std::string> level_channel_names(const std::vector<std::string>& variables,
                                             const std::vector<int>& levels) {
  std::vector<std::string> out;
  for (const auto& v : variables)
    for (int l : levels) out.push_back(v + "_" + std::to_string(l));
  return out;
}

std::string toml_string_list(const std::vector<std::string>& names) {
  std::vector<std::string> quoted;
  for (const auto& n : names) quoted.push_back(toml_text(n));
  return "[" + join_list(quoted) + "]";
}

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = [] {
    std::vector<ModelPreset> all;
    for (const auto& schema : model_schemas()) all.insert(all.end(), schema.presets.begin(), schema.presets.end());
    return all;
  }();
  return presets;
}

const ModelPreset* find_model_preset(std::string_view name) {
  for (const auto& p : model_presets())
    if (p.name == name) return &p;
  return nullptr;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> out;
  for (const auto& p : model_presets()) out.push_back(p.name);
  return out;
}

}  // namespace wxtrain
