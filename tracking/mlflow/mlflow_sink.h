#pragma once
// MLflow: a run per training run. The records go into the run folder's journal
// (tracking/mlflow/mlflow_journal.h) on the Tracker's thread, and a sender thread of this sink
// posts them to the server about once a second in batches. A server that is down or slow delays
// nothing but that thread; the run ends after at most tracking.flush_timeout of waiting for it, and
// what it did not take stays in the journal for `wxtrain sync <run folder>`.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tracking/mlflow/mlflow_journal.h"
#include "tracking/sink.h"

namespace wxtrain::tracking {

struct MlflowRunRecord {
  std::string uri, experiment, run_name;
  std::vector<std::pair<std::string, std::string>> params;  // the run file, flattened
  std::vector<std::pair<std::string, std::string>> tags;    // command line, versions, [tracking.tags]
  std::string run_dir;
  bool resume = false;              // continue the MLflow run the journal started
  double timeout_s = 10, flush_timeout_s = 30;
  int64_t checkpoint_max_size = 0;  // upload checkpoint.pt at the end when at most this large
};

class MlflowSink : public Sink {
 public:
  explicit MlflowSink(MlflowRunRecord record);
  ~MlflowSink() override;  // stops the sender at once if close() was not called

  void step(const StepMetrics& m) override;
  void scalars(const Scalars& s) override;
  void artifact(const std::string& path) override;
  void flush() override { journal_.sync(); }
  // The run's files as artifacts, the run's end, then up to flush_timeout for the server.
  void close(RunStatus status) override;

 private:
  void metrics(int64_t step, double wall_time, const std::vector<std::pair<std::string, double>>& values);
  void send_loop();
  void stop_sender();

  MlflowRunRecord record_;
  SendLock lock_;
  MlflowJournal journal_;
  MlflowSender sender_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool closing_ = false, stop_now_ = false;
  std::thread thread_;
};

}  // namespace wxtrain::tracking
