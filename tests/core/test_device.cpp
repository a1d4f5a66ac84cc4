// Device resolution and the CPU thread setup wxtrain does at start-up.
#include <gtest/gtest.h>

#include <sched.h>

#include <cstdlib>
#include <string>

#include <ATen/Parallel.h>

#include "core/device.h"
#include "core/error.h"

namespace wxtrain {
namespace {

// Two ranks on this node: each gets half the cores (LibTorch's intra-op pool, which also sizes MKL's).
TEST(CpuThreads, RanksSplitTheCores) {
  if (std::getenv("OMP_NUM_THREADS")) GTEST_SKIP() << "OMP_NUM_THREADS set: the user's choice wins";
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

  EXPECT_EQ(configure_cpu_threads(), cpus);  // one rank: every core
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

TEST(BuildInfo, VersionsReadAsPeopleWriteThem) {
  EXPECT_EQ(format_cuda_version(13000), "13.0");
  EXPECT_EQ(format_cuda_version(12080), "12.8");
  EXPECT_EQ(format_cuda_version(0), "");
  EXPECT_EQ(format_cudnn_version(91900), "9.19.0");
  EXPECT_EQ(format_cudnn_version(90100), "9.1.0");
  EXPECT_EQ(format_cudnn_version(0), "");
}

// This build, as `wxtrain info` reports it: LibTorch 2.x; a CUDA build knows its CUDA version on a
// machine without a GPU; LibTorch's GEMMs reach its own BLAS, not one loaded beside it.
TEST(BuildInfo, DescribesTheLibTorchItRunsOn) {
  const BuildInfo b = build_info();
  EXPECT_EQ(b.torch_version.rfind("2.", 0), 0u) << b.torch_version;
  if (b.cuda_built) {
    EXPECT_FALSE(b.cuda_version.empty());
  } else {
    EXPECT_TRUE(b.cuda_version.empty()) << b.cuda_version;
  }
  if (b.blas.rfind("MKL", 0) == 0) {
    EXPECT_NE(b.sgemm_library.find("libtorch_cpu"), std::string::npos) << b.sgemm_library;
    EXPECT_FALSE(b.blas_interposed);
  }
  ASSERT_FALSE(b.devices.empty());
  EXPECT_EQ(b.devices.front().name.rfind("cpu", 0), 0u);
  EXPECT_EQ(b.cuda_available, b.devices.size() > 1);
}

TEST(ResolveDevice, NamesTheValueAndWhatIsExpected) {
  EXPECT_TRUE(resolve_device("cpu", 0).is_cpu());
  const std::string bad = config_error("tpu");
  EXPECT_NE(bad.find("'tpu'"), std::string::npos) << bad;
  EXPECT_NE(bad.find("expected auto, cpu, cuda or cuda:N"), std::string::npos) << bad;
  if (!build_info().cuda_available) {  // CI: a CUDA build on a machine without a GPU is a CPU program
    const std::string cuda = config_error("cuda:1");
    EXPECT_NE(cuda.find("no CUDA device is usable"), std::string::npos) << cuda;
    EXPECT_TRUE(resolve_device("auto", 0).is_cpu());
  }
}

}  // namespace
}  // namespace wxtrain
