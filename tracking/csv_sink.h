#pragma once
// metrics.csv: one row per step, for plotting afterwards (the file a run has always written).
#include <string>

#include "core/atomic_file.h"
#include "tracking/sink.h"

namespace wxtrain::tracking {

class CsvSink : public Sink {
 public:
  // Appends when resuming (the file keeps the earlier steps), else starts a new file with a header.
  // A row that cannot be written (full disk) throws WriteError and leaves the file at its last
  // complete row.
  CsvSink(const std::string& path, bool append);
  void step(const StepMetrics& m) override;
  void scalars(const Scalars&) override {}  // validation scores have validation.csv

 private:
  AppendFile out_;
};

}  // namespace wxtrain::tracking
