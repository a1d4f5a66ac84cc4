// Device resolution and the CPU thread setup wxtrain does at start-up.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <sched.h>

#include <cstdlib>
#include <string>

#include <ATen/Parallel.h>

#include "core/device.h"
#include "core/error.h"

namespace wxtrain {
namespace {

// Two ranks on this node: each gets half the cores, in LibTorch *and* in OpenBLAS's own pool (which
// would otherwise run every fp32 GEMM of both ranks on all cores).
TEST(CpuThreads, RanksSplitTheCoresInLibTorchAndOpenBlas) {
  if (std::getenv("OMP_NUM_THREADS") || std::getenv("OPENBLAS_NUM_THREADS"))
    GTEST_SKIP() << "OMP_NUM_THREADS / OPENBLAS_NUM_THREADS set: the user's choice wins";
  using GetThreads = int (*)();
  auto openblas_threads = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int cpus = CPU_COUNT(&set);
  const int before = at::get_num_threads();

  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  const int threads = configure_cpu_threads();
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_EQ(threads, std::max(1, cpus / 2));
  EXPECT_EQ(at::get_num_threads(), threads);
  if (openblas_threads) {
    EXPECT_EQ(openblas_threads(), threads);
  }

  EXPECT_EQ(configure_cpu_threads(), cpus);  // one rank: every core
  if (openblas_threads) {
    EXPECT_EQ(openblas_threads(), cpus);
  }
  at::set_num_threads(before);
}

std::string config_error(const std::string& spec) {
  try {
    resolve_device(spec, 0);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(BuildInfo, OpenBlasKernelsWithoutAvx512OnAnAvx512CpuAreFlagged) {
  EXPECT_TRUE(openblas_kernels_lag_cpu("Haswell", true));  // Debian's 0.3.21 on Zen 4
  EXPECT_TRUE(openblas_kernels_lag_cpu("Zen", true));
  EXPECT_FALSE(openblas_kernels_lag_cpu("SkylakeX", true));
  EXPECT_FALSE(openblas_kernels_lag_cpu("Cooperlake", true));
  EXPECT_FALSE(openblas_kernels_lag_cpu("Haswell", false));  // an AVX2 CPU gets what it can run
  EXPECT_FALSE(openblas_kernels_lag_cpu("", true));          // not OpenBLAS
  // This machine, as `wxtrain info` reports it: OpenBLAS's name for its kernels is never empty.
  const BuildInfo b = build_info();
  if (b.blas.find("openblas") != std::string::npos) EXPECT_FALSE(b.blas_core.empty());
}

TEST(ResolveDevice, NamesTheValueAndWhatIsExpected) {
  EXPECT_TRUE(resolve_device("cpu", 0).is_cpu());
  const std::string bad = config_error("tpu");
  EXPECT_NE(bad.find("'tpu'"), std::string::npos) << bad;
  EXPECT_NE(bad.find("expected auto, cpu, cuda or cuda:N"), std::string::npos) << bad;
#ifndef WXTRAIN_WITH_CUDA
  const std::string cuda = config_error("cuda:1");
  EXPECT_NE(cuda.find("no CUDA device is usable"), std::string::npos) << cuda;
  EXPECT_TRUE(resolve_device("auto", 0).is_cpu());
#endif
}

}  // namespace
}  // namespace wxtrain
