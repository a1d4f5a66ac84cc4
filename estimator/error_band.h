#pragma once
// How far a GPU has been measured from the estimate, and so the largest batch the estimate is sure
// of. The central estimate is the step's tensors traced on the CPU plus the documented GPU overhead
// model; what a GPU does beyond that (cuDNN's engines take workspace by heuristics that depend on
// the shapes and on the memory free, the caching allocator fragments) is measured, not derived, so
// it becomes a band beside the central figure rather than a term inside it.
//
// The bands are the kept measurements' (bench/results/gpu_check_h100_2026-11-24/: the per-rank
// totals of 36 cases and the largest batch on 6 capped GPUs) replayed against today's estimate;
// tests/estimator/test_gpu_replay.cpp recomputes them and fails when a band no longer covers what
// was measured, or covers much more. A family is the GPU libraries its step runs on (the registry's
// gpu_libraries), because that is what decides which of these effects it meets: convolutions
// only (cuDNN), GEMMs only (cuBLAS), or both.
#include <string>

#include "estimator/gpu_overhead.h"

namespace wxtrain::estimator {

struct ErrorBand {
  std::string family;  // "convolutions only (cuDNN)", ...
  // The measured need was up to `under` above the estimate (a fraction of the estimate) and down to
  // `over` below it, over the cases measured.
  double under = 0;
  double over = 0;
  bool measured = false;  // false: no GPU measurement of this family; the widest measured band is taken
  std::string basis;      // what was measured, for the report
};

// The band of the family whose step calls `use` (Estimate::sure_max_batch applies it).
ErrorBand error_band(const LibraryUse& use);

}  // namespace wxtrain::estimator
