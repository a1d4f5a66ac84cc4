// The GPU overhead model (estimator/gpu_overhead.cpp) against the figures it cites: PyTorch
// 2.11's CublasHandlePool.cpp defaults, the per-architecture context, the cuDNN allowance and
// the caching allocator's reserve. Every case passes an explicit OverheadEnv, so a
// CUBLAS_WORKSPACE_CONFIG in the test's own environment changes nothing here.
#include <gtest/gtest.h>

#include "estimator/gpu_catalog.h"
#include "estimator/gpu_overhead.h"

using namespace wxtrain::estimator;

namespace {

constexpr double MiB = 1024.0 * 1024.0;
const OverheadEnv kDefaults{};  // nothing set: LibTorch's defaults
const LibraryUse kGemmsOnly{true, false};  // the GNN

GpuSpec gpu(const char* name) {
  const auto g = find_gpu(name);
  EXPECT_TRUE(g.has_value()) << name;
  return g ? *g : GpuSpec{name, name, 0};
}

}  // namespace

// CublasHandlePool.cpp, parseChosenWorkspaceSize: ":4096:2:16:8" (8.125 MiB) unless the GPU is
// sm_90, which gets ":4096:8" (32 MiB); a training step holds two (handle, stream) pairs.
TEST(GpuOverhead, HopperCublasWorkspaceIsLargerThanAmperesByTheDocumentedAmount) {
  const GpuOverhead a100 = gpu_overhead(10e9, kGemmsOnly, gpu("A100-80"), kDefaults);
  const GpuOverhead h100 = gpu_overhead(10e9, kGemmsOnly, gpu("H100"), kDefaults);
  EXPECT_DOUBLE_EQ(a100.cublas_workspace, 2 * 8.125 * MiB);
  EXPECT_DOUBLE_EQ(h100.cublas_workspace, 2 * 32 * MiB);
  EXPECT_DOUBLE_EQ(h100.cublas_workspace - a100.cublas_workspace, 47.75 * MiB);
  // cuBLASLt keeps its own 1 MiB per pair in 2.11 (TORCH_CUBLASLT_UNIFIED_WORKSPACE unset).
  EXPECT_DOUBLE_EQ(a100.cublaslt_workspace, 2 * MiB);
  EXPECT_DOUBLE_EQ(h100.cublaslt_workspace, 2 * MiB);

  for (const char* name : {"H100-PCIe", "H100-NVL", "GH200", "H200"})
    EXPECT_DOUBLE_EQ(cublas_workspace_bytes(gpu(name)), 32 * MiB) << name;
  for (const char* name : {"T4", "A10G", "L4", "RTX4090", "A100-40", "L40S", "RTX6000Ada"})
    EXPECT_DOUBLE_EQ(cublas_workspace_bytes(gpu(name)), 8.125 * MiB) << name;
  // Blackwell: 2.11.0 itself gives 8.125 MiB, main after it 32 MiB; the estimate takes 32.
  EXPECT_DOUBLE_EQ(cublas_workspace_bytes(gpu("B200")), 32 * MiB);
}

// Measured on an H100 (docs/benchmarks.md, "The first GPU check"): a step with no GEMM (the U-Net)
// creates no cuBLAS workspace and loads no cuBLAS kernels (context 639 vs 751-767 MiB), and cuDNN's
// workspace is no fixed cost (it gives way where memory is short): convolutions add nothing.
TEST(GpuOverhead, OnlyGemmsBringCublasAndConvolutionsAddNoFixedCost) {
  for (const GpuSpec& g : gpu_catalog()) {
    const GpuOverhead both = gpu_overhead(20e9, LibraryUse{true, true}, g, kDefaults);
    const GpuOverhead gemms = gpu_overhead(20e9, kGemmsOnly, g, kDefaults);
    const GpuOverhead convs = gpu_overhead(20e9, LibraryUse{false, true}, g, kDefaults);
    EXPECT_DOUBLE_EQ(both.total(), gemms.total()) << g.name;
    EXPECT_DOUBLE_EQ(convs.cublas_workspace + convs.cublaslt_workspace, 0) << g.name;
    if (!g.rocm) {
      EXPECT_DOUBLE_EQ(gemms.cuda_context - convs.cuda_context, 120 * MiB) << g.name;
    }
  }
  // The whole overhead of a 20 GB-peak run on an H100: 762 MiB context, 2 x 32 MiB cuBLAS,
  // 2 x 1 MiB cuBLASLt, 8% + 20 MiB allocator reserve: 2.32 GiB; a U-Net 642 MiB + the reserve.
  // On an A100: 564 + 16.25 + 2 MiB + the same reserve, 2.08 GiB.
  const double reserve = 0.08 * 20e9 + 20 * MiB;
  EXPECT_DOUBLE_EQ(gpu_overhead(20e9, kGemmsOnly, gpu("H100"), kDefaults).total(), (762 + 64 + 2) * MiB + reserve);
  EXPECT_DOUBLE_EQ(gpu_overhead(20e9, LibraryUse{false, true}, gpu("H100"), kDefaults).total(), 642 * MiB + reserve);
  EXPECT_DOUBLE_EQ(gpu_overhead(20e9, kGemmsOnly, gpu("A100-80"), kDefaults).total(), (564 + 16.25 + 2) * MiB + reserve);
  // The zoo by name; an unknown model gets both libraries.
  EXPECT_FALSE(library_use("unet").gemms);
  EXPECT_FALSE(library_use("gnn").convolutions);
  EXPECT_TRUE(library_use("vit").gemms && library_use("vit").convolutions);
  EXPECT_TRUE(library_use("some_new_model").gemms && library_use("some_new_model").convolutions);
}

// Bare contexts measured 414 MiB (A100), 426 MiB (RTX 6000 Ada), 612 MiB (B200), plus 150 MiB of
// lazily loaded kernels; training processes measured 410-500 MiB of non-PyTorch memory on A100s.
TEST(GpuOverhead, ContextFollowsTheArchitectureAndStaysAboveTheMeasurements) {
  EXPECT_DOUBLE_EQ(cuda_context_bytes(gpu("A100-80")), 564 * MiB);
  EXPECT_DOUBLE_EQ(cuda_context_bytes(gpu("T4")), 564 * MiB);
  EXPECT_DOUBLE_EQ(cuda_context_bytes(gpu("L40S")), 576 * MiB);
  EXPECT_DOUBLE_EQ(cuda_context_bytes(gpu("H100")), 762 * MiB);
  EXPECT_DOUBLE_EQ(cuda_context_bytes(gpu("B200")), 762 * MiB);
  EXPECT_GE(cuda_context_bytes(gpu("A100-40")) - 500 * MiB, 64 * MiB);  // the largest A100 measurement
  EXPECT_GE(cuda_context_bytes(gpu("L40S")) - 491 * MiB, 85 * MiB);     // L40S, same
}

TEST(GpuOverhead, AGpuOfUnknownArchitectureGetsTheLargestCudaFigures) {
  const GpuSpec custom{"custom", "custom 80GiB", int64_t{80} << 30};  // --memory, or autotune's device
  const double unknown = gpu_overhead(30e9, LibraryUse{}, custom, kDefaults).total();
  for (const GpuSpec& g : gpu_catalog()) {
    if (g.rocm) continue;
    EXPECT_GE(unknown, gpu_overhead(30e9, LibraryUse{}, g, kDefaults).total()) << g.name;
  }
}

TEST(GpuOverhead, EnvironmentChangesWhatLibTorchChanges) {
  const GpuSpec a100 = gpu("A100-80"), h100 = gpu("H100");
  OverheadEnv e;
  e.cublas_workspace_config = ":4096:8";
  EXPECT_DOUBLE_EQ(cublas_workspace_bytes(a100, e), 32 * MiB);
  e.cublas_workspace_config = ":16:8";  // the setting deterministic cuBLAS asks for
  EXPECT_DOUBLE_EQ(cublas_workspace_bytes(a100, e), 128 * 1024.0);
  EXPECT_DOUBLE_EQ(cublaslt_workspace_bytes(a100, e), 128 * 1024.0);  // capped at cuBLAS's
  e.cublas_workspace_config = ":4096:2:16:8";
  EXPECT_DOUBLE_EQ(cublas_workspace_bytes(h100, e), 8.125 * MiB);
  e.cublas_workspace_config = "4096";  // no ":SIZE:COUNT": LibTorch warns and keeps the default
  EXPECT_DOUBLE_EQ(cublas_workspace_bytes(h100, e), 32 * MiB);

  OverheadEnv lt;
  lt.cublaslt_workspace_size = "4096";
  EXPECT_DOUBLE_EQ(cublaslt_workspace_bytes(a100, lt), 4 * MiB);
  lt.cublaslt_workspace_size = "65536";
  EXPECT_DOUBLE_EQ(cublaslt_workspace_bytes(a100, lt), 8.125 * MiB);  // capped at cuBLAS's
  lt.cublaslt_unified = "0";
  EXPECT_DOUBLE_EQ(cublaslt_workspace_bytes(a100, lt), 64 * MiB);  // no cap when unification is off
  lt.cublaslt_unified = "1";
  EXPECT_DOUBLE_EQ(cublaslt_workspace_bytes(a100, lt), 0);  // shares the cuBLAS workspace
}

TEST(GpuOverhead, ExpandableSegmentsShrinkTheAllocatorReserve) {
  OverheadEnv e;
  EXPECT_FALSE(e.expandable_segments());
  e.alloc_conf = "expandable_segments:True";
  EXPECT_TRUE(e.expandable_segments());
  e.cuda_alloc_conf = "max_split_size_mb:128";  // read first: PYTORCH_ALLOC_CONF is then ignored
  EXPECT_FALSE(e.expandable_segments());
  e.cuda_alloc_conf = "max_split_size_mb:128, expandable_segments : True";
  EXPECT_TRUE(e.expandable_segments());
  e.cuda_alloc_conf = "expandable_segments:False";
  EXPECT_FALSE(e.expandable_segments());

  OverheadEnv on;
  on.cuda_alloc_conf = "expandable_segments:True";
  const double peak = 60e9;
  const GpuOverhead plain = gpu_overhead(peak, kGemmsOnly, gpu("H100"), kDefaults);
  const GpuOverhead expandable = gpu_overhead(peak, kGemmsOnly, gpu("H100"), on);
  EXPECT_DOUBLE_EQ(plain.allocator_reserve, 0.08 * peak + 20 * MiB);
  EXPECT_DOUBLE_EQ(expandable.allocator_reserve, 0.02 * peak + 20 * MiB);
  EXPECT_DOUBLE_EQ(plain.total() - expandable.total(), 0.06 * peak);
}

// ROCm: hipBLAS 32 MiB, 128 MiB on gfx94x (MI300X), and hipBLASLt's separate 76 MiB, per pair.
TEST(GpuOverhead, RocmBoardsUseTheHipblasDefaults) {
  const GpuOverhead mi300x = gpu_overhead(10e9, kGemmsOnly, gpu("MI300X"), kDefaults);
  const GpuOverhead mi250x = gpu_overhead(10e9, kGemmsOnly, gpu("MI250X"), kDefaults);
  EXPECT_DOUBLE_EQ(mi300x.cublas_workspace, 2 * 128 * MiB);
  EXPECT_DOUBLE_EQ(mi300x.cublaslt_workspace, 2 * 76 * MiB);
  EXPECT_DOUBLE_EQ(mi250x.cublas_workspace, 2 * 32 * MiB);
  EXPECT_DOUBLE_EQ(mi250x.cublaslt_workspace, 2 * 76 * MiB);
  EXPECT_DOUBLE_EQ(mi300x.cuda_context, 1024 * MiB);
}
