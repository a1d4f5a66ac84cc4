#pragma once
// What a CUDA process holds beyond the tensors the counting allocator sees, for LibTorch 2.11 on
// CUDA 12.x/13.x (and ROCm). No GPU is needed to apply it, and none was used to build it: each
// term comes from PyTorch's source, NVIDIA's documentation or a public measurement, cited in
// gpu_overhead.cpp and docs/estimator.md.
#include <optional>
#include <string>

#include "estimator/gpu_catalog.h"

namespace wxtrain::estimator {

struct GpuOverhead {
  double cuda_context = 0;        // driver context + lazily loaded kernels, per process
  double cublas_workspace = 0;    // cuBLAS workspaces, one per (handle, stream)
  double cublaslt_workspace = 0;  // cuBLASLt workspaces, when not shared with cuBLAS's
  double cudnn_workspace = 0;     // convolution engine workspace (conv models)
  double allocator_reserve = 0;   // caching allocator rounding and fragmentation above peak allocated
  double total() const {
    return cuda_context + cublas_workspace + cublaslt_workspace + cudnn_workspace + allocator_reserve;
  }
};

// The environment variables LibTorch reads that change these terms, parsed as LibTorch 2.11 does.
struct OverheadEnv {
  std::optional<std::string> cublas_workspace_config;  // CUBLAS_WORKSPACE_CONFIG, e.g. ":4096:8"
  std::optional<std::string> cublaslt_workspace_size;  // CUBLASLT_WORKSPACE_SIZE, KiB
  std::optional<std::string> cublaslt_unified;         // TORCH_CUBLASLT_UNIFIED_WORKSPACE
  std::optional<std::string> cuda_alloc_conf;          // PYTORCH_CUDA_ALLOC_CONF
  std::optional<std::string> alloc_conf;               // PYTORCH_ALLOC_CONF (read when the above is unset)
  bool expandable_segments() const;
  // This process's environment, read once: the run being estimated is assumed to inherit it.
  static const OverheadEnv& process();
};

// PyTorch 2.11's cuBLAS / cuBLASLt workspace per (handle, stream) for this GPU and environment.
double cublas_workspace_bytes(const GpuSpec& gpu, const OverheadEnv& env = {});
double cublaslt_workspace_bytes(const GpuSpec& gpu, const OverheadEnv& env = {});
// Driver context and the kernels a training step loads lazily, by architecture.
double cuda_context_bytes(const GpuSpec& gpu);

// `peak_allocated`: the peak tensor bytes of the run; `uses_convolutions`: the model runs cuDNN
// convolutions (unet, the vit's patch embedding); `gpu`: its compute capability (0: unknown, the
// largest figures) and whether it is ROCm.
GpuOverhead gpu_overhead(double peak_allocated, bool uses_convolutions, const GpuSpec& gpu,
                         const OverheadEnv& env = OverheadEnv::process());

}  // namespace wxtrain::estimator
