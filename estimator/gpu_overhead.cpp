#include "estimator/gpu_overhead.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <string>

namespace wxtrain::estimator {

namespace {
constexpr double KiB = 1024.0;
constexpr double MiB = 1024.0 * 1024.0;

// ATen's cuBLAS handles come from a pool with one handle per (thread, device), and each
// (handle, stream) pair gets its own workspace (CublasHandlePool.cpp, setWorkspaceForHandle).
// A training step uses two: the forward on the caller's thread, and autograd's device thread,
// which runs backward on the forward's stream (CUDA semantics notes, "Stream semantics of
// backward passes"). wxtrain's NCCL streams run no GEMMs.
constexpr double kBlasHandles = 2;

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

// CUBLAS_WORKSPACE_CONFIG as parseChosenWorkspaceSize reads it: every ":SIZE:COUNT" (SIZE in KiB)
// adds SIZE * COUNT; a value with none of them leaves the default.
std::optional<double> parse_workspace_config(const std::string& s) {
  double total = 0;
  bool any = false;
  for (size_t i = 0; i < s.size();) {
    auto digits = [&](size_t from) {
      size_t j = from;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      return j;
    };
    if (s[i] == ':') {
      const size_t a = digits(i + 1);
      if (a > i + 1 && a < s.size() && s[a] == ':') {
        const size_t b = digits(a + 1);
        if (b > a + 1) {
          total += std::stod(s.substr(i + 1, a - i - 1)) * KiB * std::stod(s.substr(a + 1, b - a - 1));
          any = true;
          i = b;
          continue;
        }
      }
    }
    ++i;
  }
  return any ? std::optional<double>(total) : std::nullopt;
}

// c10::utils::check_env: "1" is true, "0" false, anything else unset.
std::optional<bool> flag(const std::optional<std::string>& v) {
  if (v == "1") return true;
  if (v == "0") return false;
  return std::nullopt;
}
}  // namespace

bool OverheadEnv::expandable_segments() const {
  // CUDAAllocatorConfig::instance(): PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF; the option
  // is "expandable_segments:True".
  const std::optional<std::string>& conf = cuda_alloc_conf ? cuda_alloc_conf : alloc_conf;
  if (!conf) return false;
  const std::string key = "expandable_segments";
  const size_t at = conf->find(key);
  if (at == std::string::npos) return false;
  size_t i = at + key.size();
  auto skip_space = [&] { while (i < conf->size() && std::isspace(static_cast<unsigned char>((*conf)[i]))) ++i; };
  skip_space();
  if (i >= conf->size() || (*conf)[i] != ':') return false;
  ++i;
  skip_space();
  return conf->compare(i, 4, "True") == 0;
}

const OverheadEnv& OverheadEnv::process() {
  // LibTorch reads each of these once, at first use; so do we.
  static const OverheadEnv e{env("CUBLAS_WORKSPACE_CONFIG"), env("CUBLASLT_WORKSPACE_SIZE"),
                             env("TORCH_CUBLASLT_UNIFIED_WORKSPACE"), env("PYTORCH_CUDA_ALLOC_CONF"),
                             env("PYTORCH_ALLOC_CONF")};
  return e;
}

double cublas_workspace_bytes(const GpuSpec& gpu, const OverheadEnv& e) {
  if (e.cublas_workspace_config)
    if (auto configured = parse_workspace_config(*e.cublas_workspace_config)) return *configured;
  // ROCm (CublasHandlePool.cpp, parseChosenWorkspaceSize): 32 MiB, 128 MiB on gfx94x/gfx95x.
  if (gpu.rocm) return (gpu.compute_capability == 94 || gpu.compute_capability == 95 ? 128.0 : 32.0) * MiB;
  // CUDA, same function in 2.11.0: ":4096:2:16:8" (8.125 MiB), ":4096:8" (32 MiB) only when
  // major == 9 && minor == 0. Main after 2.11 (PR #175344) gives 32 MiB to sm_100/sm_120 too; we
  // take 32 there, 2 x 23.9 MiB on the safe side for 2.11.0 itself. Unknown GPU: the larger.
  const int cc = gpu.compute_capability;
  if (cc == 0 || cc == 90 || cc >= 100) return 4096.0 * KiB * 8;
  return 4096.0 * KiB * 2 + 16.0 * KiB * 8;
}

double cublaslt_workspace_bytes(const GpuSpec& gpu, const OverheadEnv& e) {
  // parseCUDABlasLtWorkspaceSize: CUBLASLT_WORKSPACE_SIZE in KiB, default 1024 KiB (76 MiB for
  // hipBLASLt); an unreadable value keeps the default.
  double requested = (gpu.rocm ? 76.0 * 1024 : 1024.0) * KiB;
  if (e.cublaslt_workspace_size) {
    try {
      const int kib = std::stoi(*e.cublaslt_workspace_size);
      if (kib >= 0) requested = kib * KiB;
    } catch (const std::exception&) {
    }
  }
  if (gpu.rocm) return requested;  // hipBLASLt keeps its own pool
  // getCUDABlasLtWorkspaceSize caps the size at cuBLAS's unless TORCH_CUBLASLT_UNIFIED_WORKSPACE=0;
  // getCUDABlasLtWorkspace shares cuBLAS's buffer only when it is 1 (2.11.0 reads the two
  // differently; PR #175879 aligns them after 2.11). Shared: no extra bytes.
  const std::optional<bool> unified = flag(e.cublaslt_unified);
  if (unified == true) return 0;
  if (unified != false) requested = std::min(requested, cublas_workspace_bytes(gpu, e));
  return requested;
}

LibraryUse library_use(const std::string& model_name) {
  for (const auto& entry : models::model_registry())
    if (entry.schema.name == model_name) return entry.gpu_libraries;
  return {true, true};
}

double cuda_context_bytes(const GpuSpec& gpu, bool gemms) {
  // No public measurement of a HIP context under LibTorch was found: 1 GiB, a placeholder.
  if (gpu.rocm) return 1024 * MiB;
  // Bare context (lazy loading, CUDA's default since 12.2) as measured: A100 414, RTX 6000 Ada 426,
  // B200 612 MiB; Hopper takes B200's (fewer SMs, same driver). Plus 150 MiB for the kernels a step
  // loads (65-86 MiB measured on A100/L40S). Sources: docs/estimator.md. On an H100 the whole came
  // out at 751-767 MiB for the ViT and the GNN (model: 762) and 639 MiB for the U-Net, whose step
  // calls no GEMM: cuBLAS's kernels are 112-128 MiB of it, taken off as 120 when there are none.
  const int cc = gpu.compute_capability;
  const double bare = (cc == 0 || cc >= 90) ? 612 : cc == 89 ? 426 : 414;
  return (bare + 150 - (gemms ? 0 : 120)) * MiB;
}

GpuOverhead gpu_overhead(double peak_allocated, const LibraryUse& use, const GpuSpec& gpu, const OverheadEnv& e) {
  GpuOverhead o;
  o.cuda_context = cuda_context_bytes(gpu, use.gemms);
  if (use.gemms) {
    o.cublas_workspace = kBlasHandles * cublas_workspace_bytes(gpu, e);
    o.cublaslt_workspace = kBlasHandles * cublaslt_workspace_bytes(gpu, e);
  }
  // cuDNN (Conv_v8.cpp, try_configs): engines in heuristic order (benchmark off), each call's
  // workspace allocated from the caching allocator and freed, an engine whose workspace does not
  // fit skipped for the next. It is no fixed cost: on an H100 the ViT's patch embedding and the
  // U-Net up to batch 8 took under 3 MB, and the U-Net at batch 64 took 40 MB (bf16) to 246 MB
  // (fp32, TF32 engines) because the memory was there. Where memory is short the workspace gives
  // way, so it is not what decides whether a batch fits, and no term stands for it (it was a 128
  // MiB allowance).
  // Caching allocator (CUDACachingAllocator.cpp): freed blocks stay cached in 2 MiB / 20 MiB /
  // size-rounded segments; public OOM reports of fixed-shape runs show 0-7% reserved-unallocated.
  // expandable_segments remaps free pages, leaving a part-used 2 MiB page per live block: 2%.
  o.allocator_reserve = (e.expandable_segments() ? 0.02 : 0.08) * peak_allocated + 20.0 * MiB;
  return o;
}

}  // namespace wxtrain::estimator
