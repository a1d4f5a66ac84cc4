#include "tracking/open_tracker.h"

#include <filesystem>

#include "core/device.h"
#include "core/run_file_text.h"
#include "tracking/csv_sink.h"
#include "tracking/mlflow/mlflow_sink.h"
#include "tracking/tensorboard/tensorboard_sink.h"

namespace wxtrain::tracking {

namespace fs = std::filesystem;

std::string run_name(const RunConfig& config, const TrackingConfig& tracking) {
  if (!tracking.run_name.empty()) return tracking.run_name;
  fs::path dir = fs::path(config.train.out_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // "runs/x/"
  return dir.filename().string();
}

std::unique_ptr<Tracker> open_tracker(const RunConfig& config, const TrackingConfig& t, const RunIdentity& identity) {
  const std::string& run_dir = config.train.out_dir;
  std::vector<std::unique_ptr<Sink>> sinks;
  sinks.push_back(std::make_unique<CsvSink>((fs::path(run_dir) / "metrics.csv").string(), identity.resume));
  if (t.tensorboard) {
    const std::string dir = t.tensorboard_dir.empty() ? run_dir : (fs::path(t.tensorboard_dir) / run_name(config, t)).string();
    sinks.push_back(std::make_unique<TensorBoardSink>(dir));
  }
  if (!t.mlflow_uri.empty()) {
    MlflowRunRecord r;
    r.uri = t.mlflow_uri;
    r.experiment = t.experiment;
    r.run_name = run_name(config, t);
    r.params = flatten_run_file(identity.run_file_text, config.path);
    const BuildInfo build = build_info();
    std::error_code ec;
    r.tags = {{"mlflow.source.name", "wxtrain"},
              {"wxtrain.version", build.wxtrain_version},
              {"wxtrain.libtorch", build.torch_version},
              {"wxtrain.cuda", build.cuda_built ? build.cuda_version : "none"},
              {"wxtrain.world_size", std::to_string(identity.world_size)},
              {"wxtrain.run_dir", fs::absolute(run_dir, ec).lexically_normal().string()}};
    if (!identity.command_line.empty()) r.tags.emplace_back("wxtrain.command", identity.command_line);
    for (const auto& tag : t.tags) r.tags.push_back(tag);
    r.run_dir = run_dir;
    r.resume = identity.resume;
    r.timeout_s = t.timeout;
    r.flush_timeout_s = t.flush_timeout;
    r.checkpoint_max_size = t.checkpoint_max_size;
    sinks.push_back(std::make_unique<MlflowSink>(std::move(r)));
  }
  return std::make_unique<Tracker>(std::move(sinks));
}

}  // namespace wxtrain::tracking
