#pragma once
// MLflow's REST API (https://mlflow.org/docs/latest/rest-api.html), the calls a training run makes,
// over libcurl. Every failure is an MlflowError naming the server, the request and what came back
// (the HTTP status and MLflow's error_code and message, or curl's reason when nothing came back).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace wxtrain::tracking {

class MlflowError : public Error {
 public:
  // http_status 0: no answer (connection refused, timeout, name not resolved).
  MlflowError(const std::string& what, long http_status) : Error(what), http_status_(http_status) {}
  long http_status() const { return http_status_; }

 private:
  long http_status_;
};

struct MlflowMetric {
  std::string key;
  double value = 0;
  int64_t timestamp_ms = 0;
  int64_t step = 0;
};

struct MlflowRun {
  std::string run_id, experiment_id, artifact_uri;
};

class MlflowClient {
 public:
  // `uri`: the server, http(s)://host:port (a trailing slash is ignored); `timeout_s` bounds each
  // request, connecting included.
  MlflowClient(std::string uri, double timeout_s);

  // The experiment's id, created when no experiment has that name.
  std::string experiment_id(const std::string& name);
  MlflowRun create_run(const std::string& experiment_id, const std::string& run_name, int64_t start_ms,
                       const std::vector<std::pair<std::string, std::string>>& tags);
  MlflowRun get_run(const std::string& run_id);
  // At most 1000 metrics and 100 params + tags per call (MLflow's limits for runs/log-batch).
  void log_batch(const std::string& run_id, const std::vector<MlflowMetric>& metrics,
                 const std::vector<std::pair<std::string, std::string>>& params,
                 const std::vector<std::pair<std::string, std::string>>& tags);
  // status: RUNNING, FINISHED, FAILED or KILLED; end_ms 0 = none.
  void update_run(const std::string& run_id, const std::string& status, int64_t end_ms);
  // Uploads `data` as <artifact_path> of the run through the server's artifact proxy
  // (`mlflow server` serves artifacts by default: the run's artifact_uri is mlflow-artifacts:/...).
  void upload_artifact(const MlflowRun& run, const std::string& artifact_path, const std::string& data);

  static bool proxied_artifacts(const MlflowRun& run) { return run.artifact_uri.rfind("mlflow-artifacts:/", 0) == 0; }
  const std::string& uri() const { return uri_; }

 private:
  nlohmann::json request(const std::string& method, const std::string& path, const std::string& body,
                         const std::string& content_type = "application/json");
  std::string uri_;
  double timeout_s_;
};

}  // namespace wxtrain::tracking
