// wxtrain: one binary, one subcommand per job. Errors a user can fix print one "error:" line and
// exit non-zero, never with a stack trace; each exit code has one meaning (core/error.h, ExitCode).
#include <iostream>
#include <map>

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include "cli/commands.h"
#include "core/device.h"
#include "core/error.h"
#include "core/memory_meter.h"
#include "distributed/world.h"

int main(int argc, char** argv) {
  // Count every CPU tensor from the start, so estimate, tune-batch and profile see all of them.
  wxtrain::memory_meter(c10::Device(c10::DeviceType::CPU));
  wxtrain::cli::set_command_line(argc, argv);

  CLI::App app{"wxtrain: memory estimation, batch tuning and training for weather and climate models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "wxtrain 0.1.0");
  std::map<CLI::App*, wxtrain::cli::Action> actions;
  auto add = [&](auto&& adder, const char* name) {
    auto action = adder(app);
    actions[app.get_subcommand(name)] = action;
  };
  add(wxtrain::cli::add_info_command, "info");
  add(wxtrain::cli::add_estimate_command, "estimate");
  add(wxtrain::cli::add_train_command, "train");
  add(wxtrain::cli::add_forecast_command, "forecast");
  add(wxtrain::cli::add_tune_batch_command, "tune-batch");
  add(wxtrain::cli::add_profile_command, "profile");
  add(wxtrain::cli::add_config_keys_command, "config-keys");
  add(wxtrain::cli::add_import_command, "import");
  add(wxtrain::cli::add_export_command, "export");
  add(wxtrain::cli::add_sync_command, "sync");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every argument error exits 2, as a bad run file does.
    const int code = app.exit(e);
    return code == 0 ? wxtrain::kExitOk : wxtrain::kExitBadInput;
  }
  // Under mpirun every rank runs the same command; an error on any rank ends the whole job with its
  // message (run_or_abort) instead of leaving the others blocked in a collective.
  int code = 0;
  try {
    wxtrain::distributed::init_world();
    wxtrain::configure_cpu_threads();
    for (auto& [cmd, action] : actions)
      if (cmd->parsed()) code = wxtrain::distributed::run_or_abort(action);
  } catch (const wxtrain::ConfigError& e) {
    std::cerr << "error: " << e.what() << "\n";
    code = wxtrain::kExitBadInput;
  } catch (const wxtrain::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    code = wxtrain::kExitFailed;
  } catch (const c10::Error& e) {
    std::cerr << "error: " << e.what_without_backtrace() << "\n";
    code = wxtrain::kExitFailed;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    code = wxtrain::kExitFailed;
  }
  wxtrain::distributed::finalize_world();  // also after an error: MPI wants every process to finalise
  return code;
}
