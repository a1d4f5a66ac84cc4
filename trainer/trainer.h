#pragma once
// `wxtrain train`: the training loop around TrainingStep — data, schedule (and rollout
// curriculum), validation rollouts scored against persistence and climatology, metrics,
// checkpoints, resume, fine-tuning (onto other channels too) and graceful stops. One code path for one
// process and for every rank under mpirun.
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "distributed/world.h"
#include "data/normalization.h"
#include "trainer/scores.h"

namespace wxtrain::data {
class Dataset;
}

namespace wxtrain::trainer {

struct TrainOptions {
  bool resume = false;     // continue from <out_dir>/checkpoint.pt
  bool overwrite = false;  // out_dir holds another run: start afresh, replacing its files
  bool quiet = false;      // no progress line (tests)
  int64_t stop_after = 0;  // stop (as on SIGTERM) after this many steps of this invocation (0 = off)
  std::string command_line;  // recorded in <out_dir>/command.txt ("" = not recorded)
};

// A validation: the scores of the model, persistence and the climatology per predicted channel
// and lead time (trainer/scores.h), and for a quick look the first lead's latitude-weighted RMSE
// of the model and of persistence (the state at t held constant).
struct Validation {
  int64_t step = 0;
  std::vector<std::string> names;
  std::vector<double> model_rmse, persistence_rmse;  // lead 1
  LeadScores scores;
  double mean_skill() const;  // mean over variables of 1 - model/persistence at lead 1
};

struct TrainSummary {
  int64_t first_step = 0, last_step = 0;
  bool stopped_early = false;    // SIGINT/SIGTERM (or stop_after): saved and stopped
  double last_loss = 0;
  double samples_per_s = 0;      // whole-run average on this rank
  std::vector<Validation> validations;
  std::string checkpoint;
};

std::string checkpoint_path(const RunConfig& config);  // <out_dir>/checkpoint.pt

// `fresh` (this run's statistics) with the pretrained ones of the channels both name: a
// fine-tuned model keeps the scaling its weights were trained with.
data::Normalization keep_pretrained_statistics(const data::Normalization& fresh, const data::Normalization& pretrained);

// A run folder belongs to one run. Without --resume or --overwrite, a folder holding another run's
// files (checkpoint.pt, metrics.csv, validation.csv, run.toml, command.txt) is refused with a
// ConfigError that offers --resume, --overwrite or a new folder. The run setup (cli/run_setup.h)
// checks it once, on rank 0, before the data is opened or a batch tuned, so the refusal comes first.
void check_run_folder(const RunConfig& config, const TrainOptions& options);

// The run file as the user wrote it and the --set values applied to it; checkpoints keep both so
// forecast rebuilds the same model.
struct RunSource {
  std::string text;
  std::vector<std::string> overrides;
};

// Trains the run the setup resolved (cli/run_setup.h): `config` with the data's grid and a micro-batch
// (not "auto") in it, `dataset` the data opened from config.data, the run folder already checked.
// Beside its outputs a run records its run file with the --set values written in (run.toml) and
// its command line (command.txt; a resumed run appends its own), both written atomically.
TrainSummary train(const RunConfig& config, std::shared_ptr<data::Dataset> dataset, const RunSource& source,
                   const TrainOptions& options);

}  // namespace wxtrain::trainer
