#pragma once
// What a run has for its MLflow server, kept in the run folder first and sent from there: the
// server may be down, slow or out of reach (HPC compute nodes), and nothing may be lost.
//
//   <run>/mlflow/journal.jsonl  one JSON object per line, appended as the run goes:
//       {"type":"start","experiment":..,"run_name":..,"start_time":ms,"tags":[[k,v]..]}
//       {"type":"resume","tags":[[k,v]..]}           a resumed run continues the same MLflow run
//       {"type":"params","params":[[k,v]..]}
//       {"type":"metrics","metrics":[[key,value,timestamp_ms,step]..]}   (value "NaN" when not finite)
//       {"type":"artifact","file":"validation.svg"}   a file of the run folder, read when sent
//       {"type":"end","status":"FINISHED","end_time":ms}
//   <run>/mlflow/state.json     the server, the MLflow run once created, and how far the journal
//                               has been sent (a byte offset), rewritten atomically after each request
//   <run>/mlflow/lock           held (flock) by whoever sends: the training run or `wxtrain sync`
//
// MlflowSender sends the journal from its mark on, in order, in batches (up to 1000 metrics a
// request), advancing the mark after each answered request. A request whose answer was lost is
// sent again: MLflow keeps one copy of a metric with the same key, value, timestamp and step, and
// accepts a param logged again with the same value.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tracking/mlflow/mlflow_client.h"

namespace wxtrain::tracking {

std::string mlflow_folder(const std::string& run_dir);  // <run_dir>/mlflow

// The writing end, used by the training run (on the Tracker's thread).
class MlflowJournal {
 public:
  // fresh: a new run (an earlier journal and state in the folder are removed); otherwise entries
  // are appended to the journal there. `uri` is recorded in the state for `wxtrain sync`.
  MlflowJournal(const std::string& run_dir, const std::string& uri, bool fresh);
  ~MlflowJournal();
  MlflowJournal(const MlflowJournal&) = delete;
  MlflowJournal& operator=(const MlflowJournal&) = delete;

  // One line, flushed to the OS (so the sender, reading the file, sees it); throws WriteError.
  void append(const nlohmann::json& entry);
  void sync();  // fsync
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// An exclusive hold on a run's MLflow journal for sending (flock, released with the object or
// the process). Throws Error naming the folder when another process holds it, or (create = false,
// `wxtrain sync`) when the run has no MLflow folder.
class SendLock {
 public:
  SendLock(const std::string& run_dir, bool create);
  ~SendLock();
  SendLock(const SendLock&) = delete;
  SendLock& operator=(const SendLock&) = delete;

 private:
  int fd_ = -1;
};

class MlflowSender {
 public:
  // Reads <run_dir>/mlflow/state.json (absent: nothing sent yet). `uri_override` (`wxtrain sync
  // --uri`) replaces the recorded server, e.g. the same server by another address from a login node.
  MlflowSender(std::string run_dir, const std::string& uri_override, double timeout_s);

  struct Progress {
    int64_t requests = 0;  // answered requests
    int64_t entries = 0;   // journal entries sent
  };
  // Sends every complete journal entry past the mark, or those it can before `deadline` (checked
  // between requests). Throws MlflowError at the first request that fails (what is left stays for
  // the next call), DataError for a journal it cannot read.
  Progress send_pending(std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());
  int64_t pending_entries() const;  // complete entries past the mark
  const std::string& uri() const { return uri_; }
  const std::string& run_id() const { return run_.run_id; }
  // <uri>/#/experiments/<id>/runs/<run id>, where the run is seen in MLflow's UI ("" before it exists).
  std::string run_page() const;
  // Artifacts the server could not take (its artifact store is not proxied), to tell the user once.
  const std::string& artifact_note() const { return artifact_note_; }

 private:
  struct Entry {
    nlohmann::json value;
    int64_t end;  // the byte after its line
  };
  void send_entries(const std::vector<Entry>& entries, Progress& progress, std::chrono::steady_clock::time_point deadline);
  void save_state();
  std::string run_dir_, journal_, state_path_, uri_;
  MlflowClient client_;
  MlflowRun run_;
  int64_t sent_ = 0;  // bytes of the journal already sent
  std::string artifact_note_;
};

}  // namespace wxtrain::tracking
