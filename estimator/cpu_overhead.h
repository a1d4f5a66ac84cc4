#pragma once
// What a CPU training process holds beyond the tensors the counting allocator sees
// (core/memory_meter.h), the CPU's counterpart of gpu_overhead.h. Measured with an independent
// meter, the peak resident set (bench/run_cpu_memory_check.sh, docs/benchmarks.md), with glibc
// returning freed memory:
//  - a fixed part, the same for every batch: the pages of LibTorch, MKL and oneDNN the step touched
//    (code, data, JIT kernels), thread stacks, OpenMP's pools: ~500 MiB with the wheel's LibTorch
//    2.11 here, nearly the same for the three zoo models. It is measured, not assumed: the resident
//    set of the estimating process after the trace ran the same kernels, less the allocator's bytes.
//  - a per-sample part, allocations outside c10's allocator that grow with the batch (oneDNN's own
//    buffers): within the meter's noise (about 0.3 MiB per sample) of zero for five of the six
//    (model, precision) pairs measured, +6% of the counted growth for the gnn at bf16-mixed (a step
//    between batch 32 and 48). Modelled as a share of the counted per-sample growth,
//    kUnseenPerSampleShare, fitted on those six pairs.
// glibc's defaults keep freed heap blocks, which adds far more (+41% per sample for the U-Net at
// fp32): that is the heap's history, not what the step needs, and is not modelled (docs/estimator.md).
#include <cstdint>

namespace wxtrain::estimator {

// Share of the counted per-sample growth that allocations outside the counting allocator add: 3%,
// fitted on the zoo at fp32 and bf16-mixed, batch 16 to 48 (measured -1% to +6%).
inline constexpr double kUnseenPerSampleShare = 0.03;

struct CpuOverhead {
  double process = 0;     // fixed: resident bytes outside the counting allocator (libraries, threads)
  double per_sample = 0;  // bytes each sample adds outside the counting allocator
  double at(double batch) const { return process + per_sample * batch; }
};

// `process_resident`: resident bytes outside the counting allocator, as
// process_resident_outside_allocator() measured them; `counted_per_sample`: the bytes each sample
// adds to the counting allocator's peak (the estimate's activation slope).
CpuOverhead cpu_overhead(double process_resident, double counted_per_sample);

// This process's resident set (/proc/self/statm) less the counting allocator's reserved bytes:
// what the kernels, libraries and threads hold outside it. Call it after a real step has run, so
// the libraries' pages and JIT kernels the step needs are in. 0 where /proc cannot be read.
double process_resident_outside_allocator();

}  // namespace wxtrain::estimator
