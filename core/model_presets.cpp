#include "core/model_presets.h"

#include <sstream>

namespace wxtrain {

std::vector<std::string> level_channel_names(const std::vector<std::string>& variables,
                                             const std::vector<int>& levels) {
  std::vector<std::string> out;
  for (const auto& v : variables)
    for (int l : levels) out.push_back(v + "_" + std::to_string(l));
  return out;
}

namespace {

std::string toml_list(const std::vector<std::string>& names) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < names.size(); ++i) s << (i ? ", " : "") << '"' << names[i] << '"';
  s << "]";
  return s.str();
}

// FourCastNet (Pathak et al. 2022, arXiv:2202.11214, Table 1 and section 3): 20 variables on the
// 0.25-degree ERA5 grid cropped to 720 x 1440, one input state; AFNO with patch 8, width 768, 12
// blocks, 8 diagonal blocks (NVlabs/FourCastNet config/AFNO.yaml). 74,690,304 parameters counted
// here against 74,691,840 in NVlabs' checkpoint (docs/estimator.md).
ModelPreset fourcastnet_025() {
  const std::vector<std::string> variables = {"u10",   "v10",   "t2m",   "sp",    "msl",  "t_850", "u_1000",
                                              "v_1000", "z_1000", "u_850", "v_850", "z_850", "u_500", "v_500",
                                              "z_500", "t_500", "z_50",  "r_500", "r_850", "tcwv"};
  return {"fourcastnet-0.25",
          "FourCastNet (AFNO), 0.25 degree (720 x 1440), 20 variables, one input state",
          "Pathak et al. 2022, arXiv:2202.11214, Table 1; NVlabs/FourCastNet config/AFNO.yaml",
          "name = \"fourcastnet\"\npatch_size = 8\nembed_dim = 768\ndepth = 12\nafno_blocks = 8\nmlp_ratio = 4.0\n"
          "sparsity_threshold = 0.01\nhard_thresholding_fraction = 1.0\n",
          "variables = " + toml_list(variables) + "\ngrid = [720, 1440]\nhistory = 1\n"};
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {fourcastnet_025()};
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
