#include "tracking/mlflow/mlflow_client.h"

#include <curl/curl.h>

#include <cmath>
#include <memory>
#include <mutex>

namespace wxtrain::tracking {

namespace {

using json = nlohmann::json;

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t append_body(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

// A metric value as MLflow's JSON takes it: NaN and the infinities as protobuf's JSON names them.
json metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

json key_values(const std::vector<std::pair<std::string, std::string>>& entries) {
  json out = json::array();
  for (const auto& [k, v] : entries) out.push_back({{"key", k}, {"value", v}});
  return out;
}

MlflowRun run_of(const json& answer) {
  const json& info = answer.at("run").at("info");
  return {info.at("run_id").get<std::string>(), info.at("experiment_id").get<std::string>(),
          info.value("artifact_uri", std::string())};
}

}  // namespace

MlflowClient::MlflowClient(std::string uri, double timeout_s) : uri_(std::move(uri)), timeout_s_(timeout_s) {
  while (!uri_.empty() && uri_.back() == '/') uri_.pop_back();
  init_curl_once();
}

json MlflowClient::request(const std::string& method, const std::string& path, const std::string& body,
                           const std::string& content_type) {
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) throw MlflowError("MLflow at " + uri_ + ": cannot start an HTTP request (curl_easy_init failed)", 0);
  const std::string url = uri_ + path;
  std::string answer;
  char curl_error[CURL_ERROR_SIZE] = "";
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> headers(
      curl_slist_append(nullptr, ("Content-Type: " + content_type).c_str()), curl_slist_free_all);
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  if (method != "GET") {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &answer);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_error);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_s_ * 1000));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::min(timeout_s_, 5.0) * 1000));
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // called from worker threads: no SIGALRM for timeouts
  const std::string what = method + " " + path;
  const CURLcode code = curl_easy_perform(c);
  if (code != CURLE_OK)
    throw MlflowError("MLflow at " + uri_ + " did not answer " + what + ": " +
                          (curl_error[0] ? curl_error : curl_easy_strerror(code)),
                      0);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  json parsed = json::parse(answer, nullptr, /*allow_exceptions=*/false);
  if (status < 200 || status >= 300) {
    std::string detail;
    if (parsed.is_object() && parsed.contains("error_code"))
      detail = parsed.value("error_code", "") + ": " + parsed.value("message", "");
    else
      detail = answer.substr(0, 300);
    throw MlflowError("MLflow at " + uri_ + " answered HTTP " + std::to_string(status) + " to " + what +
                          (detail.empty() ? "" : ": " + detail),
                      status);
  }
  if (parsed.is_discarded()) return json::object();
  return parsed;
}

std::string MlflowClient::experiment_id(const std::string& name) {
  try {
    char* escaped = curl_easy_escape(nullptr, name.c_str(), static_cast<int>(name.size()));
    const std::string query(escaped ? escaped : "");
    curl_free(escaped);
    return request("GET", "/api/2.0/mlflow/experiments/get-by-name?experiment_name=" + query, "")
        .at("experiment")
        .at("experiment_id")
        .get<std::string>();
  } catch (const MlflowError& e) {
    if (e.http_status() != 404) throw;  // RESOURCE_DOES_NOT_EXIST: create it
  }
  return request("POST", "/api/2.0/mlflow/experiments/create", json{{"name", name}}.dump())
      .at("experiment_id")
      .get<std::string>();
}

MlflowRun MlflowClient::create_run(const std::string& experiment_id, const std::string& run_name, int64_t start_ms,
                                   const std::vector<std::pair<std::string, std::string>>& tags) {
  json body = {{"experiment_id", experiment_id}, {"run_name", run_name}, {"start_time", start_ms}, {"tags", key_values(tags)}};
  return run_of(request("POST", "/api/2.0/mlflow/runs/create", body.dump()));
}

MlflowRun MlflowClient::get_run(const std::string& run_id) {
  return run_of(request("GET", "/api/2.0/mlflow/runs/get?run_id=" + run_id, ""));
}

void MlflowClient::log_batch(const std::string& run_id, const std::vector<MlflowMetric>& metrics,
                             const std::vector<std::pair<std::string, std::string>>& params,
                             const std::vector<std::pair<std::string, std::string>>& tags) {
  json m = json::array();
  for (const auto& x : metrics)
    m.push_back({{"key", x.key}, {"value", metric_value(x.value)}, {"timestamp", x.timestamp_ms}, {"step", x.step}});
  json body = {{"run_id", run_id}, {"metrics", m}, {"params", key_values(params)}, {"tags", key_values(tags)}};
  request("POST", "/api/2.0/mlflow/runs/log-batch", body.dump());
}

void MlflowClient::update_run(const std::string& run_id, const std::string& status, int64_t end_ms) {
  json body = {{"run_id", run_id}, {"status", status}};
  if (end_ms > 0) body["end_time"] = end_ms;
  request("POST", "/api/2.0/mlflow/runs/update", body.dump());
}

void MlflowClient::upload_artifact(const MlflowRun& run, const std::string& artifact_path, const std::string& data) {
  // mlflow-artifacts:/<experiment>/<run>/artifacts -> PUT /api/2.0/mlflow-artifacts/artifacts/<experiment>/<run>/artifacts/<file>
  const std::string root = run.artifact_uri.substr(std::string("mlflow-artifacts:").size());
  std::string path = root;
  while (!path.empty() && path.front() == '/') path.erase(0, 1);
  request("PUT", "/api/2.0/mlflow-artifacts/artifacts/" + path + "/" + artifact_path, data,
          "application/octet-stream");
}

}  // namespace wxtrain::tracking
