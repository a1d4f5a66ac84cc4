// The Tracker: records reach every sink in the loop's order on another thread; flush() waits for
// them; a sink's failure (a full disk) is thrown on the training thread by the next call.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "core/atomic_file.h"
#include "tracking/tracker.h"

namespace wxtrain::tracking {
namespace {

struct Seen {
  std::vector<std::string> events;
  std::thread::id thread;
};

class RecordingSink : public Sink {
 public:
  explicit RecordingSink(Seen& seen) : seen_(seen) {}
  void step(const StepMetrics& m) override {
    seen_.thread = std::this_thread::get_id();
    seen_.events.push_back("step " + std::to_string(m.step));
  }
  void scalars(const Scalars& s) override { seen_.events.push_back("scalars " + std::to_string(s.step)); }
  void artifact(const std::string& path) override { seen_.events.push_back("artifact " + path); }
  void flush() override { seen_.events.push_back("flush"); }
  void close(RunStatus status) override {
    seen_.events.push_back(status == RunStatus::kFinished ? "close finished" : "close other");
  }

 private:
  Seen& seen_;
};

class FailingSink : public Sink {
 public:
  void step(const StepMetrics& m) override {
    if (m.step == 2) throw WriteError("runs/x/metrics.csv", ENOSPC);
  }
  void scalars(const Scalars&) override {}
};

TEST(Tracker, EverySinkGetsTheRecordsInOrderOnItsThread) {
  Seen a, b;
  std::vector<std::unique_ptr<Sink>> sinks;
  sinks.push_back(std::make_unique<RecordingSink>(a));
  sinks.push_back(std::make_unique<RecordingSink>(b));
  Tracker tracker(std::move(sinks));
  StepMetrics m;
  for (int64_t s = 1; s <= 3; ++s) {
    m.step = s;
    tracker.step(m);
  }
  tracker.scalars({3, {{"val/rmse/t/6h", 1.5}}});
  tracker.artifact("validation.svg");
  tracker.close(RunStatus::kFinished);
  const std::vector<std::string> expected = {"step 1", "step 2", "step 3", "scalars 3", "artifact validation.svg",
                                             "close finished"};
  EXPECT_EQ(a.events, expected);
  EXPECT_EQ(b.events, expected);
  EXPECT_NE(a.thread, std::this_thread::get_id());
}

// A sink stuck on its first record (a server that does not answer) does not hold the loop: both
// calls return while it is still stuck; flush() then waits for it.
class StuckSink : public Sink {
 public:
  explicit StuckSink(std::shared_future<void> release, Seen& seen) : release_(std::move(release)), seen_(seen) {}
  void step(const StepMetrics& m) override {
    release_.wait();
    seen_.events.push_back("step " + std::to_string(m.step));
  }
  void scalars(const Scalars&) override {}
  void flush() override { seen_.events.push_back("flush"); }

 private:
  std::shared_future<void> release_;
  Seen& seen_;
};

TEST(Tracker, AStuckSinkDoesNotHoldTheStepButFlushWaitsForIt) {
  Seen seen;
  std::promise<void> release;
  std::vector<std::unique_ptr<Sink>> sinks;
  sinks.push_back(std::make_unique<StuckSink>(release.get_future().share(), seen));
  Tracker tracker(std::move(sinks));
  StepMetrics m;
  m.step = 1;
  tracker.step(m);
  m.step = 2;
  tracker.step(m);  // returned: the sink is still stuck on step 1
  EXPECT_TRUE(seen.events.empty());
  release.set_value();
  tracker.flush();
  EXPECT_EQ(seen.events, (std::vector<std::string>{"step 1", "step 2", "flush"}));
  tracker.close(RunStatus::kFinished);
}

TEST(Tracker, ASinkFailureIsThrownOnTheTrainingThread) {
  std::vector<std::unique_ptr<Sink>> sinks;
  sinks.push_back(std::make_unique<FailingSink>());
  Tracker tracker(std::move(sinks));
  StepMetrics m;
  m.step = 1;
  tracker.step(m);
  m.step = 2;
  tracker.step(m);
  try {
    tracker.flush();
    FAIL() << "expected the sink's WriteError";
  } catch (const WriteError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write runs/x/metrics.csv: No space left on device");
  }
  m.step = 3;
  EXPECT_THROW(tracker.step(m), WriteError);  // and on every later call
}

}  // namespace
}  // namespace wxtrain::tracking
