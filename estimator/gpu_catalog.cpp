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
  // Totals as reported by nvidia-smi / rocm-smi on these boards.
  static const std::vector<GpuSpec> catalog = {
      {"RTX3080", "RTX 3080 10GB", 10240 * MiB},
      {"T4", "T4 16GB", 15360 * MiB},
      {"RTX4060Ti", "RTX 4060 Ti 16GB", 16380 * MiB},
      {"A10G", "A10G 24GB", 23028 * MiB},
      {"L4", "L4 24GB", 23034 * MiB},
      {"RTX4090", "RTX 4090 24GB", 24564 * MiB},
      {"V100", "V100 32GB", 32768 * MiB},
      {"A100-40", "A100 40GB", 40960 * MiB},
      {"A100-80", "A100 80GB", 81920 * MiB},
      {"H100", "H100 80GB", 81559 * MiB},
      // MI250X: 128 GB over two GCDs, each a separate device of 64 GB to a process.
      {"MI250X", "MI250X 128GB (per GCD)", 65536 * MiB, true},
      {"H200", "H200 141GB", 143771 * MiB},
  };
  return catalog;
}

std::optional<GpuSpec> find_gpu(const std::string& name) {
  const std::string key = canonical(name);
  for (const auto& g : gpu_catalog())
    if (canonical(g.name) == key || canonical(g.label) == key) return g;
  return std::nullopt;
}

std::string gpu_names() {
  std::string out;
  for (const auto& g : gpu_catalog()) out += (out.empty() ? "" : ", ") + g.name;
  return out;
}

}  // namespace wxtrain::estimator
