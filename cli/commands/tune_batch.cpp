// `wxtrain tune-batch`: the largest micro-batch that trains within the memory budget, by real probes
// of the training step (autotune/batch_search.h), printed as a table or --json, optionally written
// back into the run file.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>

#include <nlohmann/json.hpp>

#include "autotune/batch_search.h"
#include "cli/commands.h"
#include "cli/run_setup.h"
#include "cli/table.h"
#include "core/config_reader.h"
#include "core/device.h"
#include "core/error.h"
#include "core/run_file_text.h"
#include "core/units.h"
#include "distributed/world.h"

namespace wxtrain::cli {

namespace {

// A number flag not given keeps the run file's value; one given is checked like it.
constexpr int64_t kNotGiven = INT64_MIN;

struct TuneArgs {
  RunOptions run;
  std::string memory_limit;
  double margin = std::numeric_limits<double>::quiet_NaN();  // NaN: not given
  int64_t multiple_of = kNotGiven;
  int64_t max_batch = kNotGiven;
  int64_t probe_steps = kNotGiven;
  std::string search = "batch";
  bool write = false;
  bool tensors_only = false;
  bool json = false;
};

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", s);
  return buf;
}

// Flags override the run file's [memory] values, with the same checks.
void apply_flags(const TuneArgs& args, RunConfig& config) {
  if (!args.memory_limit.empty()) {
    auto bytes = parse_bytes(args.memory_limit);
    if (!bytes || *bytes <= 0)
      throw ConfigError("--memory-limit " + args.memory_limit + ": expected a size such as 24GiB or 512MiB");
    config.memory.limit = *bytes;
  }
  if (!std::isnan(args.margin)) {
    if (!(args.margin >= 0 && args.margin <= 0.9))
      throw ConfigError("--margin " + toml_text(args.margin) + " is out of range: expected 0 to 0.9 (0.1 = keep 10% free)");
    config.memory.margin = args.margin;
  }
  // The run file's ranges (core/config.cpp, [memory]).
  auto count = [](const char* flag, int64_t value, int64_t max, int64_t& into) {
    if (value == kNotGiven) return;
    if (value < 1 || value > max)
      throw ConfigError(std::string(flag) + " " + std::to_string(value) + " is out of range: expected 1 to " +
                        std::to_string(max));
    into = value;
  };
  count("--multiple-of", args.multiple_of, 1 << 20, config.memory.multiple_of);
  count("--max-batch", args.max_batch, 1 << 24, config.memory.max_batch);
  count("--probe-steps", args.probe_steps, 100, config.memory.probe_steps);
}

nlohmann::json report_json(const RunConfig& config, const autotune::TuneReport& r) {
  nlohmann::json j;
  j["config"] = config.path;
  j["model"] = config.model.name;
  j["device"] = r.device;
  j["world_size"] = r.world_size;
  j["budget_bytes"] = r.budget;
  j["margin"] = r.margin;
  j["target_bytes"] = r.target;
  j["baseline_bytes"] = r.baseline;
  j["multiple_of"] = r.multiple_of;
  j["max_batch"] = r.max_batch;
  j["samples_per_rank"] = r.data_cap;  // when the training split caps the search below memory.max_batch
  j["capped_by_data"] = r.capped_by_data();
  j["estimated_batch"] = r.estimated_batch;
  j["sure_batch"] = r.sure_batch;
  j["estimated_bytes_per_sample"] = r.estimated_slope;
  // CPU: modelled resident bytes outside the counting allocator, counted against the budget.
  j["cpu_overhead"] = {{"process_bytes", r.cpu_overhead.process}, {"per_sample_bytes", r.cpu_overhead.per_sample}};
  j["probes"] = nlohmann::json::array();
  const bool members = r.search == autotune::SearchDimension::kMembers;
  for (const auto& p : r.probes) {
    // peak_bytes on OOM: what was in use when it failed.
    j["probes"].push_back({{"batch", p.batch}, {"peak_bytes", p.peak}, {"budget_bytes", r.budget},
                           {"result", p.passed ? "pass" : p.oom ? "oom" : "over margin"}, {"seconds", p.seconds},
                           {"leaked_bytes", p.leaked}, {"overhead_bytes", p.overhead}});
    if (members) j["probes"].back()["members"] = p.members;
  }
  j["search"] = members ? "members" : "batch";
  if (members) {
    // The members per sample at the run's micro-batch: the answer, the estimate's and the one it is
    // sure of (where the search started); estimated_bytes_per_sample is then per member at the batch.
    j["members"] = r.members;
    j["estimated_members"] = r.estimated_members;
    j["sure_members"] = r.sure_members;
  }
  j["batch"] = r.batch;
  j["accumulation"] = r.accumulation;
  j["effective_batch"] = r.effective_batch;
  j["suggestions"] = nlohmann::json::array();
  for (const auto& s : r.suggestions) j["suggestions"].push_back({{"change", s.change}, {"estimated_max_batch", s.max_batch}});
  j["seconds"] = r.seconds;
  return j;
}

int run_tune(const TuneArgs& args) {
  const distributed::World& world = distributed::current_world();  // main() initialised it
  return distributed::run_or_abort([&] {
    SetupRequest request;
    request.count_samples = true;  // the search never goes past what the training split fills
    const RunSetup setup = setup_run(args.run, request);
    RunConfig config = setup.config;
    apply_flags(args, config);
    const torch::Device device = resolve_device(config.train.device, world.local_rank);
    const bool lead = world.rank == 0;
    if (args.search != "batch" && args.search != "members")
      throw ConfigError("--search " + args.search + ": expected batch or members");
    const bool members = args.search == "members";
    if (lead && !args.json)
      std::cout << "wxtrain tune-batch: " << config.path << " (" << config.model.name << ", "
                << to_string(config.train.precision) << ", checkpointing "
                << describe_checkpointing(config.train) << ", accumulation " << config.train.accumulation
                << ", rollout " << config.max_rollout() << ", ZeRO-" << config.distributed.zero_stage << ") on "
                << device.str() << (world.size > 1 ? " x " + std::to_string(world.size) + " ranks" : "")
                << (members ? ": searching members per sample at micro-batch " + std::to_string(config.train.batch_size)
                            : std::string())
                << "\n"
                << std::flush;

    autotune::TuneOptions options;
    if (members) options.search = autotune::SearchDimension::kMembers;
    options.cpu_overhead = !args.tensors_only;
    options.samples_per_rank = setup.samples_per_rank;
    if (lead && !args.json)
      options.on_probe = [members](const autotune::Probe& p) {
        std::cout << "  probe " << (members ? "members " + std::to_string(p.members) : "batch " + std::to_string(p.batch))
                  << ": "
                  << (p.oom ? std::string("out of memory")
                            : "peak " + format_gib(static_cast<double>(p.peak), 3) + " GiB" +
                                  (p.overhead > 0
                                       ? " + " + format_gib(static_cast<double>(p.overhead), 3) + " GiB outside the allocator"
                                       : "") +
                                  ", " + (p.passed ? "pass" : "over the margin"))
                  << " (" << secs(p.seconds) << " s)\n"
                  << std::flush;
      };
    const autotune::TuneReport r = autotune::tune_batch_report(config, device, nullptr, options);

    if (args.write && lead) {
      if (members) write_config_value(config.path, "train", "ensemble_members", std::to_string(r.members));
      else write_config_value(config.path, "train", "batch_size", std::to_string(r.batch));
    }
    if (!lead) return 0;
    if (args.json) {
      nlohmann::json j = report_json(config, r);
      j["written"] = args.write;
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    char margin[16];
    std::snprintf(margin, sizeof margin, "%.0f%%", r.margin * 100);
    std::cout << "budget     " << format_gib(static_cast<double>(r.budget), 3) << " GiB (" << r.meter << "), margin " << margin
              << " -> target peak " << format_gib(static_cast<double>(r.target), 3) << " GiB\n"
              << (members ? "estimate   most members per sample at micro-batch " + std::to_string(r.batch) + ": " +
                                std::to_string(r.estimated_members) + ", sure of " + std::to_string(r.sure_members) +
                                " (search starts there)\n"
                          : "estimate   largest batch " + std::to_string(r.estimated_batch) + ", sure of " +
                                std::to_string(r.sure_batch) + " (search starts there)\n");
    if (r.cpu_overhead.process > 0 || r.cpu_overhead.per_sample > 0)
      std::cout << "overhead   " << format_gib(r.cpu_overhead.process, 3) << " GiB + " << format_gib(r.cpu_overhead.per_sample * 1024, 3)
                << " GiB per 1024 samples held outside the allocator (estimator/cpu_overhead.h)\n";
    std::cout << "\n";
    Table t({"probe", members ? "members" : "batch", "peak GiB", "budget GiB", "result", "seconds"},
            {true, true, true, true, false, true});
    for (size_t i = 0; i < r.probes.size(); ++i) {
      const auto& p = r.probes[i];
      t.add({std::to_string(i + 1), std::to_string(members ? p.members : p.batch),
             p.oom ? "> " + format_gib(static_cast<double>(r.budget), 3) : format_gib(static_cast<double>(p.peak), 3),
             format_gib(static_cast<double>(r.budget), 3), p.passed ? "pass" : p.oom ? "OOM" : "over margin", secs(p.seconds)});
    }
    std::cout << t.str() << "\n";
    if (members)
      std::cout << r.members << " members per sample at micro-batch " << r.batch << " (" << r.probes.size()
                << " probes, " << secs(r.seconds) << " s): " << r.batch * r.members << " rows per micro-batch\n";
    else
      std::cout << "micro-batch " << r.batch << " (" << r.probes.size() << " probes, " << secs(r.seconds)
                << " s); effective batch " << r.batch << " x accumulation " << r.accumulation << " x "
                << r.world_size << " rank(s) = " << r.effective_batch << "\n";
    if (r.capped_by_data()) std::cout << autotune::describe_data_cap(r) << "\n";
    if (!r.suggestions.empty()) {
      std::cout << "\nwhat would allow more (estimated, not probed):\n";
      Table s({"change", "estimated max batch"}, {false, true});
      s.add({"(as configured)", std::to_string(r.estimated_batch)});
      for (const auto& g : r.suggestions) s.add({g.change, std::to_string(g.max_batch)});
      std::cout << s.str();
    }
    if (args.write)
      std::cout << "\nwrote " << (members ? "train.ensemble_members = " + std::to_string(r.members)
                                         : "train.batch_size = " + std::to_string(r.batch))
                << " to " << config.path << "\n";
    return 0;
  });
}

}  // namespace

Action add_tune_batch_command(CLI::App& app) {
  auto args = std::make_shared<TuneArgs>();
  auto* cmd = app.add_subcommand("tune-batch", "find the largest micro-batch that trains within the memory budget");
  add_run_options(*cmd, args->run);
  cmd->add_option("--memory-limit", args->memory_limit, "budget, e.g. 24GiB (default memory.limit, else the device's size)");
  cmd->add_option("--margin", args->margin, "share of the budget kept free (default memory.margin, 0.10)");
  cmd->add_option("--multiple-of", args->multiple_of, "batch sizes are multiples of this (default memory.multiple_of)");
  cmd->add_option("--max-batch", args->max_batch, "never try above this (default memory.max_batch)");
  cmd->add_option("--probe-steps", args->probe_steps, "training steps per probe (default memory.probe_steps)");
  cmd->add_flag("--tensors-only", args->tensors_only,
                "on the CPU, the budget is for the counted tensors alone (an emulated device), not the "
                "process's resident set with what it holds outside the allocator");
  cmd->add_option("--search", args->search,
                  "what to search: batch (default: the largest micro-batch, members fixed) or members (an ensemble, "
                  "train.ensemble_members > 1: the most members per sample at the run's train.batch_size, exact, "
                  "started where the estimate is sure; --write then records train.ensemble_members)");
  cmd->add_flag("--write", args->write,
                "record the result as train.batch_size (--search members: train.ensemble_members) in the run file "
                "(comments kept)");
  cmd->add_flag("--json", args->json, "machine-readable output");
  return [args]() { return run_tune(*args); };
}

}  // namespace wxtrain::cli
