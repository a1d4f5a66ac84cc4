#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/device.h"
#include "core/units.h"
#include "models/cpu_gemm.h"

namespace wxtrain::cli {

Action add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "print the build: LibTorch, CUDA, BLAS, threads, devices and memory");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "machine-readable output");
  return [json]() {
    BuildInfo b = build_info();
    const bool onednn_sgemm = models::onednn_sgemm_available();  // the zoo's fp32 CPU GEMMs use it
    if (*json) {
      nlohmann::json j{{"wxtrain", b.wxtrain_version}, {"libtorch", b.torch_version},
                       {"cuda_built", b.cuda_built}, {"cuda_available", b.cuda_available},
                       {"blas", b.blas}, {"blas_core", b.blas_core}, {"blas_lags_cpu", b.blas_lags_cpu}, {"onednn", b.mkldnn},
                       {"onednn_sgemm", onednn_sgemm}, {"threads", b.threads}};
      for (const auto& d : b.devices) j["devices"].push_back({{"name", d.name}, {"memory_bytes", d.memory_bytes}});
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    std::cout << "wxtrain   " << b.wxtrain_version << "\n"
              << "LibTorch  " << b.torch_version << "\n"
              << "CUDA      " << (b.cuda_built ? "built (WXTRAIN_CUDA=ON)" : "off (built without WXTRAIN_CUDA)")
              << (b.cuda_available ? ", device available" : ", no CUDA device") << "\n"
              << "BLAS      " << b.blas << (b.blas_core.empty() ? "" : " (OpenBLAS kernels: " + b.blas_core + ")") << "\n"
              << "oneDNN    "
              << (!b.mkldnn ? "no"
                  : onednn_sgemm ? "yes (bf16 GEMMs and convolutions; the zoo's fp32 CPU GEMMs via dnnl_sgemm)"
                                   : "yes (bf16 GEMMs and convolutions)")
              << "\n"
              << "threads   " << b.threads << " (intra-op)\n";
    for (const auto& d : b.devices) std::cout << "device    " << d.name << ", " << format_bytes(d.memory_bytes) << "\n";
    if (b.blas_lags_cpu) {
      std::cout << "note: OpenBLAS runs its " << b.blas_core << " kernels on this AVX-512 CPU (about half the fp32 "
                << "GEMM rate of its AVX-512 ones); wxtrain's models send fp32 GEMMs to oneDNN"
                << (onednn_sgemm ? "" : " (not available in this LibTorch)")
                << ", other fp32 BLAS calls get AVX-512 with OPENBLAS_CORETYPE=SkylakeX\n";
    }
    if (b.blas.find("openblas") == std::string::npos && b.blas.find("mkl") == std::string::npos)
      std::cout << "warning: LibTorch is using the reference BLAS; install libopenblas0-pthread for ~50x faster fp32 matmul\n";
    return 0;
  };
}

}  // namespace wxtrain::cli
