#include "trainer/metrics_log.h"

#include <unistd.h>

#include <iostream>

#include "core/error.h"

namespace wxtrain::trainer {

ProgressLine::ProgressLine(int64_t first_step, int64_t total_steps)
    : first_(first_step), total_(total_steps), tty_(isatty(STDERR_FILENO)), start_(std::chrono::steady_clock::now()) {}

void ProgressLine::update(const StepMetrics& m, int64_t every) {
  const int64_t done = m.step - first_;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_ - m.step) : 0.0;
  if (!tty_ && m.step % every != 0 && m.step != total_) return;
  const int width = 24;
  const int filled = total_ > 0 ? static_cast<int>(width * m.step / total_) : width;
  char line[400];
  std::snprintf(line, sizeof line, "[%s%s] step %ld/%ld  loss %.4g  %.1f samples/s  ETA %02d:%02d  mem %.2f GB%s",
                std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                static_cast<long>(m.step), static_cast<long>(total_), m.loss, m.samples_per_s,
                static_cast<int>(eta) / 60, static_cast<int>(eta) % 60, m.peak_gb, m.applied ? "" : "  (skipped: inf/NaN grads)");
  if (tty_) std::cerr << "\r" << line << "\033[K" << std::flush;
  else std::cerr << line << "\n";
}

void ProgressLine::finish() {
  if (tty_) std::cerr << "\n";
}

}  // namespace wxtrain::trainer
