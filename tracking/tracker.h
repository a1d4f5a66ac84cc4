#pragma once
// The Tracker: the training loop's one way out for metrics. Its calls only queue the record and
// return; a background thread passes each record to every sink (tracking/sink.h) in order. So a
// slow disk or a slow or absent tracking server never delays a step.
//
// Errors: a sink's exception (a WriteError: disk full) is kept and thrown again on the training
// thread by the next call, so the run ends with "cannot write <file>: ..." as for its own files;
// after it no sink gets more records.
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tracking/sink.h"

namespace wxtrain::tracking {

class Tracker {
 public:
  explicit Tracker(std::vector<std::unique_ptr<Sink>> sinks);
  // Not closed (an exception ends the run): closes the sinks with RunStatus::kFailed; never throws.
  ~Tracker();
  Tracker(const Tracker&) = delete;
  Tracker& operator=(const Tracker&) = delete;

  void step(StepMetrics m);
  void scalars(Scalars s);
  void artifact(const std::string& path);
  // Waits until every record given so far is written and flushed by every sink (local files
  // only: the MLflow sink's network sending is not waited for). Called before a checkpoint, so the
  // run's records reach at least the step the checkpoint holds.
  void flush();
  // Writes what is queued, closes every sink (the MLflow sink waits at most
  // tracking.flush_timeout for its server) and stops the thread.
  void close(RunStatus status);

 private:
  void post(std::function<void(Sink&)> work);
  void run();
  void rethrow_failure();

  std::vector<std::unique_ptr<Sink>> sinks_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<std::function<void(Sink&)>> queue_;
  uint64_t posted_ = 0, finished_ = 0;  // records queued and records every sink has taken
  bool stopping_ = false, closed_ = false;
  std::exception_ptr failure_;
  std::thread thread_;
};

}  // namespace wxtrain::tracking
