#include "tracking/mlflow/mlflow_sink.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>

namespace wxtrain::tracking {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

json pairs_json(const std::vector<std::pair<std::string, std::string>>& entries) {
  json out = json::array();
  for (const auto& [k, v] : entries) out.push_back({k, v});
  return out;
}

const char* status_name(RunStatus s) {
  switch (s) {
    case RunStatus::kFinished: return "FINISHED";
    case RunStatus::kStopped: return "KILLED";
    case RunStatus::kFailed: return "FAILED";
  }
  return "FAILED";
}

}  // namespace

MlflowSink::MlflowSink(MlflowRunRecord record)
    : record_(std::move(record)),
      lock_(record_.run_dir, /*create=*/true),
      journal_(record_.run_dir, record_.uri,
               /*fresh=*/!(record_.resume && fs::exists(fs::path(mlflow_folder(record_.run_dir)) / "journal.jsonl"))),
      sender_(record_.run_dir, record_.uri, record_.timeout_s) {
  if (record_.resume && fs::file_size(journal_.path()) > 0) {
    journal_.append({{"type", "resume"}, {"tags", pairs_json(record_.tags)}});
  } else {
    journal_.append({{"type", "start"},
                     {"experiment", record_.experiment},
                     {"run_name", record_.run_name},
                     {"start_time", now_ms()},
                     {"tags", pairs_json(record_.tags)}});
    journal_.append({{"type", "params"}, {"params", pairs_json(record_.params)}});
  }
  thread_ = std::thread([this] { send_loop(); });
}

MlflowSink::~MlflowSink() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_now_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MlflowSink::metrics(int64_t step, double wall_time, const std::vector<std::pair<std::string, double>>& values) {
  const int64_t ms = static_cast<int64_t>(wall_time * 1000.0);
  json list = json::array();
  for (const auto& [key, value] : values)
    list.push_back({key, std::isfinite(value) ? json(value) : json(std::isnan(value) ? "NaN" : value > 0 ? "inf" : "-inf"),
                    ms, step});
  journal_.append({{"type", "metrics"}, {"metrics", list}});
}

void MlflowSink::step(const StepMetrics& m) { metrics(m.step, m.wall_time, named_values(m)); }

void MlflowSink::scalars(const Scalars& s) { metrics(s.step, s.wall_time, s.values); }

void MlflowSink::artifact(const std::string& path) {
  std::error_code ec;
  const fs::path relative = fs::relative(path, record_.run_dir, ec);
  const bool inside = !ec && !relative.empty() && relative.begin()->string() != "..";
  journal_.append({{"type", "artifact"}, {"file", inside ? relative.string() : fs::absolute(path).string()}});
}

void MlflowSink::close(RunStatus status) {
  const fs::path dir(record_.run_dir);
  for (const char* name : {"run.toml", "command.txt", "metrics.csv", "validation.csv", "validation.svg"})
    if (fs::exists(dir / name)) artifact((dir / name).string());
  // The memory plot scripts/demo.sh writes beside the run folder (estimate --svg <run>-memory.svg).
  const fs::path memory_svg = dir.parent_path() / (dir.filename().string() + "-memory.svg");
  if (fs::exists(memory_svg)) artifact(memory_svg.string());
  std::error_code ec;
  const auto checkpoint_size = fs::file_size(dir / "checkpoint.pt", ec);
  if (!ec && record_.checkpoint_max_size > 0 && static_cast<int64_t>(checkpoint_size) <= record_.checkpoint_max_size)
    artifact((dir / "checkpoint.pt").string());
  journal_.append({{"type", "end"}, {"status", status_name(status)}, {"end_time", now_ms()}});
  journal_.sync();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

// About once a second: everything new in one go. After a failure the run goes on and says so once;
// the sender retries with a growing pause (up to 30 s). Closing, it sends until the journal is
// empty, a request fails, or flush_timeout has passed.
void MlflowSink::send_loop() {
  bool failing = false;
  std::string last_error;
  auto pause = std::chrono::milliseconds(1000);
  Clock::time_point deadline = Clock::time_point::max();
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (!closing_) wake_.wait_for(lock, pause, [&] { return closing_ || stop_now_; });
    if (stop_now_) return;
    const bool closing = closing_;
    if (closing && deadline == Clock::time_point::max())
      deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(record_.flush_timeout_s * 1000));
    lock.unlock();
    bool failed_now = false;
    try {
      sender_.send_pending(deadline);
      if (failing) std::cerr << "MLflow at " << record_.uri << " answers again: the run's records are sent\n";
      failing = false;
      pause = std::chrono::milliseconds(1000);
    } catch (const std::exception& e) {
      failed_now = true;
      last_error = e.what();
      if (!failing)
        std::cerr << "warning: " << last_error << "; training goes on, its MLflow records are kept in "
                  << mlflow_folder(record_.run_dir) << " and sent when the server answers (or by `wxtrain sync "
                  << record_.run_dir << "`)\n";
      failing = true;
      pause = std::min(pause * 2, std::chrono::milliseconds(30000));
    }
    lock.lock();
    if (!closing) continue;
    int64_t left = 0;
    try {
      left = sender_.pending_entries();
    } catch (...) {
    }
    if (left == 0 || failed_now || Clock::now() >= deadline) {
      if (!sender_.artifact_note().empty()) std::cerr << "note: MLflow: " << sender_.artifact_note() << "\n";
      if (left == 0)
        std::cerr << "MLflow: run " << sender_.run_id() << " at " << sender_.run_page() << "\n";
      else
        std::cerr << "warning: " << left << " MLflow record(s) of this run were not sent to " << record_.uri
                  << (failed_now ? " (" + last_error + ")" : " within tracking.flush_timeout") << "; they are kept in "
                  << mlflow_folder(record_.run_dir) << ": send them with `wxtrain sync " << record_.run_dir << "`\n";
      return;
    }
  }
}

}  // namespace wxtrain::tracking
