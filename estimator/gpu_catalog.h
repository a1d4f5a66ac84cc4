#pragma once
// The GPUs people rent for weather models, with the memory the driver reports (nvidia-smi's
// "Total", MiB), which is what a process can address; vendor "GB" labels are rounder than that.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace wxtrain::estimator {

struct GpuSpec {
  std::string name;        // as users type it: "A100-80", "H100", "RTX4090"
  std::string label;       // as printed
  int64_t memory_bytes;    // total device memory reported by the driver
  bool rocm = false;       // AMD: no CUDA context model, HIP instead
};

const std::vector<GpuSpec>& gpu_catalog();
// Case-insensitive, ignoring spaces, dashes and "GB"; nullopt when unknown.
std::optional<GpuSpec> find_gpu(const std::string& name);
std::string gpu_names();  // comma-separated, for error messages

}  // namespace wxtrain::estimator
