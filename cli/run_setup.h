#pragma once
// One run setup for every command that works on a run: train, tune-batch, estimate and profile from
// a run file, forecast from the run file a checkpoint embeds. The run file is read once; the data's
// grid and coordinates, the channel layout, the "auto" micro-batch and the run folder are settled
// here and nowhere else, so the commands and trainer::train start from the same resolved run.
//
// It lives in cli/ because it is the only layer above everything it settles: "auto" tuning is
// autotune's, the run folder's rules are the trainer's, the grid comes from data.
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/config.h"
#include "data/dataset.h"
#include "trainer/trainer.h"

namespace wxtrain::cli {

// Options every run-file command shares: --config and --set.
struct RunOptions {
  std::string config_path;
  std::vector<std::string> overrides;
};
void add_run_options(CLI::App& cmd, RunOptions& options);

// What a command needs settled beyond the parsed run file.
struct SetupRequest {
  // Open the data to train or forecast on, as training reads it, and keep it (RunSetup::dataset).
  // Otherwise only the files' headers are read, and only where the grid must come from them.
  bool open_data = false;
  // train.batch_size = "auto": tune the micro-batch on this run's device (all ranks agree), never
  // above the training samples a rank holds.
  bool tune_auto_batch = false;
  // Count the training samples per rank (RunSetup::samples_per_rank) from the data's time axis:
  // tune-batch caps its search there.
  bool count_samples = false;
  // The command writes into train.out_dir with these options (--resume, --overwrite): a folder
  // holding another run is refused first, before the data is opened or a batch tuned.
  const trainer::TrainOptions* run_folder = nullptr;
};

// A run as every command sees it.
struct RunSetup {
  RunConfig config;           // parsed once; the data's grid and coordinates and the resolved batch in it
  trainer::RunSource source;  // the run file's text and --set values as read (train records them)
  ChannelLayout channels;     // the run's channels by role
  std::shared_ptr<data::Dataset> dataset;  // the opened data (SetupRequest::open_data), else null
  // Training samples per rank (the loader drops the remainder), when counted: open_data,
  // count_samples or tune_auto_batch with [[data.sources]]; else 0.
  int64_t samples_per_rank = 0;
};

// From a run file and its --set values. Throws ConfigError for a run file that is missing or wrong,
// or a run folder that is taken; DataError for data that cannot be read.
RunSetup setup_run(const RunOptions& options, const SetupRequest& request = {});
// From a run file's text (a checkpoint's); `source_name` names it in messages. Relative paths in
// it resolve against the working directory (checkpoints store absolute ones).
RunSetup setup_run(trainer::RunSource source, const std::string& source_name, const SetupRequest& request = {});

}  // namespace wxtrain::cli
