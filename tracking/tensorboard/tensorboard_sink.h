#pragma once
// TensorBoard: every step's values (loss, lr, ..., memory/peak_GB) and the validation scores as
// scalars, written to an event file as the run goes (`tensorboard --logdir <folder>`).
#include <memory>
#include <string>

#include "tracking/sink.h"
#include "tracking/tensorboard/event_file.h"

namespace wxtrain::tracking {

class TensorBoardSink : public Sink {
 public:
  // A new event file in `dir` (a resumed run adds one beside the first: TensorBoard reads a
  // folder's files as one run, by step).
  explicit TensorBoardSink(const std::string& dir) : file_(dir) {}
  void step(const StepMetrics& m) override { file_.write(m.wall_time, m.step, named_values(m)); }
  void scalars(const Scalars& s) override { file_.write(s.wall_time, s.step, s.values); }
  void flush() override { file_.sync(); }
  void close(RunStatus) override { file_.sync(); }

 private:
  EventFile file_;
};

}  // namespace wxtrain::tracking
