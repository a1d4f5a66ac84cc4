#include "tracking/mlflow/mlflow_journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/atomic_file.h"

namespace wxtrain::tracking {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The file's bytes from `offset` on (a journal is read from its sent mark, not from the start).
std::string read_from(const std::string& path, int64_t offset) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(offset);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::pair<std::string, std::string>> pairs_of(const json& list) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& p : list) out.emplace_back(p.at(0).get<std::string>(), p.at(1).get<std::string>());
  return out;
}

double number_of(const json& v) {
  if (v.is_string()) return std::stod(v.get<std::string>());  // "NaN", "inf"
  return v.get<double>();
}

}  // namespace

std::string mlflow_folder(const std::string& run_dir) { return (fs::path(run_dir) / "mlflow").string(); }

MlflowJournal::MlflowJournal(const std::string& run_dir, const std::string& uri, bool fresh) {
  const std::string dir = mlflow_folder(run_dir);
  make_directories(dir);
  path_ = (fs::path(dir) / "journal.jsonl").string();
  const std::string state = (fs::path(dir) / "state.json").string();
  if (fresh || !fs::exists(state))
    write_file_atomically(state, json{{"uri", uri}, {"sent", 0}}.dump(1) + "\n");
  file_ = std::fopen(path_.c_str(), fresh ? "wb" : "ab");
  if (!file_) throw WriteError(path_, errno);
}

MlflowJournal::~MlflowJournal() {
  if (file_) std::fclose(file_);
}

void MlflowJournal::append(const json& entry) {
  const std::string line = entry.dump() + "\n";
  errno = 0;
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    throw WriteError(path_, errno ? errno : EIO);
}

void MlflowJournal::sync() {
  if (std::fflush(file_) != 0 || fsync(fileno(file_)) != 0) throw WriteError(path_, errno ? errno : EIO);
}

namespace {

Error no_journal(const std::string& run_dir) {
  return Error(run_dir + " has no MLflow journal (" + (fs::path(mlflow_folder(run_dir)) / "journal.jsonl").string() +
               "): its run did not log to MLflow (set tracking.mlflow_uri in the run file)");
}

}  // namespace

SendLock::SendLock(const std::string& run_dir, bool create) {
  const std::string dir = mlflow_folder(run_dir);
  if (!create && !fs::is_directory(dir)) throw no_journal(run_dir);
  make_directories(dir);
  const std::string path = (fs::path(dir) / "lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw WriteError(path, errno);
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    fd_ = -1;
    throw Error(dir + " is being sent to MLflow by another process (a run still training in " + run_dir +
                "?): wait for it to end, then run `wxtrain sync " + run_dir + "`");
  }
}

SendLock::~SendLock() {
  if (fd_ >= 0) ::close(fd_);
}

MlflowSender::MlflowSender(std::string run_dir, const std::string& uri_override, double timeout_s)
    : run_dir_(std::move(run_dir)),
      journal_((fs::path(mlflow_folder(run_dir_)) / "journal.jsonl").string()),
      state_path_((fs::path(mlflow_folder(run_dir_)) / "state.json").string()),
      client_("", timeout_s) {
  if (!fs::exists(journal_)) throw no_journal(run_dir_);
  json state = json::object();
  if (fs::exists(state_path_)) {
    state = json::parse(read_file(state_path_), nullptr, false);
    if (!state.is_object()) throw DataError(state_path_ + " is not valid JSON: the MLflow state of " + run_dir_ + " is damaged");
  }
  uri_ = uri_override.empty() ? state.value("uri", std::string()) : uri_override;
  if (uri_.empty())
    throw Error(state_path_ + " names no MLflow server: give one with --uri http://host:port");
  client_ = MlflowClient(uri_, timeout_s);
  sent_ = state.value("sent", int64_t{0});
  run_.run_id = state.value("run_id", std::string());
  run_.experiment_id = state.value("experiment_id", std::string());
  run_.artifact_uri = state.value("artifact_uri", std::string());
}

void MlflowSender::save_state() {
  json state = {{"uri", uri_}, {"sent", sent_}};
  if (!run_.run_id.empty())
    state.update({{"run_id", run_.run_id}, {"experiment_id", run_.experiment_id}, {"artifact_uri", run_.artifact_uri}});
  write_file_atomically(state_path_, state.dump(1) + "\n");
}

std::string MlflowSender::run_page() const {
  if (run_.run_id.empty()) return "";
  return client_.uri() + "/#/experiments/" + run_.experiment_id + "/runs/" + run_.run_id;
}

int64_t MlflowSender::pending_entries() const {
  std::error_code ec;
  const int64_t size = static_cast<int64_t>(fs::file_size(journal_, ec));
  if (ec || size <= sent_) return 0;
  const std::string text = read_from(journal_, sent_);
  return static_cast<int64_t>(std::count(text.begin(), text.end(), '\n'));
}

MlflowSender::Progress MlflowSender::send_pending(std::chrono::steady_clock::time_point deadline) {
  Progress progress;
  std::error_code ec;
  const int64_t size = static_cast<int64_t>(fs::file_size(journal_, ec));
  if (ec) throw DataError(journal_ + ": cannot read the MLflow journal (" + ec.message() + ")");
  if (sent_ > size) sent_ = 0;  // a journal started afresh
  const int64_t base = sent_;
  const std::string text = read_from(journal_, base);
  // The complete lines past the mark, with where each ends.
  std::vector<Entry> entries;
  for (size_t begin = 0; begin < text.size();) {
    const size_t nl = text.find('\n', begin);
    if (nl == std::string::npos) break;  // being written
    json value = json::parse(text.substr(begin, nl - begin), nullptr, false);
    if (!value.is_object() || !value.contains("type"))
      throw DataError(journal_ + ": the entry at byte " + std::to_string(base + static_cast<int64_t>(begin)) +
                      " is not a journal entry (the file is damaged)");
    entries.push_back({std::move(value), base + static_cast<int64_t>(nl + 1)});
    begin = nl + 1;
  }
  try {
    send_entries(entries, progress, deadline);
  } catch (const json::exception& e) {
    throw DataError(journal_ + ": an entry after byte " + std::to_string(sent_) + " is malformed (" + e.what() + ")");
  }
  return progress;
}

void MlflowSender::send_entries(const std::vector<Entry>& entries, Progress& progress,
                                std::chrono::steady_clock::time_point deadline) {
  auto done = [&](int64_t end, int64_t count) {
    sent_ = end;
    save_state();
    ++progress.requests;
    progress.entries += count;
  };
  auto need_run = [&] {
    if (run_.run_id.empty())
      throw DataError(journal_ + " has entries before its run was started (no \"start\" entry): the file is damaged");
  };
  for (size_t i = 0; i < entries.size() && std::chrono::steady_clock::now() < deadline;) {
    const json& e = entries[i].value;
    const std::string type = e.at("type").get<std::string>();
    if (type == "start") {
      if (run_.run_id.empty()) {
        const std::string experiment = client_.experiment_id(e.at("experiment").get<std::string>());
        run_ = client_.create_run(experiment, e.at("run_name").get<std::string>(), e.at("start_time").get<int64_t>(),
                                  pairs_of(e.at("tags")));
      }
      done(entries[i].end, 1);
      ++i;
    } else if (type == "resume") {
      need_run();
      client_.update_run(run_.run_id, "RUNNING", 0);
      const auto tags = pairs_of(e.at("tags"));
      for (size_t k = 0; k < tags.size(); k += 100)
        client_.log_batch(run_.run_id, {}, {}, {tags.begin() + k, tags.begin() + std::min(tags.size(), k + 100)});
      done(entries[i].end, 1);
      ++i;
    } else if (type == "params") {
      need_run();
      const auto params = pairs_of(e.at("params"));
      for (size_t k = 0; k < params.size(); k += 100)
        client_.log_batch(run_.run_id, {}, {params.begin() + k, params.begin() + std::min(params.size(), k + 100)}, {});
      done(entries[i].end, 1);
      ++i;
    } else if (type == "metrics") {
      need_run();
      // Consecutive metrics entries in one request, up to MLflow's 1000 metrics.
      std::vector<MlflowMetric> batch;
      size_t j = i;
      while (j < entries.size() && entries[j].value.at("type") == "metrics") {
        const json& list = entries[j].value.at("metrics");
        if (!batch.empty() && batch.size() + list.size() > 1000) break;
        for (const auto& m : list)
          batch.push_back({m.at(0).get<std::string>(), number_of(m.at(1)), m.at(2).get<int64_t>(), m.at(3).get<int64_t>()});
        ++j;
      }
      for (size_t k = 0; k < batch.size(); k += 1000)
        client_.log_batch(run_.run_id, {batch.begin() + k, batch.begin() + std::min(batch.size(), k + 1000)}, {}, {});
      done(entries[j - 1].end, static_cast<int64_t>(j - i));
      i = j;
    } else if (type == "artifact") {
      need_run();
      const std::string file = e.at("file").get<std::string>();
      const fs::path local = fs::path(file).is_absolute() ? fs::path(file) : fs::path(run_dir_) / file;
      if (!MlflowClient::proxied_artifacts(run_)) {
        artifact_note_ = "the server keeps this run's artifacts at " + run_.artifact_uri +
                         ", which it does not serve: artifacts not uploaded (start `mlflow server` with "
                         "--serve-artifacts, its default)";
      } else if (fs::exists(local)) {
        client_.upload_artifact(run_, local.filename().string(), read_file(local.string()));
      }
      done(entries[i].end, 1);
      ++i;
    } else if (type == "end") {
      need_run();
      client_.update_run(run_.run_id, e.at("status").get<std::string>(), e.at("end_time").get<int64_t>());
      done(entries[i].end, 1);
      ++i;
    } else {
      throw DataError(journal_ + ": unknown entry type '" + type + "'");
    }
  }
}

}  // namespace wxtrain::tracking
