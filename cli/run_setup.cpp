#include <iostream>

#include "autotune/batch_search.h"
#include "cli/commands.h"
#include "core/device.h"
#include "core/error.h"
#include "data/dataset.h"
#include "distributed/world.h"

namespace wxtrain::cli {

void add_run_options(CLI::App& cmd, RunOptions& options) {
  cmd.add_option("-c,--config", options.config_path, "run file (TOML)")->required();
  cmd.add_option("--set", options.overrides,
                 "override a run-file value, e.g. --set train.batch_size=16 --set train.precision=bf16-mixed");
}

RunConfig load_run(const RunOptions& options) {
  RunConfig config = load_config(options.config_path, options.overrides);
  if (!config.data.sources.empty() && (config.data.lat == 0 || config.data.lon == 0)) {
    // Opening validates every source (files, variables, grids) and reads only headers for large data.
    data::DatasetOptions headers_only;
    headers_only.preload_max_bytes = 0;
    data::Dataset dataset(config.data, headers_only);
    data::take_grid(config, dataset);  // where the grid lies, for graphcast's mesh (estimate, tune-batch, profile)
  }
  return config;
}

namespace {
std::string g_command_line;
}

void set_command_line(int argc, char** argv) {
  g_command_line.clear();
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool plain = !arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                             "0123456789-_./=:,+@%") == std::string::npos;
    std::string quoted = "'";
    for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    g_command_line += (i ? " " : "") + (plain ? arg : quoted + "'");
  }
}

const std::string& command_line() { return g_command_line; }

int64_t resolve_auto_batch(const RunConfig& config) {
  const auto& world = distributed::current_world();
  const int64_t batch = autotune::tune_batch(config, resolve_device(config.train.device, world.local_rank));
  if (world.rank == 0)
    std::cerr << "train.batch_size = \"auto\": tuned micro-batch " << batch << " (margin "
              << static_cast<int>(config.memory.margin * 100) << "%)\n";
  return batch;
}

}  // namespace wxtrain::cli
