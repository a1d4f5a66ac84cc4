#include <iostream>

#include "cli/commands.h"
#include "cli/run_setup.h"
#include "distributed/world.h"
#include "trainer/trainer.h"

namespace wxtrain::cli {

namespace {

struct TrainArgs {
  RunOptions run;
  bool resume = false;
  bool overwrite = false;
  int64_t stop_after = 0;
  bool quiet = false;
};

std::string g_command_line;

int run_train(const TrainArgs& args) {
  trainer::TrainOptions options;
  options.resume = args.resume;
  options.overwrite = args.overwrite;
  options.quiet = args.quiet;
  options.stop_after = args.stop_after;
  options.command_line = command_line();
  SetupRequest request;
  request.open_data = true;
  request.tune_auto_batch = true;
  request.run_folder = &options;
  const RunSetup setup = setup_run(args.run, request);
  const trainer::TrainSummary s = trainer::train(setup.config, setup.dataset, setup.source, options);
  if (distributed::current_world().rank == 0) {
    std::cout << (s.stopped_early ? "stopped" : "finished") << " at step " << s.last_step << " of "
              << setup.config.train.steps << ", last loss " << s.last_loss << ", " << s.samples_per_s
              << " samples/s per rank; checkpoint " << s.checkpoint << "\n";
    if (!s.validations.empty()) {
      const auto& v = s.validations.back();
      std::cout << "validation skill vs persistence (mean over variables): " << 100.0 * v.mean_skill() << "%\n";
    }
  }
  return 0;
}

}  // namespace

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

Action add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand("train", "train or fine-tune a model (one process, or every rank under mpirun)");
  add_run_options(*cmd, args->run);
  auto* resume = cmd->add_flag("--resume", args->resume, "continue exactly from <train.out_dir>/checkpoint.pt");
  cmd->add_flag("--overwrite", args->overwrite,
                "train.out_dir holds another run: start afresh, replacing its checkpoint, metrics and records")
      ->excludes(resume);
  cmd->add_option("--stop-after", args->stop_after, "save and stop after this many steps, as on SIGTERM")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("-q,--quiet", args->quiet, "no progress line");
  return [args]() { return run_train(*args); };
}

}  // namespace wxtrain::cli
