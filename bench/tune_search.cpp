// tune-batch's search against Lightning's (BatchSizeFinder "binsearch": 1, 2, 4, ... until the
// first failure, then bisection) on the same real probes: for each zoo model at its storm-config
// size and several round CPU budgets, the answer, the number of probes and the wall time of each.
// wxtrain's time includes the estimator's trace that picks its first candidate.
//
//   build/bench/bench_tune_search [--quick]     prints a markdown table
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "autotune/batch_search.h"
#include "core/memory_meter.h"
#include "core/units.h"
#include "distributed/communicator.h"

using namespace wxtrain;

namespace {

// The zoo models as configs/storm_{unet,vit,gnn}.toml size them, on the storm grid's shape
// (6 variables, 33 x 36) without reading the data files.
RunConfig storm_config(const std::string& model) {
  std::string m = "[model]\nname = \"" + model + "\"\n";
  if (model == "unet") m += "channels = [32, 64, 128]\ngroups = 8\n";
  if (model == "vit") m += "patch_size = 3\nembed_dim = 128\ndepth = 4\nheads = 4\nmlp_ratio = 4.0\n";
  if (model == "gnn") m += "latent = 64\nprocessor_layers = 4\nneighbourhood = 1\nmlp_layers = 2\n";
  m += "[data]\nvariables = [\"p\", \"t\", \"u\", \"v\", \"u500\", \"v500\"]\ngrid = [33, 36]\nhistory = 2\n"
       "[train]\nprecision = \"bf16-mixed\"\noptimizer = \"adamw\"\ndevice = \"cpu\"\n"
       "[memory]\nmargin = 0.1\nprobe_steps = 2\n";
  return parse_config(m, "storm_" + model + ".toml");
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const torch::Device cpu(torch::kCPU);
  MemoryMeter& meter = memory_meter(cpu);
  std::printf("| model | budget | answer | wxtrain probes | wxtrain s | estimate | doubling+bisect probes | doubling+bisect s |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  int64_t total_secant = 0, total_doubling = 0;
  double time_secant = 0, time_doubling = 0;
  for (const std::string model : {"unet", "vit", "gnn"}) {
    RunConfig config = storm_config(model);
    auto comm = distributed::make_communicator(distributed::World{}, config.distributed, cpu);
    const auto shape = models::model_shape(config);
    // Round budgets (what a user types), sized per model for answers from a few to ~60 samples.
    std::vector<int64_t> mib = model == "gnn" ? std::vector<int64_t>{320, 768} : std::vector<int64_t>{48, 128, 320};
    if (quick) mib.resize(1);
    for (int64_t m : mib) {
      const int64_t budget = m * static_cast<int64_t>(kMiB);
      config.memory.limit = budget;

      auto t0 = std::chrono::steady_clock::now();
      autotune::TuneOptions options;
      options.suggestions = false;
      const autotune::TuneReport r = autotune::tune_batch_report(config, cpu, comm, options);
      const double ts = seconds_since(t0);

      autotune::SearchOptions so;
      so.target = r.target;
      so.budget = r.budget;
      so.multiple_of = config.memory.multiple_of;
      so.max_batch = config.memory.max_batch;
      autotune::BatchProber prober(config, shape, cpu, comm, budget, r.target);
      t0 = std::chrono::steady_clock::now();
      const autotune::SearchResult d = autotune::doubling_search(so, std::ref(prober));
      const double td = seconds_since(t0);

      std::printf("| %s | %s | %lld%s | %zu | %.2f | %lld | %zu | %.2f |\n", model.c_str(),
                  format_bytes(static_cast<double>(budget)).c_str(), static_cast<long long>(r.batch),
                  r.batch == d.batch ? "" : " (MISMATCH)", r.probes.size(), ts,
                  static_cast<long long>(r.estimated_batch), d.probes.size(), td);
      std::fflush(stdout);
      total_secant += static_cast<int64_t>(r.probes.size());
      total_doubling += static_cast<int64_t>(d.probes.size());
      time_secant += ts;
      time_doubling += td;
      if (meter.snapshot().allocated != r.baseline) std::printf("(leak: %lld bytes)\n", static_cast<long long>(meter.snapshot().allocated - r.baseline));
    }
  }
  std::printf("| **total** | | | %lld | %.2f | | %lld | %.2f |\n", static_cast<long long>(total_secant), time_secant,
              static_cast<long long>(total_doubling), time_doubling);
  return 0;
}
