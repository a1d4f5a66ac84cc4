#pragma once
// What a CUDA process holds beyond the tensors the counting allocator sees, for LibTorch 2.11 on
// CUDA 12.x/13.x (and ROCm). No GPU is needed to apply it. Each term comes from PyTorch's source,
// NVIDIA's documentation or a public measurement, cited in gpu_overhead.cpp and docs/estimator.md,
// and the H100 measurements of scripts/gpu_check.sh (docs/benchmarks.md) corrected two of them.
#include <optional>
#include <string>

#include "estimator/gpu_catalog.h"
#include "models/registry.h"

namespace wxtrain::estimator {

struct GpuOverhead {
  double cuda_context = 0;        // driver context + lazily loaded kernels, per process
  double cublas_workspace = 0;    // cuBLAS workspaces, one per (handle, stream)
  double cublaslt_workspace = 0;  // cuBLASLt workspaces, when not shared with cuBLAS's
  double allocator_reserve = 0;   // caching allocator rounding and fragmentation above peak allocated
  double total() const {
    return cuda_context + cublas_workspace + cublaslt_workspace + allocator_reserve;
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

// The GPU libraries a model's step calls. cuBLAS creates its handles, workspaces and kernels only
// when the step runs a GEMM (Linear, matmul): a convolution-only U-Net has none of them (measured
// on an H100: docs/benchmarks.md, "The first GPU check").
// Which of cuBLAS and cuDNN a model's step calls: its registry entry says (models/registry.h).
using LibraryUse = models::GpuLibraries;
// The registered model's; an unknown name gets both, the larger overhead.
LibraryUse library_use(const std::string& model_name);

// Driver context and the kernels a training step loads lazily, by architecture; without GEMMs,
// less cuBLAS's kernels.
double cuda_context_bytes(const GpuSpec& gpu, bool gemms = true);

// `peak_allocated`: the peak tensor bytes of the run; `use`: the libraries its step calls; `gpu`:
// its compute capability (0: unknown, the largest figures) and whether it is ROCm.
GpuOverhead gpu_overhead(double peak_allocated, const LibraryUse& use, const GpuSpec& gpu,
                         const OverheadEnv& env = OverheadEnv::process());

}  // namespace wxtrain::estimator
