#pragma once
// What the training-step benchmarks (train_throughput, ddp_step) share: their common options and
// the median they report.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace wxtrain::bench {

struct StepBenchArgs {
  std::string config;
  std::string precision = "fp32";
  int64_t batch = 8;
  int warmup = 3;
  int steps = 10;
  int reps = 5;
  bool describe = false;  // print the shape, parameter count and latitudes as JSON for the Python peer
};

[[noreturn]] inline void bench_usage(const std::string& usage, const std::string& why) {
  std::fprintf(stderr, "%s\nusage: %s\n", why.c_str(), usage.c_str());
  std::exit(2);
}

// Parses the shared options; `extra(arg, value)` handles the benchmark's own (value() fetches the
// next argument) and returns false for an argument it does not know.
inline StepBenchArgs parse_step_bench_args(
    int argc, char** argv, const std::string& usage,
    const std::function<bool(const std::string&, const std::function<std::string()>&)>& extra = {}) {
  StepBenchArgs a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::function<std::string()> value = [&]() -> std::string {
      if (i + 1 >= argc) bench_usage(usage, arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--config") a.config = value();
    else if (arg == "--precision") a.precision = value();
    else if (arg == "--batch") a.batch = std::stoll(value());
    else if (arg == "--warmup") a.warmup = std::stoi(value());
    else if (arg == "--steps") a.steps = std::stoi(value());
    else if (arg == "--reps") a.reps = std::stoi(value());
    else if (arg == "--describe") a.describe = true;
    else if (!extra || !extra(arg, value)) bench_usage(usage, "unknown argument '" + arg + "'");
  }
  if (a.config.empty()) bench_usage(usage, "--config is required");
  if (a.batch < 1 || a.steps < 1 || a.reps < 1 || a.warmup < 0) bench_usage(usage, "batch, steps and reps must be positive");
  return a;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace wxtrain::bench
