#pragma once
// Small zoo models on the storm grid (33 x 36) with 4 synthetic variables: every probe is a real
// training step, and these keep one at tens of milliseconds on two cores.
#include <string>

#include "core/config.h"

namespace wxtrain::autotune::testing {

inline std::string tiny_toml(const std::string& model, const std::string& precision = "fp32") {
  std::string m = "[model]\nname = \"" + model + "\"\n";
  if (model == "unet") m += "channels = [8, 16]\ngroups = 4\n";
  if (model == "vit") m += "patch_size = 3\nembed_dim = 24\ndepth = 2\nheads = 2\nmlp_ratio = 2.0\n";
  if (model == "gnn") m += "latent = 16\nprocessor_layers = 2\nmlp_layers = 2\n";
  return m +
         "[data]\nvariables = [\"p\", \"t\", \"u\", \"v\"]\ngrid = [33, 36]\nhistory = 2\nrollout_steps = 1\n"
         "[train]\nbatch_size = 4\nprecision = \"" + precision + "\"\noptimizer = \"adamw\"\ndevice = \"cpu\"\n"
         "[memory]\nmargin = 0.1\nprobe_steps = 2\n";
}

inline RunConfig tiny_config(const std::string& model, const std::string& precision = "fp32") {
  return parse_config(tiny_toml(model, precision), "tiny_" + model + ".toml");
}

}  // namespace wxtrain::autotune::testing
