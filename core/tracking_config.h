#pragma once
// [tracking] of the run file: where a run's metrics go besides metrics.csv, for watching and
// comparing runs (tracking/): TensorBoard event files, an MLflow server. Both off by default.
//
// The run-file schema (core/config.cpp) reads and checks [tracking] with every other section, so
// its errors, --set and docs/config.md work as for any key; but it is not a field of RunConfig,
// which every component includes and none but the trainer's observer needs: the trainer reads it
// from the run's text with tracking_config().
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace wxtrain {

struct TrackingConfig {
  std::string mlflow_uri;       // tracking.mlflow_uri: an MLflow server, "http://host:5000" ("" = off)
  std::string experiment = "wxtrain";  // tracking.experiment: the MLflow experiment (created if missing)
  std::string run_name;         // tracking.run_name: "" = the run folder's name
  std::vector<std::pair<std::string, std::string>> tags;  // [tracking.tags] key = "value", on the MLflow run
  bool tensorboard = false;     // tracking.tensorboard: write TensorBoard event files
  // tracking.tensorboard_dir: "" = event files in the run folder; else in <dir>/<run name>, so
  // `tensorboard --logdir <dir>` compares the runs that share it.
  std::string tensorboard_dir;
  // tracking.checkpoint_max_size: checkpoint.pt is uploaded to MLflow at the end when at most this
  // large (0 = never); validation.svg, the run file, command line and CSVs always are.
  int64_t checkpoint_max_size = 0;
  double timeout = 10;          // tracking.timeout: seconds one request to the server may take
  // tracking.flush_timeout: at the end of the run, seconds to wait for a reachable server to take
  // what is still queued; the rest stays in the run folder for `wxtrain sync`.
  double flush_timeout = 30;
};

// [tracking] of a run file's text with the --set values applied, checked as load_config checks
// it (ConfigError naming file, line and key).
TrackingConfig tracking_config(const std::string& toml_text, const std::string& source_name,
                               const std::vector<std::string>& overrides = {});

}  // namespace wxtrain
