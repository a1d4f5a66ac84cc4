#include "tracking/csv_sink.h"

#include <cstdio>

namespace wxtrain::tracking {

CsvSink::CsvSink(const std::string& path, bool append) : out_(path, /*truncate=*/!append) {
  if (out_.empty())
    out_.append("step,epoch,loss,lr,grad_norm,loss_scale,samples_per_s,allocated_GB,reserved_GB,peak_GB,applied,rollout\n");
}

void CsvSink::step(const StepMetrics& m) {
  char line[512];
  std::snprintf(line, sizeof line, "%ld,%ld,%.8g,%.6g,%.6g,%.6g,%.4g,%.6f,%.6f,%.6f,%d,%ld\n",
                static_cast<long>(m.step), static_cast<long>(m.epoch), m.loss, m.lr, m.grad_norm,
                m.loss_scale, m.samples_per_s, m.allocated_gb, m.reserved_gb, m.peak_gb, m.applied ? 1 : 0,
                static_cast<long>(m.rollout));
  out_.append(line);
}

}  // namespace wxtrain::tracking
