#include "models/fourcastnet/fourcastnet_options.h"

#include <string>
#include <vector>

#include "core/config_reader.h"
#include "core/model_presets.h"

namespace wxtrain::models {
namespace {

void read(SectionReader& r, FourCastNetOptions& o) {
  r.get("patch_size", o.patch_size, 1, 64);
  r.describe("patch_size", "patch edge in grid points");
  r.get("embed_dim", o.embed_dim, 1, 1 << 16);
  r.describe("embed_dim", "token width (a multiple of afno_blocks)");
  r.get("depth", o.depth, 1, 512);
  r.describe("depth", "AFNO blocks");
  r.get("mlp_ratio", o.mlp_ratio, 0.25, 64.0);
  r.describe("mlp_ratio", "MLP width / embed_dim");
  r.get("afno_blocks", o.afno_blocks, 1, 1024);
  r.describe("afno_blocks", "blocks of the block-diagonal spectral MLP (divides embed_dim)");
  r.get("sparsity_threshold", o.sparsity_threshold, 0.0, 1e9);
  r.describe("sparsity_threshold", "soft-shrinkage lambda on the filtered Fourier modes");
  r.get("hard_thresholding_fraction", o.hard_thresholding_fraction, 0.0, 1.0, Lower::kExclusive);
  r.describe("hard_thresholding_fraction", "share of the lowest Fourier modes filtered (1 = all)");
  r.get_choice("spectral_modes", o.spectral_modes, {"lowest", "reference"});
  r.describe("spectral_modes",
             "modes the filter sees: \"lowest\" frequencies per axis, or \"reference\": PhysicsNeMo's AFNO "
             "slicing (a latitude band around h/2, the first h/2+1 zonal wavenumbers; docs/interop.md)");
  if (o.embed_dim % o.afno_blocks != 0)
    r.fail("embed_dim", "= " + std::to_string(o.embed_dim) + " must be divisible by model.afno_blocks = " +
                            std::to_string(o.afno_blocks));
  if (static_cast<int64_t>(static_cast<double>(o.embed_dim) * o.mlp_ratio) < 1)
    r.fail("mlp_ratio", "must leave the MLP at least one hidden unit (got " + toml_text(o.mlp_ratio) +
                            " x embed_dim " + std::to_string(o.embed_dim) + ")");
}

// FourCastNet (Pathak et al. 2022, arXiv:2202.11214, Table 1 and section 3): 20 variables on the
// 0.25-degree ERA5 grid cropped to 720 x 1440, one input state; AFNO with patch 8, width 768, 12
// blocks, 8 diagonal blocks (NVlabs/FourCastNet config/AFNO.yaml). 74,690,304 parameters counted
// here against 74,691,840 in NVlabs' checkpoint (docs/estimator.md). The filter sees the modes the
// published code slices (spectral_modes = "reference"), which the published weights were trained with.
ModelPreset fourcastnet_025() {
  const std::vector<std::string> variables = {"u10",   "v10",   "t2m",   "sp",    "msl",  "t_850", "u_1000",
                                              "v_1000", "z_1000", "u_850", "v_850", "z_850", "u_500", "v_500",
                                              "z_500", "t_500", "z_50",  "r_500", "r_850", "tcwv"};
  return {"fourcastnet-0.25",
          "FourCastNet (AFNO), 0.25 degree (720 x 1440), 20 variables, one input state",
          "Pathak et al. 2022, arXiv:2202.11214, Table 1; NVlabs/FourCastNet config/AFNO.yaml",
          "name = \"fourcastnet\"\npatch_size = 8\nembed_dim = 768\ndepth = 12\nafno_blocks = 8\nmlp_ratio = 4.0\n"
          "sparsity_threshold = 0.01\nhard_thresholding_fraction = 1.0\nspectral_modes = \"reference\"\n",
          "variables = " + toml_string_list(variables) + "\ngrid = [720, 1440]\nhistory = 1\n"};
}

}  // namespace

ModelSchema fourcastnet_schema() {
  return make_model_schema<FourCastNetOptions>("fourcastnet", "FourCastNet: adaptive Fourier neural operator (AFNO)",
                                               &read, {fourcastnet_025()});
}

}  // namespace wxtrain::models
