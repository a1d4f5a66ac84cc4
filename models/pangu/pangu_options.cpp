#include "models/pangu/pangu_options.h"

#include <string>
#include <vector>

#include "core/config_reader.h"
#include "core/model_presets.h"

namespace wxtrain::models {
namespace {

// The shapes alone; whether upper_variables x levels fits the data's channels is checked where
// the channels are known (pangu.cpp).
void read(SectionReader& r, PanguOptions& o) {
  r.get("patch_size", o.patch_size, 1, 64);
  r.describe("patch_size", "lat/lon patch edge in grid points");
  r.get("embed_dim", o.embed_dim, 1, 1 << 16);
  r.describe("embed_dim", "token width of stages 1 and 4 (stages 2 and 3: twice)");
  r.get("mlp_ratio", o.mlp_ratio, 0.25, 64.0);
  r.describe("mlp_ratio", "MLP width / embed_dim");
  r.get("upper_variables", o.upper_variables, 0, 1 << 16);
  r.describe("upper_variables", "upper-air variables V; the first V x levels channels of each state, variable-major");
  r.get("levels", o.levels, 0, 1 << 16);
  r.describe("levels", "pressure levels of each upper-air variable (0 with upper_variables = 0)");
  r.get("level_patch", o.level_patch, 1, 64);
  r.describe("level_patch", "levels per patch of the 3-D embedding (patch_size is its lat/lon edge)");
  r.get("window", o.window, 1);
  r.describe("window", "attention window [levels, lat, lon] in tokens");
  r.get("stage_depths", o.stage_depths, 1);
  r.describe("stage_depths", "transformer blocks of the four stages");
  r.get("stage_heads", o.stage_heads, 1);
  r.describe("stage_heads", "attention heads of the four stages (stages 2 and 3 are 2 x embed_dim wide)");
  r.get_choice("block_norm", o.block_norm, {"post", "pre"});
  r.describe("block_norm", "where a block normalises: \"post\" x + norm(f(x)), the pseudocode's; \"pre\" x + "
                           "f(norm(x)), PhysicsNeMo's");
  r.get_choice("padding", o.padding, {"end", "centered"});
  r.describe("padding", "where the zero padding up to whole patches and windows goes (and the output is cropped "
                        "from): \"end\" after the grid; \"centered\" half before, the odd cell after (PhysicsNeMo)");
  r.get("window_shift", o.window_shift, 0);
  r.describe("window_shift", "tokens [levels, lat, lon] every second block rolls its windows by; [] = half the "
                             "window along each dimension that holds more than one; PhysicsNeMo rolls [1, 3, 6]");
  r.get("fit_window", o.fit_window);
  r.describe("fit_window", "cut a window larger than a stage's token grid to the grid (false: pad the grid up to "
                           "the window, as PhysicsNeMo does)");
  r.get_choice("shift_mask", o.shift_mask, {"periodic", "all_edges"});
  r.describe("shift_mask", "shifted windows' mask: \"periodic\" masks what a roll carries across the level and "
                           "latitude edges (-inf), longitude wraps; \"all_edges\" masks longitude's wrap too, "
                           "with -100 (PhysicsNeMo's)");
  if (!o.window_shift.empty() && o.window_shift.size() != 3)
    r.fail("window_shift", "must hold 3 entries (levels, lat, lon), e.g. [1, 3, 6], or none (half the window)");
  if (o.window.size() != 3) r.fail("window", "must hold 3 entries (levels, lat, lon), e.g. [2, 6, 12]");
  if (o.stage_depths.size() != 4) r.fail("stage_depths", "must hold 4 entries, e.g. [2, 6, 6, 2]");
  if (o.stage_heads.size() != 4) r.fail("stage_heads", "must hold 4 entries, e.g. [6, 12, 12, 6]");
  if ((o.upper_variables == 0) != (o.levels == 0))
    r.fail(o.levels == 0 ? "levels" : "upper_variables",
           "must be set with model." + std::string(o.levels == 0 ? "upper_variables" : "levels") +
               " (both 0: no upper-air volume)");
  if (!o.window_shift.empty())
    for (size_t d = 0; d < 3; ++d)
      if (o.window_shift[d] >= o.window[d])
        r.fail("window_shift", "entry " + std::to_string(d) + " = " + std::to_string(o.window_shift[d]) +
                                   " must be less than model.window's " + std::to_string(o.window[d]));
  for (size_t i = 0; i < o.stage_heads.size(); ++i) {
    const int64_t width = (i == 1 || i == 2 ? 2 : 1) * o.embed_dim;  // stages 2 and 3 run at 2 x embed_dim
    if (width % o.stage_heads[i] != 0)
      r.fail("stage_heads", "entry " + std::to_string(i) + " = " + std::to_string(o.stage_heads[i]) +
                                " must divide that stage's width " + std::to_string(width) +
                                " (model.embed_dim, doubled in stages 2 and 3)");
  }
  if (static_cast<int64_t>(static_cast<double>(o.embed_dim) * o.mlp_ratio) < 1)
    r.fail("mlp_ratio", "must leave the MLP at least one hidden unit (got " + toml_text(o.mlp_ratio) + ")");
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Pangu-Weather (Bi et al. 2023, Nature 619:533; arXiv:2211.02556, Methods, and the pseudocode of
// 198808xc/Pangu-Weather): Z, Q, T, U, V on 13 levels form the upper-air volume, MSLP, U10, V10,
// T2M the surface, plus 3 constant masks (land-sea, soil type, topography) as input-only channels;
// the levels in the order of the published models' inputs (198808xc/Pangu-Weather README: 1000 hPa
// first, 50 hPa last), which decides the pairs a level patch of 2 embeds together;
// one input state on the 721 x 1440 grid; patches (2, 4, 4), width 192, window (2, 6, 12), depths
// (2, 6, 6, 2), heads (6, 12, 12, 6). The authors trained one such model per lead time (1, 3, 6,
// 24 h), "about 256 million parameters in total".
ModelPreset pangu_025() {
  const std::vector<std::string> variables =
      concat(level_channel_names({"z", "q", "t", "u", "v"},
                                 {1000, 925, 850, 700, 600, 500, 400, 300, 250, 200, 150, 100, 50}),
             {"msl", "u10", "v10", "t2m"});
  return {"pangu-0.25",
          "Pangu-Weather, 0.25 degree (721 x 1440), 5 variables x 13 levels + 4 surface + 3 masks, one input state",
          "Bi et al. 2023, Nature 619:533, Methods; arXiv:2211.02556; 198808xc/Pangu-Weather pseudocode",
          "name = \"pangu\"\nupper_variables = 5\nlevels = 13\nlevel_patch = 2\npatch_size = 4\nembed_dim = 192\n"
          "mlp_ratio = 4.0\nwindow = [2, 6, 12]\nstage_depths = [2, 6, 6, 2]\nstage_heads = [6, 12, 12, 6]\n",
          "variables = " + toml_string_list(variables) +
              "\nforcing_variables = [\"land_sea_mask\", \"soil_type\", \"topography\"]\ngrid = [721, 1440]\n"
              "history = 1\n"};
}

}  // namespace

ModelSchema pangu_schema() {
  return make_model_schema<PanguOptions>("pangu", "Pangu-Weather: 3-D Earth-specific window transformer", &read,
                                         {pangu_025()});
}

}  // namespace wxtrain::models
