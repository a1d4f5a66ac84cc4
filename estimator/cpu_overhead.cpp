#include "estimator/cpu_overhead.h"

#include <algorithm>
#include <fstream>

#include <unistd.h>

#include "core/memory_meter.h"

namespace wxtrain::estimator {

CpuOverhead cpu_overhead(double process_resident, double counted_per_sample) {
  CpuOverhead o;
  o.process = std::max(0.0, process_resident);
  o.per_sample = kUnseenPerSampleShare * std::max(0.0, counted_per_sample);
  return o;
}

double process_resident_outside_allocator() {
  // statm: total size, then resident, in pages.
  std::ifstream statm("/proc/self/statm");
  long long size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  const double rss = static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
  const double counted = static_cast<double>(memory_meter(c10::Device(c10::kCPU)).snapshot().reserved);
  return std::max(0.0, rss - counted);
}

}  // namespace wxtrain::estimator
