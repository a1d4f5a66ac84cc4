#include "estimator/error_band.h"

#include <algorithm>
#include <vector>

namespace wxtrain::estimator {

namespace {

// Replayed by tests/estimator/test_gpu_replay.cpp from bench/results/gpu_check_h100_2026-11-24/
// (H100 80GB HBM3, torch 2.11.0+cu130; storm configs, fp32 and bf16-mixed, checkpointing off and on,
// batch 1, 8 and 64, and the largest batch under a T4's and an A100-40's memory in bf16-mixed).
// `under` is rounded up to the next half percent, so that the batch the estimate is sure of stays
// at or below the one that trained. Change them only with a new GPU check, and the test with them.
const std::vector<ErrorBand>& measured_bands() {
  static const std::vector<ErrorBand> bands = {
      {"convolutions only (cuDNN)", 0.12, 0.03, true, "the storm U-Net on an H100, 2026-11-24"},
      {"GEMMs only (cuBLAS)", 0.045, 0.025, true, "the storm GNN on an H100, 2026-11-24"},
      {"GEMMs and convolutions (cuBLAS, cuDNN)", 0.06, 0.015, true, "the storm ViT on an H100, 2026-11-24"},
  };
  return bands;
}

}  // namespace

ErrorBand error_band(const LibraryUse& use) {
  const auto& bands = measured_bands();
  if (use.convolutions && !use.gemms) return bands[0];
  if (use.gemms && !use.convolutions) return bands[1];
  if (use.gemms && use.convolutions) return bands[2];
  // A step on neither library has not been measured: the widest band of those that were.
  ErrorBand widest = *std::max_element(bands.begin(), bands.end(),
                                       [](const ErrorBand& a, const ErrorBand& b) { return a.under < b.under; });
  widest.family = "neither GEMMs nor convolutions";
  widest.measured = false;
  widest.basis = "not measured on a GPU: the widest measured band (" + widest.basis + ")";
  return widest;
}

}  // namespace wxtrain::estimator
