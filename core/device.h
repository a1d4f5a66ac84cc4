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
  std::string torch_version;  // the LibTorch wxtrain was compiled against
  bool cuda_built = false;    // a build against a CUDA LibTorch (WXTRAIN_CUDA)
  std::string cuda_version;   // the CUDA runtime LibTorch was built with ("13.0"); empty without CUDA
  std::string cudnn_version;  // cuDNN LibTorch was built with ("9.19.0"); empty without
  bool cuda_available = false;
  std::string blas;           // the BLAS behind LibTorch's fp32 GEMMs ("MKL 2024.2", from its build config)
  std::string sgemm_library;  // the shared library the process's sgemm_ resolves to
  bool blas_interposed = false;  // sgemm_ comes from a library other than LibTorch's (a second BLAS loaded)
  bool mkldnn = false;        // oneDNN (bf16 kernels on CPU)
  int threads = 0;            // intra-op threads
  std::vector<DeviceInfo> devices;
};

BuildInfo build_info();

// "13.0" from CUDART_VERSION-style 13000; "9.19.0" from cuDNN's 91900 (major*10000 + minor*100 +
// patch since cuDNN 9); an empty string for 0 (no CUDA / no cuDNN).
std::string format_cuda_version(long version);
std::string format_cudnn_version(long version);

// Sets LibTorch's intra-op threads (which size MKL's pool too) to the cores this process may use
// divided among the ranks on this node (OMPI_COMM_WORLD_LOCAL_SIZE / SLURM_NTASKS_PER_NODE), unless
// OMP_NUM_THREADS says otherwise. LibTorch's own default can be far lower (one thread on the 2-core
// development machine, where two threads train the storm U-Net 1.6x faster). Returns the thread
// count in use.
int configure_cpu_threads();

}  // namespace wxtrain
