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

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// GraphCast (Lam et al. 2023, Science 382 eadi2336; arXiv:2212.12794, supplement sections 3-4):
// 5 surface variables (the 6-hour precipitation among them, input and output) and 6 atmospheric
// variables on the pressure levels, two input states; latent 512, 16 processor layers, MLPs with
// one hidden layer, the M6 multi-mesh at 0.25 degree (M5 for the 1-degree GraphCast_small of
// google-deepmind/graphcast). Forcings: top-of-atmosphere insolation, local time and year
// progress (sin, cos) at the predicted state's time; constants: the land-sea mask and surface
// geopotential as input-only channels, and the position (cos lat, sin/cos lon) the model adds
// itself. The paper's forcings also come at the two input times (10 more input channels: 5,120
// weights of the grid embedding, 0.014% of the parameters). Edge blocks of 2^18: the maintainers
// trained with the grid2mesh/mesh2grid edge updates in blocks (model.edge_block; the output is the
// same), which the 0.25-degree model's 3.1 M mesh2grid edges need to train on one GPU.
ModelPreset graphcast(const std::string& name, const std::vector<int>& levels, int refinement, int lat, int lon,
                      const std::string& summary, const std::string& citation) {
  const std::vector<std::string> variables =
      concat({"t2m", "u10", "v10", "msl", "tp6h"}, level_channel_names({"t", "u", "v", "z", "q", "w"}, levels));
  return {name, summary, citation,
          "name = \"graphcast\"\nlatent = 512\nprocessor_layers = 16\nmlp_layers = 2\nmesh_refinement = " +
              std::to_string(refinement) + "\nedge_block = 262144\n",
          "variables = " + toml_list(variables) +
              "\nforcings = [\"insolation\", \"cos_local_time\", \"sin_local_time\", \"cos_day_of_year\", "
              "\"sin_day_of_year\"]\nforcing_variables = [\"land_sea_mask\", \"surface_geopotential\"]\ngrid = [" +
              std::to_string(lat) + ", " + std::to_string(lon) + "]\nhistory = 2\n"};
}

ModelPreset graphcast_025() {
  const std::vector<int> levels = {1,   2,   3,   5,   7,   10,  20,  30,  50,  70,  100, 125, 150,
                                   175, 200, 225, 250, 300, 350, 400, 450, 500, 550, 600, 650, 700,
                                   750, 775, 800, 825, 850, 875, 900, 925, 950, 975, 1000};
  return graphcast("graphcast-0.25", levels, 6, 721, 1440,
                   "GraphCast, 0.25 degree (721 x 1440), 37 levels, M6 multi-mesh, two input states",
                   "Lam et al. 2023, Science 382 eadi2336, supplement sections 3.3, 3.7, 4; arXiv:2212.12794");
}

ModelPreset graphcast_1() {
  return graphcast("graphcast-1.0", {50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 925, 1000}, 5, 181, 360,
                   "GraphCast_small, 1 degree (181 x 360), 13 levels, M5 multi-mesh, two input states",
                   "google-deepmind/graphcast (now weathernext) README: GraphCast_small; Lam et al. 2023");
}

// Pangu-Weather (Bi et al. 2023, Nature 619:533; arXiv:2211.02556, Methods, and the pseudocode of
// 198808xc/Pangu-Weather): Z, Q, T, U, V on 13 levels form the upper-air volume, MSLP, U10, V10,
// T2M the surface, plus 3 constant masks (land-sea, soil type, topography) as input-only channels;
// one input state on the 721 x 1440 grid; patches (2, 4, 4), width 192, window (2, 6, 12), depths
// (2, 6, 6, 2), heads (6, 12, 12, 6). The authors trained one such model per lead time (1, 3, 6,
// 24 h), "about 256 million parameters in total".
ModelPreset pangu_025() {
  const std::vector<std::string> variables =
      concat(level_channel_names({"z", "q", "t", "u", "v"},
                                 {50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 925, 1000}),
             {"msl", "u10", "v10", "t2m"});
  return {"pangu-0.25",
          "Pangu-Weather, 0.25 degree (721 x 1440), 5 variables x 13 levels + 4 surface + 3 masks, one input state",
          "Bi et al. 2023, Nature 619:533, Methods; arXiv:2211.02556; 198808xc/Pangu-Weather pseudocode",
          "name = \"pangu\"\nupper_variables = 5\nlevels = 13\nlevel_patch = 2\npatch_size = 4\nembed_dim = 192\n"
          "mlp_ratio = 4.0\nwindow = [2, 6, 12]\nstage_depths = [2, 6, 6, 2]\nstage_heads = [6, 12, 12, 6]\n",
          "variables = " + toml_list(variables) +
              "\nforcing_variables = [\"land_sea_mask\", \"soil_type\", \"topography\"]\ngrid = [721, 1440]\n"
              "history = 1\n"};
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {graphcast_025(), graphcast_1(), pangu_025(), fourcastnet_025()};
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
