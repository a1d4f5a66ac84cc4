#include "core/device.h"

#include <dlfcn.h>
#include <sched.h>
#include <link.h>

#include <cstdlib>
#include <fstream>

#include <torch/torch.h>

#include <ATen/detail/CUDAHooksInterface.h>

#include "core/cuda/cuda_backend.h"
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

// The shared library that provides the BLAS symbol LibTorch calls (sgemm_). In the torch wheel it
// is libtorch_cpu itself (MKL linked in); its BLAS symbols are interposable, so a second BLAS loaded
// first (Debian's OpenBLAS through some other library) would take LibTorch's GEMMs over.
std::string sgemm_library() {
  void* sym = dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info info{};
  if (sym && dladdr(sym, &info) && info.dli_fname) {
    char resolved[4096];
    if (realpath(info.dli_fname, resolved)) return resolved;
    return info.dli_fname;
  }
  return "";
}

// "MKL 2024.2" / "OpenBLAS" from LibTorch's own build description (torch.__config__.show()).
std::string torch_blas() {
  const std::string config = torch::show_config();
  const std::string mkl = "Math Kernel Library Version ";
  if (auto at = config.find(mkl); at != std::string::npos) {
    const auto end = config.find_first_of("- \n", at + mkl.size());
    return "MKL " + config.substr(at + mkl.size(), end - at - mkl.size());
  }
  const std::string key = "BLAS_INFO=";
  if (auto at = config.find(key); at != std::string::npos) {
    return config.substr(at + key.size(), config.find_first_of(",\n", at) - at - key.size());
  }
  return "unknown";
}

}  // namespace

std::string format_cuda_version(long version) {
  if (version <= 0) return "";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string format_cudnn_version(long version) {
  if (version <= 0) return "";
  return std::to_string(version / 10000) + "." + std::to_string(version % 10000 / 100) + "." +
         std::to_string(version % 100);
}

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
  return threads;
}

BuildInfo build_info() {
  BuildInfo b;
  b.wxtrain_version = "0.1.0";
  b.torch_version = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
                    std::to_string(TORCH_VERSION_PATCH);
  b.cuda_built = cuda::built();
  // LibTorch's CUDA hooks answer without a GPU; without libtorch_cuda they throw.
  const auto& hooks = at::detail::getCUDAHooks();
  try {
    b.cuda_version = format_cuda_version(hooks.versionCUDART());
    if (hooks.compiledWithCuDNN()) b.cudnn_version = format_cudnn_version(hooks.versionCuDNN());
  } catch (const c10::Error&) {
  }
  b.cuda_available = torch::cuda::is_available();
  b.blas = torch_blas();
  b.sgemm_library = sgemm_library();
  b.blas_interposed = !b.sgemm_library.empty() && b.sgemm_library.find("libtorch_cpu") == std::string::npos &&
                      b.blas.rfind("MKL", 0) == 0;
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
      MemoryMeter& m = memory_meter(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(i)));
      b.devices.push_back({"cuda:" + std::to_string(i) + ": " + cuda::properties(static_cast<c10::DeviceIndex>(i)).name, m.capacity()});
    }
  }
  return b;
}

}  // namespace wxtrain
