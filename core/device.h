#pragma once
// Which device a run uses, and what this build of wxtrain can do (for `wxtrain info`).
#include <string>
#include <vector>

#include <c10/core/Device.h>

namespace wxtrain {

// "auto" -> cuda:<local_rank> when CUDA is usable, else cpu. "cuda" without a CUDA build is a
// ConfigError that says how to get one.
c10::Device resolve_device(const std::string& spec, int local_rank = 0);

struct DeviceInfo {
  std::string name;
  int64_t memory_bytes = 0;
};

struct BuildInfo {
  std::string wxtrain_version;
  std::string torch_version;
  bool cuda_built = false;    // WXTRAIN_CUDA
  bool cuda_available = false;
  std::string blas;           // the BLAS library LibTorch's matmul resolves to
  std::string blas_core;      // OpenBLAS's kernel set for this CPU ("Haswell", "SkylakeX", ...); empty if not OpenBLAS
  bool blas_lags_cpu = false; // OpenBLAS's kernels predate this CPU's AVX-512 (see openblas_kernels_lag_cpu)
  bool mkldnn = false;        // oneDNN (bf16 kernels on CPU)
  int threads = 0;            // intra-op threads
  std::vector<DeviceInfo> devices;
};

BuildInfo build_info();

// True when OpenBLAS picked kernels without AVX-512 (`core`, as openblas_get_corename names them)
// on a CPU that has it: Debian's OpenBLAS 0.3.21 runs "Haswell" on AMD Zen 4, at half the fp32
// GEMM rate. The zoo's fp32 GEMMs go to oneDNN regardless (models/cpu_gemm.h); other fp32 BLAS
// calls through ATen do not, and OPENBLAS_CORETYPE=SkylakeX (set before the process starts) fixes them.
bool openblas_kernels_lag_cpu(const std::string& core, bool cpu_has_avx512);

// Sets LibTorch's intra-op threads, and OpenBLAS's own pool, to the cores this process may use
// divided among the ranks on this node (OMPI_COMM_WORLD_LOCAL_SIZE / SLURM_NTASKS_PER_NODE), unless
// OMP_NUM_THREADS (or, for OpenBLAS, OPENBLAS_NUM_THREADS) says otherwise. LibTorch's own default can be far lower (one thread on the 2-core development
// machine, where two threads train the storm U-Net 1.6x faster). Returns the thread count in use.
int configure_cpu_threads();

}  // namespace wxtrain
