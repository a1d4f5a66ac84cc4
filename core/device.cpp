#include "core/device.h"

#include <dlfcn.h>
#include <sched.h>
#include <link.h>

#include <cstdlib>
#include <fstream>

#include <torch/torch.h>

#include "core/error.h"
#include "core/memory_meter.h"

namespace wxtrain {

c10::Device resolve_device(const std::string& spec, int local_rank) {
  if (spec == "cpu") return c10::Device(c10::DeviceType::CPU);
  const bool cuda_ok = torch::cuda::is_available();
  if (spec == "auto") return cuda_ok ? c10::Device(c10::DeviceType::CUDA, local_rank) : c10::Device(c10::DeviceType::CPU);
  if (spec.rfind("cuda", 0) == 0) {
    if (!cuda_ok)
      throw ConfigError("train.device = '" + spec +
                        "' but no CUDA device is usable: this LibTorch is a CPU build or no GPU is "
                        "visible (use device = \"cpu\", or a CUDA LibTorch with -DWXTRAIN_CUDA=ON)");
    try {
      c10::Device d(spec);
      return d.has_index() ? d : c10::Device(c10::DeviceType::CUDA, local_rank);
    } catch (const c10::Error&) {
      throw ConfigError("train.device = '" + spec + "' is not a device: expected cuda or cuda:N");
    }
  }
  throw ConfigError("train.device = '" + spec + "': expected auto, cpu, cuda or cuda:N");
}

namespace {

// The shared library that provides the BLAS symbol LibTorch calls (sgemm_).
std::string blas_library() {
  void* sym = dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info info{};
  if (sym && dladdr(sym, &info) && info.dli_fname) {
    char resolved[4096];
    if (realpath(info.dli_fname, resolved)) return resolved;
    return info.dli_fname;
  }
  return "unknown";
}

// The kernel set OpenBLAS chose for this CPU. OpenBLAS 0.3.21 (Debian 12) predates Zen 4 and picks
// its AVX2 "Haswell" kernels on an AVX-512 AMD EPYC; `wxtrain info` shows it.
std::string openblas_core() {
  using CoreName = char* (*)();
  if (auto name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"))) return name();
  return "";
}

// OpenBLAS (Debian's libopenblas0-pthread, behind LibTorch's fp32 GEMMs) runs its own thread pool,
// sized to every core unless OPENBLAS_NUM_THREADS or OMP_NUM_THREADS says otherwise, and
// at::set_num_threads does not reach it: two ranks on two cores would each run their GEMMs on both.
void set_blas_threads(int threads) {
  if (std::getenv("OPENBLAS_NUM_THREADS")) return;
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

}  // namespace

int configure_cpu_threads() {
  if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp && *omp) return at::get_num_threads();
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  int ranks_here = 1;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* v = std::getenv(name); v && std::atoi(v) > 0) {
      ranks_here = std::atoi(v);
      break;
    }
  }
  const int threads = std::max(1, cpus / ranks_here);
  at::set_num_threads(threads);
  set_blas_threads(threads);
  return threads;
}

bool openblas_kernels_lag_cpu(const std::string& core, bool cpu_has_avx512) {
  // OpenBLAS's AVX-512 kernel sets (0.3.21 names); every other one leaves AVX-512 unused.
  static const char* const kAvx512Cores[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
  if (!cpu_has_avx512 || core.empty()) return false;
  for (const char* avx512 : kAvx512Cores) {
    if (core == avx512) return false;
  }
  return true;
}

BuildInfo build_info() {
  BuildInfo b;
  b.wxtrain_version = "0.1.0";
  b.torch_version = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
                    std::to_string(TORCH_VERSION_PATCH);
#ifdef WXTRAIN_WITH_CUDA
  b.cuda_built = true;
#endif
  b.cuda_available = torch::cuda::is_available();
  b.blas = blas_library();
  b.blas_core = openblas_core();
#if defined(__x86_64__)
  b.blas_lags_cpu = openblas_kernels_lag_cpu(
      b.blas_core, __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"));
#endif
  b.mkldnn = at::hasMKLDNN();
  b.threads = at::get_num_threads();
  MemoryMeter& cpu = memory_meter(c10::Device(c10::DeviceType::CPU));
  std::string cpu_name = "cpu";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      cpu_name = "cpu: " + line.substr(line.find(':') + 2);
      break;
    }
  }
  b.devices.push_back({cpu_name, cpu.capacity()});
  if (b.cuda_available) {
    for (int i = 0; i < static_cast<int>(torch::cuda::device_count()); ++i) {
      MemoryMeter& m = memory_meter(c10::Device(c10::DeviceType::CUDA, i));
      b.devices.push_back({"cuda:" + std::to_string(i), m.capacity()});
    }
  }
  return b;
}

}  // namespace wxtrain
