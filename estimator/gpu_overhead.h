#pragma once
// What a CUDA process holds beyond the tensors the counting allocator sees. No GPU is needed to
// apply it, and none was used to build it: each term comes from PyTorch's and NVIDIA's own
// documentation and source, cited in gpu_overhead.cpp and docs/estimator.md.
#include <cstdint>

namespace wxtrain::estimator {

struct GpuOverhead {
  double cuda_context = 0;     // driver context, kernel images (lazy loading), per process
  double cublas_workspace = 0; // cuBLAS workspaces (one per handle/stream)
  double cudnn_workspace = 0;  // convolution algorithm workspace (conv models)
  double allocator_reserve = 0;  // caching allocator rounding and fragmentation above peak allocated
  double total() const { return cuda_context + cublas_workspace + cudnn_workspace + allocator_reserve; }
};

// `peak_allocated`: the peak tensor bytes of the run; `uses_convolutions`: the model runs cuDNN
// convolutions (unet, the vit's patch embedding); `rocm`: AMD (HIP context instead of CUDA).
GpuOverhead gpu_overhead(double peak_allocated, bool uses_convolutions, bool rocm = false);

}  // namespace wxtrain::estimator
