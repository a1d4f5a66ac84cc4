#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
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

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int run_train(const TrainArgs& args) {
  RunConfig config = load_run(args.run);
  trainer::TrainOptions options;
  options.resume = args.resume;
  options.overwrite = args.overwrite;
  options.quiet = args.quiet;
  options.stop_after = args.stop_after;
  options.command_line = command_line();
  // A taken run folder is refused before minutes of batch tuning, not after.
  if (distributed::current_world().rank == 0) trainer::check_run_folder(config, options);
  if (config.train.batch_auto) config.train.batch_size = resolve_auto_batch(config);
  trainer::TrainSummary s = trainer::train(config, {read_text(args.run.config_path), args.run.overrides}, options);
  if (distributed::current_world().rank == 0) {
    std::cout << (s.stopped_early ? "stopped" : "finished") << " at step " << s.last_step << " of "
              << config.train.steps << ", last loss " << s.last_loss << ", " << s.samples_per_s
              << " samples/s per rank; checkpoint " << s.checkpoint << "\n";
    if (!s.validations.empty()) {
      const auto& v = s.validations.back();
      std::cout << "validation skill vs persistence (mean over variables): " << 100.0 * v.mean_skill() << "%\n";
    }
  }
  return 0;
}

}  // namespace

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
