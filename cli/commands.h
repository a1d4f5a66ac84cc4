#pragma once
// Each subcommand registers itself on the app and returns the exit code of its run.
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

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
Action add_import_command(CLI::App& app);  // commands/interop.cpp
Action add_export_command(CLI::App& app);
Action add_sync_command(CLI::App& app);

// The command line as a shell would read it back (arguments quoted where needed); main() sets it
// and `train` records it in <out_dir>/command.txt.
void set_command_line(int argc, char** argv);
const std::string& command_line();

}  // namespace wxtrain::cli
