#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/device.h"
#include "core/units.h"
#include "data/readers/reader.h"
#include "distributed/nccl/nccl_communicator.h"
#include "ops/cpu_gemm.h"

namespace wxtrain::cli {

namespace {

// "built with CUDA 13.0, cuDNN 9.19.0, NCCL 2.28.9" or "not built (CPU-only LibTorch)".
std::string cuda_line(const BuildInfo& b, const std::string& nccl) {
  if (!b.cuda_built) return "not built (a CPU-only LibTorch)";
  std::string line = "built with CUDA " + (b.cuda_version.empty() ? "(version unknown)" : b.cuda_version);
  if (!b.cudnn_version.empty()) line += ", cuDNN " + b.cudnn_version;
  if (!nccl.empty()) line += ", NCCL " + nccl;
  return line;
}

}  // namespace

Action add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "print the build: LibTorch, CUDA, cuDNN, NCCL, BLAS, threads, devices and memory");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "machine-readable output");
  return [json]() {
    const BuildInfo b = build_info();
    const std::string nccl = distributed::nccl_version();
    const bool onednn_sgemm = ops::onednn_sgemm_available();  // the zoo's fp32 CPU GEMMs use it
    if (*json) {
      nlohmann::json j{{"wxtrain", b.wxtrain_version}, {"libtorch", b.torch_version},
                       {"cuda_built", b.cuda_built},    {"cuda_version", b.cuda_version},
                       {"cudnn_version", b.cudnn_version}, {"nccl_version", nccl},
                       {"cuda_available", b.cuda_available}, {"blas", b.blas},
                       {"sgemm_library", b.sgemm_library}, {"blas_interposed", b.blas_interposed},
                       {"onednn", b.mkldnn},            {"onednn_sgemm", onednn_sgemm},
                       {"threads", b.threads}};
      for (const auto& [library, version] : data::reader_library_versions()) j["data_libraries"][library] = version;
      for (const auto& d : b.devices) j["devices"].push_back({{"name", d.name}, {"memory_bytes", d.memory_bytes}});
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    std::cout << "wxtrain   " << b.wxtrain_version << "\n"
              << "LibTorch  " << b.torch_version << "\n"
              << "CUDA      " << cuda_line(b, nccl) << (b.cuda_available ? "; device available" : "; no CUDA device")
              << "\n"
              << "BLAS      " << b.blas << (b.sgemm_library.empty() ? "" : " (sgemm_ from " + b.sgemm_library + ")")
              << "\n"
              << "oneDNN    " << (b.mkldnn ? "yes (bf16 GEMMs and convolutions on the CPU)" : "no")
              << (onednn_sgemm ? "; the zoo's fp32 GEMMs through Debian's libdnnl"
                               : "; no libdnnl.so.2: the zoo's fp32 GEMMs run on the BLAS (install libdnnl2)")
              << "\n"
              << "threads   " << b.threads << " (intra-op)\n"
              << "data      ";
    const auto libraries = data::reader_library_versions();
    for (size_t i = 0; i < libraries.size(); ++i)
      std::cout << (i ? ", " : "") << libraries[i].first << " " << libraries[i].second;
    std::cout << " (NetCDF, Zarr v2/v3, GRIB)\n";
    for (const auto& d : b.devices) std::cout << "device    " << d.name << ", " << format_bytes(d.memory_bytes) << "\n";
    if (b.blas_interposed) {
      std::cout << "warning: LibTorch's BLAS calls resolve to " << b.sgemm_library << ", not to the " << b.blas
                << " inside libtorch_cpu: another BLAS loaded into this process takes over its fp32 GEMMs\n";
    }
    return 0;
  };
}

}  // namespace wxtrain::cli
