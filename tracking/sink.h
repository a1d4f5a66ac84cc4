#pragma once
// Tracking is an observer: the training loop hands its records to a Tracker (tracking/tracker.h),
// which passes them to every Sink on its own thread, so no sink's disk or network is ever on the
// step's path. A sink: metrics.csv (csv_sink.h), TensorBoard event files
// (tensorboard/tensorboard_sink.h), an MLflow server (mlflow/mlflow_sink.h).
//
// Sinks are called from the Tracker's thread only, one record at a time, in the order the loop
// gave them. A sink that cannot write a file throws WriteError; the Tracker hands it to the
// training thread, which ends the run with it as it would for its own files.
#include <string>

#include "tracking/records.h"

namespace wxtrain::tracking {

// How a run ended, as MLflow records it.
enum class RunStatus { kFinished, kStopped, kFailed };

class Sink {
 public:
  virtual ~Sink() = default;
  virtual void step(const StepMetrics& m) = 0;
  virtual void scalars(const Scalars& s) = 0;
  // A file of the run (validation.svg after each validation, the run's records at the end) that
  // a sink keeping files may upload; its contents are read when it is sent.
  virtual void artifact(const std::string& path) {}
  // What was written so far survives a crash (before a checkpoint).
  virtual void flush() {}
  // The run ended; the last call.
  virtual void close(RunStatus status) {}
};

}  // namespace wxtrain::tracking
