#pragma once
// Run files on the real storm data (Debian's libncarg-data) with models small enough for tests.
#include <string>
#include <vector>

#include "core/config.h"

namespace wxtrain::testing_support {

inline std::string storm_sources() {
  std::string s;
  const char* entries[][3] = {{"Pstorm", "p", "p"},       {"Tstorm", "t", "t"},       {"Ustorm", "u", "u"},
                              {"Vstorm", "v", "v"},       {"U500storm", "u", "u500"}, {"V500storm", "v", "v500"}};
  for (auto& e : entries)
    s += std::string("[[data.sources]]\nfile = \"/usr/share/ncarg/data/cdf/") + e[0] + ".cdf\"\nvariable = \"" + e[1] +
         "\"\nname = \"" + e[2] + "\"\n";
  return s;
}

// A small U-Net run on the storm data writing to out_dir; `extra_train` is appended to [train].
inline std::string storm_run_text(const std::string& out_dir, const std::string& extra_train = "",
                                  const std::string& model = "name = \"unet\"\nchannels = [16, 32]\ngroups = 4\n") {
  return "[model]\n" + model + "\n[data]\nhistory = 2\nval_fraction = 0.2\nprefetch = 2\n" +
         storm_sources() + "\n[train]\nbatch_size = 8\nlr = 2e-3\nsteps = 20\nwarmup_steps = 5\nseed = 3\n" +
         "checkpoint_every = 0\nlog_every = 1000\nout_dir = \"" + out_dir + "\"\n" + extra_train;
}

inline RunConfig storm_run(const std::string& out_dir, const std::string& extra_train = "",
                           const std::vector<std::string>& overrides = {}) {
  RunConfig c = parse_config(storm_run_text(out_dir, extra_train), "storm_test.toml", overrides);
  c.data.lat = 33;
  c.data.lon = 36;
  return c;
}

}  // namespace wxtrain::testing_support
