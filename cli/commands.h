#pragma once
// Each subcommand registers itself on the app and returns the exit code of its run.
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/config.h"
#include "models/weather_model.h"

namespace wxtrain::cli {

// A subcommand's action, run after parsing; returns the process exit code.
using Action = std::function<int()>;

Action add_info_command(CLI::App& app);
Action add_estimate_command(CLI::App& app);
Action add_train_command(CLI::App& app);
Action add_forecast_command(CLI::App& app);
Action add_tune_batch_command(CLI::App& app);
Action add_profile_command(CLI::App& app);
Action add_config_keys_command(CLI::App& app);

// Options every run-file command shares: --config and --set.
struct RunOptions {
  std::string config_path;
  std::vector<std::string> overrides;
};
void add_run_options(CLI::App& cmd, RunOptions& options);

// Loads the run file with overrides and completes the data shape (grid read from the data files'
// headers when [data] has sources).
RunConfig load_run(const RunOptions& options);

// The command line as a shell would read it back (arguments quoted where needed); main() sets it
// and `train` records it in <out_dir>/command.txt.
void set_command_line(int argc, char** argv);
const std::string& command_line();

// train.batch_size = "auto": tunes the micro-batch on this run's device (all ranks agree).
int64_t resolve_auto_batch(const RunConfig& config);

}  // namespace wxtrain::cli
