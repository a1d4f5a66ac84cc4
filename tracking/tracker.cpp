#include "tracking/tracker.h"

#include <chrono>

namespace wxtrain::tracking {

namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::vector<std::pair<std::string, double>> named_values(const StepMetrics& m) {
  return {{"loss", m.loss},
          {"lr", m.lr},
          {"grad_norm", m.grad_norm},
          {"loss_scale", m.loss_scale},
          {"samples_per_s", m.samples_per_s},
          {"memory/allocated_GB", m.allocated_gb},
          {"memory/reserved_GB", m.reserved_gb},
          {"memory/peak_GB", m.peak_gb},
          {"rollout", static_cast<double>(m.rollout)}};
}

Tracker::Tracker(std::vector<std::unique_ptr<Sink>> sinks) : sinks_(std::move(sinks)), thread_([this] { run(); }) {}

Tracker::~Tracker() {
  try {
    close(RunStatus::kFailed);
  } catch (...) {
    // The training thread is already unwinding with its own error (or this one, thrown before).
  }
}

void Tracker::post(std::function<void(Sink&)> work) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
  if (closed_) return;
  queue_.push_back(std::move(work));
  ++posted_;
  wake_.notify_one();
}

void Tracker::rethrow_failure() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
}

void Tracker::step(StepMetrics m) {
  m.wall_time = unix_seconds();
  post([m](Sink& s) { s.step(m); });
}

void Tracker::scalars(Scalars s) {
  s.wall_time = unix_seconds();
  post([s = std::move(s)](Sink& sink) { sink.scalars(s); });
}

void Tracker::artifact(const std::string& path) {
  post([path](Sink& s) { s.artifact(path); });
}

void Tracker::flush() {
  post([](Sink& s) { s.flush(); });
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t target = posted_;
  done_.wait(lock, [&] { return finished_ >= target || failure_; });
  if (failure_) std::rethrow_exception(failure_);
}

void Tracker::close(RunStatus status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return;
    if (!failure_) {
      queue_.push_back([status](Sink& s) { s.close(status); });
      ++posted_;
    }
    closed_ = true;
    stopping_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  rethrow_failure();
}

// The thread: each record to every sink, in order; the first failure stops the delivery.
void Tracker::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return;  // stopping, and everything delivered
    std::function<void(Sink&)> work = std::move(queue_.front());
    queue_.pop_front();
    const bool deliver = !failure_;
    lock.unlock();
    std::exception_ptr failed;
    if (deliver) {
      try {
        for (auto& sink : sinks_) work(*sink);
      } catch (...) {
        failed = std::current_exception();
      }
    }
    lock.lock();
    if (failed && !failure_) failure_ = failed;
    ++finished_;
    done_.notify_all();
  }
}

}  // namespace wxtrain::tracking
