#include "estimator/gpu_overhead.h"

#include <cmath>

namespace wxtrain::estimator {

namespace {
constexpr double MiB = 1024.0 * 1024.0;
}

GpuOverhead gpu_overhead(double peak_allocated, bool uses_convolutions, bool rocm) {
  GpuOverhead o;
  // CUDA context: PyTorch's "CUDA semantics" notes say the context alone takes several hundred MB.
  // With lazy module loading (CUDA_MODULE_LOADING=LAZY, PyTorch's default for CUDA >= 11.7) the
  // commonly measured figure for torch + cuBLAS/cuDNN kernels is 300-500 MiB: we take 500 MiB
  // so the estimate errs on the safe side. ROCm's HIP runtime is similar in size.
  o.cuda_context = (rocm ? 512.0 : 500.0) * MiB;
  // cuBLAS: PyTorch 1.13 sizes each handle's workspace as ":4096:2:16:8" (4096 KiB x 2 + 16 KiB x 8)
  // = 8.125 MiB unless CUBLAS_WORKSPACE_CONFIG says otherwise; forward and backward each use a
  // handle on the default stream of their thread -> two workspaces.
  o.cublas_workspace = 2 * 8.125 * MiB;
  // cuDNN: with torch.backends.cudnn.benchmark off (our default) heuristics prefer algorithms
  // with small workspaces; PyTorch caps trials at the free memory. 128 MiB covers the common
  // 3x3 convolution algorithms (IMPLICIT_PRECOMP_GEMM / WINOGRAD_NONFUSED) at these sizes.
  o.cudnn_workspace = uses_convolutions ? 128.0 * MiB : 0.0;
  // Caching allocator (c10/cuda/CUDACachingAllocator.cpp): sizes round up to 512 B; requests
  // under 1 MiB share 2 MiB segments, larger ones get 20 MiB segments or their size rounded to
  // 2 MiB; freed blocks are cached, not returned, so reserved exceeds the allocated peak by the
  // fragmentation of the block pool — typically 5-10% for training loops of fixed shapes.
  o.allocator_reserve = 0.08 * peak_allocated + 20.0 * MiB;
  return o;
}

}  // namespace wxtrain::estimator
