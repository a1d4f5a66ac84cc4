#pragma once
// The Tracker of a training run (rank 0's; other ranks have none and log nothing), with its sinks
// from the run file's [tracking] (core/tracking_config.h): metrics.csv always, TensorBoard event
// files with tracking.tensorboard, an MLflow run with tracking.mlflow_uri.
#include <memory>
#include <string>

#include "core/config.h"
#include "core/tracking_config.h"
#include "tracking/tracker.h"

namespace wxtrain::tracking {

struct RunIdentity {
  std::string run_file_text;  // the run file with its --set values written in (run.toml)
  std::string command_line;   // "" = not recorded
  int world_size = 1;
  bool resume = false;        // continue metrics.csv, the TensorBoard folder and the MLflow run
};

std::unique_ptr<Tracker> open_tracker(const RunConfig& config, const TrackingConfig& tracking,
                                      const RunIdentity& identity);

// tracking.run_name, or the run folder's name.
std::string run_name(const RunConfig& config, const TrackingConfig& tracking);

}  // namespace wxtrain::tracking
