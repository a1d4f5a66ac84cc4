// Estimator accuracy: for every zoo model (the storm configs), fp32 and bf16-mixed, checkpointing
// off and on, the peak predicted by `wxtrain estimate` (trace at batch 1 and 2, extrapolated)
// against the peak the counting allocator measures on a real training step at each batch.
// Usage: bench_estimate_accuracy [config ...]   (default: configs/storm_{unet,vit,gnn}.toml)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/config.h"
#include "core/memory_meter.h"
#include "estimator/estimate.h"

using namespace wxtrain;

int main(int argc, char** argv) {
  memory_meter(torch::Device(torch::kCPU));
  std::vector<std::string> configs;
  for (int i = 1; i < argc; ++i) configs.push_back(argv[i]);
  if (configs.empty())
    configs = {WXTRAIN_SOURCE_DIR "/configs/storm_unet.toml", WXTRAIN_SOURCE_DIR "/configs/storm_vit.toml",
               WXTRAIN_SOURCE_DIR "/configs/storm_gnn.toml"};
  const std::vector<int64_t> batches = {1, 2, 4, 8, 16, 32};
  std::vector<double> errors;
  double worst = 0, worst_under = 0;
  std::printf("| model | precision | checkpointing | batch | predicted MiB | measured MiB | error |\n");
  std::printf("|---|---|---|---:|---:|---:|---:|\n");
  for (const auto& path : configs) {
    for (const char* precision : {"fp32", "bf16-mixed"}) {
      for (bool ckpt : {false, true}) {
        RunConfig config = load_config(path, {std::string("train.precision=") + precision,
                                              std::string("train.checkpointing=") + (ckpt ? "true" : "false")});
        config.data.lat = 33;  // the storm grid; avoids opening the files in the loop
        config.data.lon = 36;
        const auto shape = models::model_shape(config);
        estimator::Estimate e = estimator::estimate(config, shape, {});
        for (int64_t b : batches) {
          const double predicted = e.breakdown(b, std::nullopt).total();
          const double measured =
              static_cast<double>(estimator::measure_step(config, shape, b, estimator::Mode::kTrain).peak());
          const double err = (predicted - measured) / measured;
          errors.push_back(std::abs(err));
          worst = std::max(worst, std::abs(err));
          worst_under = std::min(worst_under, err);
          std::printf("| %s | %s | %s | %ld | %.2f | %.2f | %+.2f%% |\n", config.model.name.c_str(), precision,
                      ckpt ? "on" : "off", static_cast<long>(b), predicted / (1 << 20), measured / (1 << 20), 100 * err);
          std::fflush(stdout);
        }
      }
    }
  }
  std::sort(errors.begin(), errors.end());
  std::printf("\ncases %zu, median |error| %.2f%%, worst |error| %.2f%%, worst under-estimate %.2f%%\n", errors.size(),
              100 * errors[errors.size() / 2], 100 * worst, 100 * worst_under);
  return 0;
}
