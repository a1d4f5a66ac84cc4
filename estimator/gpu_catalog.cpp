#include "estimator/gpu_catalog.h"

#include <cctype>

namespace wxtrain::estimator {

namespace {
constexpr int64_t MiB = 1024LL * 1024LL;

std::string canonical(const std::string& s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(c));
  if (out.size() > 2 && out.substr(out.size() - 2) == "gb") out.resize(out.size() - 2);
  return out;
}
}  // namespace

const std::vector<GpuSpec>& gpu_catalog() {
  // cudaMemGetInfo's total in MiB: the lowest a public report shows (it moves by ~0.2 GiB with the
  // driver), else nvidia-smi's Total less 1 GiB, more than the 0.3-0.8 GiB gap any measured board
  // shows. Sources per line: docs/estimator.md, "The catalog". Compute capability:
  // https://developer.nvidia.com/cuda-gpus; ROCm boards as torch.cuda.get_device_capability says.
  // Ordered by memory, except that B200 ends the list: `wxtrain estimate` prices its one-GPU
  // column on the last entry, which should be a CUDA board.
  static const std::vector<GpuSpec> catalog = {
      {"RTX3080", "RTX 3080 10GB", 9216 * MiB, false, 86},       // nvidia-smi 10240 - 1 GiB
      {"T4", "T4 16GB", 14909 * MiB, false, 75},                 // OOM: "total capacity of 14.56 GiB"
      {"RTX4060Ti", "RTX 4060 Ti 16GB", 15356 * MiB, false, 89},  // nvidia-smi 16380 - 1 GiB
      {"L4", "L4 24GB", 22558 * MiB, false, 89},                 // OOM: 22.03 GiB (nvidia-smi 23034)
      {"A10G", "A10G 24GB", 22587 * MiB, false, 86},             // total_memory=22587MB (nvidia-smi 23028)
      {"RTX4090", "RTX 4090 24GB", 24207 * MiB, false, 89},      // OOM: 23.64-23.69 GiB (nvidia-smi 24564)
      {"V100", "V100 32GB", 32501 * MiB, false, 70},             // OOM: 31.74 GiB
      {"A100-40", "A100 40GB", 40339 * MiB, false, 80},          // deviceQuery 40339 MBytes (nvidia-smi 40960)
      {"L40S", "L40S 48GB", 45589 * MiB, false, 89},             // total_memory=45589MB (nvidia-smi 46068)
      {"RTX6000Ada", "RTX 6000 Ada 48GB", 48509 * MiB, false, 89},  // 50,865,307,648 bytes from cudaMemGetInfo
      // MI250X: 128 GB over two GCDs, each a separate device of 64 GB to a process.
      {"MI250X", "MI250X 128GB (per GCD)", 65520 * MiB, true, 90},  // total_memory=65520MB, gfx90a
      {"A100-80", "A100 80GB", 81152 * MiB, false, 80},          // OOM: 79.25 GiB (nvidia-smi 81920)
      {"H100-PCIe", "H100 PCIe 80GB", 81008 * MiB, false, 90},   // total_memory=81008MB (nvidia-smi 81559)
      // SXM ("H100 80GB HBM3"): 81080-81090 MiB reported; an OOM on "H100" reads 79.11 GiB (81008).
      {"H100", "H100 80GB", 81008 * MiB, false, 90},
      {"H100-NVL", "H100 NVL 94GB", 94806 * MiB, false, 90},     // nvidia-smi 95830 - 1 GiB
      {"GH200", "GH200 96GB", 96847 * MiB, false, 90},           // nvidia-smi 97871 - 1 GiB
      {"H200", "H200 141GB", 143156 * MiB, false, 90},           // total_memory=143156MB (nvidia-smi 143771)
      {"MI300X", "MI300X 192GB", 196592 * MiB, true, 94},        // total_memory=196592MB, gfx942
      {"B200", "B200 180GB", 182631 * MiB, false, 100},          // total_memory=182631MB (nvidia-smi 183359)
  };
  return catalog;
}

std::optional<GpuSpec> find_gpu(const std::string& name) {
  const std::string key = canonical(name);
  for (const auto& g : gpu_catalog())
    if (canonical(g.name) == key || canonical(g.label) == key) return g;
  return std::nullopt;
}

std::vector<GpuSpec> common_gpus() {
  static const std::vector<std::string> names = {"T4", "A10G", "V100", "A100-40", "L40S", "A100-80", "H100", "H200", "B200"};
  std::vector<GpuSpec> out;
  for (const auto& g : gpu_catalog())
    for (const auto& name : names)
      if (g.name == name) out.push_back(g);
  return out;
}

std::string gpu_names() {
  std::string out;
  for (const auto& g : gpu_catalog()) out += (out.empty() ? "" : ", ") + g.name;
  return out;
}

}  // namespace wxtrain::estimator
