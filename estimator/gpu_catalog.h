#pragma once
// The GPUs people rent for weather models, with the memory a process can address: cudaMemGetInfo's
// total (what torch.cuda.get_device_properties().total_memory and PyTorch's OOM message "GPU 0 has a
// total capacity of ..." report). nvidia-smi's "Total" is 0.3-0.8 GiB larger: it includes what the
// driver reserves for itself. Each figure's source is in gpu_catalog.cpp and docs/estimator.md.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace wxtrain::estimator {

struct GpuSpec {
  std::string name;        // as users type it: "A100-80", "H100", "RTX4090"
  std::string label;       // as printed
  int64_t memory_bytes;    // cudaMemGetInfo's total
  bool rocm = false;       // AMD: HIP context, hipBLAS/hipBLASLt workspaces
  // major * 10 + minor as torch.cuda.get_device_capability reports it (90: H100; 94: MI300X's
  // gfx942 under ROCm). It picks the per-architecture cuBLAS workspace and context figures;
  // 0 (a --memory size, the device autotune probes) takes the largest of them.
  int compute_capability = 0;
};

const std::vector<GpuSpec>& gpu_catalog();
// Case-insensitive, ignoring spaces, dashes and "GB"; nullopt when unknown.
std::optional<GpuSpec> find_gpu(const std::string& name);
std::string gpu_names();  // comma-separated, for error messages
// The GPUs people rent most for training, one line each in `estimate --svg` when no --gpu or
// --memory is given: T4 16GB to B200 180GB, in the catalog's order.
std::vector<GpuSpec> common_gpus();

}  // namespace wxtrain::estimator
