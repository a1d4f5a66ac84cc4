// `wxtrain sync RUN_DIR`: sends what a run could not send to its MLflow server while it trained
// (the server was down, slow, or out of reach from a compute node): the journal the run keeps in
// RUN_DIR/mlflow/, from where the last send stopped. Run it after the run has ended, from any
// machine that reaches the server (--uri when it is reached by another address there).
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "tracking/mlflow/mlflow_journal.h"

namespace wxtrain::cli {

namespace {

struct SyncArgs {
  std::string run_dir;
  std::string uri;
  double timeout = 30;
};

int run_sync(const SyncArgs& args) {
  if (!std::filesystem::is_directory(args.run_dir))
    throw ConfigError("sync: " + args.run_dir + " is not a run folder (no such directory)");
  const tracking::SendLock lock(args.run_dir, /*create=*/false);
  tracking::MlflowSender sender(args.run_dir, args.uri, args.timeout);
  const int64_t waiting = sender.pending_entries();
  if (waiting == 0) {
    std::cout << args.run_dir << ": nothing to send; its MLflow run is " << sender.run_page() << "\n";
    return 0;
  }
  const auto progress = sender.send_pending();
  if (!sender.artifact_note().empty()) std::cerr << "note: " << sender.artifact_note() << "\n";
  std::cout << "sent " << progress.entries << " record(s) of " << args.run_dir << " to " << sender.uri() << " in "
            << progress.requests << " request(s): " << sender.run_page() << "\n";
  return 0;
}

}  // namespace

Action add_sync_command(CLI::App& app) {
  auto args = std::make_shared<SyncArgs>();
  auto* cmd = app.add_subcommand(
      "sync", "send to MLflow what a run kept in its folder while its server could not be reached");
  cmd->add_option("run_dir", args->run_dir, "the run's folder (train.out_dir)")->required();
  cmd->add_option("--uri", args->uri, "the MLflow server, if not the one the run file named (http://host:port)");
  cmd->add_option("--timeout", args->timeout, "seconds one request may take")->check(CLI::PositiveNumber);
  return [args]() { return run_sync(*args); };
}

}  // namespace wxtrain::cli
