// `wxtrain profile`: N real training steps under the memory meter (autotune/memory_profile.h): a
// per-step CSV, a summary, an SVG timeline of one step, a memory_viz snapshot of the steps'
// allocations, and PASS/FAIL against --threshold with the exit code CI needs (0 at or below, 3
// above; 2 for bad arguments, 1 when the steps could not run: core/error.h, ExitCode).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "autotune/memory_profile.h"
#include "cli/commands.h"
#include "cli/run_setup.h"
#include "cli/table.h"
#include "core/atomic_file.h"
#include "core/device.h"
#include "core/error.h"
#include "core/svg_plot.h"
#include "core/units.h"
#include "distributed/world.h"

namespace wxtrain::cli {

namespace {

struct ProfileArgs {
  RunOptions run;
  int64_t steps = 10;
  std::string threshold;
  std::string csv;
  std::string svg;
  std::string snapshot;
  int64_t snapshot_entries = 100000;
  bool tensors_only = false;
  CLI::Option* snapshot_option = nullptr;  // given at all (an empty FILE is an error, not "none")
  bool json = false;
};

// --snapshot FILE: checked before any work, so a typo does not cost the run.
void check_snapshot_arguments(const ProfileArgs& args) {
  if (!args.snapshot_option || args.snapshot_option->count() == 0) return;
  if (args.snapshot.empty()) throw ConfigError("--snapshot '': expected a file name such as memory.pickle");
  if (args.snapshot_entries <= 0)
    throw ConfigError("--snapshot-entries " + std::to_string(args.snapshot_entries) +
                      ": expected a positive number of events to keep, e.g. 100000");
  struct stat st {};
  if (stat(args.snapshot.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw ConfigError("--snapshot " + args.snapshot + ": is a directory; expected a file name such as memory.pickle");
  const auto slash = args.snapshot.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : args.snapshot.substr(0, slash));
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw ConfigError("--snapshot " + args.snapshot + ": directory " + dir + " does not exist");
}

// Rank 0 writes FILE; under mpirun rank r writes FILE with ".rank<r>" before its extension.
std::string snapshot_path(const std::string& path, int rank) {
  if (rank == 0) return path;
  const auto slash = path.find_last_of('/');
  const auto dot = path.find_last_of('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  const std::string tag = ".rank" + std::to_string(rank);
  return has_ext ? path.substr(0, dot) + tag + path.substr(dot) : path + tag;
}

// The sampled step as allocated GiB over milliseconds, with the phase boundary (and the threshold)
// drawn as lines. Long steps are reduced to their per-bucket maxima so peaks survive.
void write_timeline(const autotune::ProfileReport& r, const std::string& model, int64_t threshold,
                    const std::string& path) {
  const auto& t = r.timeline;
  PlotSpec plot;
  plot.title = "wxtrain profile: " + model + ", step " + std::to_string(t.step) + " at micro-batch " +
               std::to_string(r.batch) + " x " + std::to_string(r.accumulation);
  plot.x_label = "time in step (ms)";
  plot.y_label = "allocated (GiB)";
  Series mem{"allocated"};
  const size_t buckets = 1500;
  const size_t per = std::max<size_t>(1, (t.ms.size() + buckets - 1) / buckets);
  double top = 0;
  for (size_t i = 0; i < t.ms.size(); i += per) {
    int64_t high = 0;
    for (size_t j = i; j < std::min(t.ms.size(), i + per); ++j) high = std::max(high, t.allocated[j]);
    mem.x.push_back(t.ms[i]);
    mem.y.push_back(high / kGiB);
    top = std::max(top, high / kGiB);
  }
  top = std::max(top, r.peak() / kGiB);
  if (threshold > 0) top = std::max(top, threshold / kGiB);
  Series optimizer{"optimizer starts", {t.optimizer_start_ms, t.optimizer_start_ms}, {0.0, top}, "#d62728", true};
  Series end{"step ends", {t.end_ms, t.end_ms}, {0.0, top}, "#7f7f7f", true};
  Series peak{"peak " + format_gib(static_cast<double>(r.peak()), 3) + " GiB", {0.0, t.end_ms},
              {r.peak() / kGiB, r.peak() / kGiB}, "#2ca02c", true};
  plot.series = {mem, optimizer, end, peak};
  if (threshold > 0) {
    // The plot shows the counted tensors: on the CPU the threshold is drawn less what the process
    // holds outside the allocator, where the verdict puts it.
    const double line = static_cast<double>(threshold - r.overhead_at_batch()) / kGiB;
    plot.series.push_back({r.overhead_at_batch() > 0 ? "threshold less CPU overhead" : "threshold", {0.0, t.end_ms},
                           {line, line}, "#9467bd", false});
  }
  write_file_atomically(path, render_svg(plot));
}

int run_profile(const ProfileArgs& args) {
  // Arguments first: a bad --threshold or --steps fails before any work.
  const int64_t threshold = args.threshold.empty() ? 0 : autotune::parse_size_argument("--threshold", args.threshold);
  if (args.steps <= 0)
    throw ConfigError("--steps " + std::to_string(args.steps) + ": expected a positive number of steps");
  check_snapshot_arguments(args);
  const bool snapshot = !args.snapshot.empty();
  const distributed::World& world = distributed::current_world();  // main() initialised it
  return distributed::run_or_abort([&] {
    const RunConfig config = setup_run(args.run).config;
    const torch::Device device = resolve_device(config.train.device, world.local_rank);
    autotune::ProfileOptions options;
    options.steps = args.steps;
    options.cpu_overhead = !args.tensors_only;
    if (snapshot) options.snapshot_entries = args.snapshot_entries;
    const autotune::ProfileReport r = autotune::profile_memory(config, device, nullptr, options);
    // Every rank records its own memory; write_text_file writes FILE.tmp and renames it into place.
    if (snapshot) write_file_atomically(snapshot_path(args.snapshot, world.rank), r.snapshot);
    if (world.rank != 0) return 0;

    if (!args.csv.empty()) write_file_atomically(args.csv, autotune::steps_csv(r, threshold));
    if (!args.svg.empty()) write_timeline(r, config.model.name, threshold, args.svg);
    std::optional<autotune::ThresholdVerdict> verdict;
    if (threshold > 0) verdict = autotune::check_threshold(r, threshold);

    if (args.json) {
      nlohmann::json j;
      j["config"] = config.path;
      j["model"] = config.model.name;
      j["device"] = r.device;
      j["batch"] = r.batch;
      if (r.members > 1) j["ensemble_members"] = r.members;
      j["accumulation"] = r.accumulation;
      j["steps"] = nlohmann::json::array();
      for (const auto& s : r.steps)
        j["steps"].push_back({{"step", s.step}, {"timestamp", s.timestamp}, {"seconds", s.seconds},
                              {"allocated_bytes", s.allocated}, {"reserved_bytes", s.reserved},
                              {"peak_forward_backward_bytes", s.peak_forward_backward},
                              {"peak_optimizer_bytes", s.peak_optimizer}});
      j["baseline_bytes"] = r.baseline;
      j["states_bytes"] = r.states;
      j["peak_bytes"] = r.peak();
      j["steady_allocated_bytes"] = r.steady_allocated();
      j["peak_forward_backward_bytes"] = r.peak_forward_backward();
      j["peak_optimizer_bytes"] = r.peak_optimizer();
      j["timeline_samples"] = r.timeline.ms.size();
      if (snapshot) j["snapshot"] = {{"path", args.snapshot}, {"bytes", r.snapshot.size()}};
      // CPU: resident bytes outside the counting allocator, judged with the tensors (judged_peak_bytes).
      j["cpu_overhead"] = {{"process_bytes", r.cpu_overhead.process}, {"per_sample_bytes", r.cpu_overhead.per_sample},
                           {"at_batch_bytes", r.overhead_at_batch()}};
      j["judged_peak_bytes"] = r.judged_peak();
      if (verdict)
        j["threshold"] = {{"bytes", verdict->threshold}, {"pass", verdict->pass}, {"headroom_bytes", verdict->headroom},
                          {"judged_peak_bytes", verdict->peak}};
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << "wxtrain profile: " << config.path << " (" << config.model.name << ", "
                << to_string(config.train.precision) << ", micro-batch " << r.batch << " x " << r.accumulation
                << ") on " << r.device << ", " << r.steps.size() << " steps\n\n";
      Table t({"step", "seconds", "allocated GiB", "reserved GiB", "peak fwd/bwd GiB", "peak optimizer GiB"},
              {true, true, true, true, true, true});
      for (const auto& s : r.steps) {
        char sec[32];
        std::snprintf(sec, sizeof sec, "%.3f", s.seconds);
        t.add({std::to_string(s.step), sec, format_gib(static_cast<double>(s.allocated), 3),
               format_gib(static_cast<double>(s.reserved), 3), format_gib(static_cast<double>(s.peak_forward_backward), 3),
               format_gib(static_cast<double>(s.peak_optimizer), 3)});
      }
      std::cout << t.str() << "\n";
      Table sum({"summary", "GiB"}, {false, true});
      sum.add({"before the model", format_gib(static_cast<double>(r.baseline), 3)});
      sum.add({"model, optimizer, inputs (built)", format_gib(static_cast<double>(r.states), 3)});
      sum.add({"steady-state allocated", format_gib(static_cast<double>(r.steady_allocated()), 3)});
      sum.add({"peak forward/backward", format_gib(static_cast<double>(r.peak_forward_backward()), 3)});
      sum.add({"peak optimizer", format_gib(static_cast<double>(r.peak_optimizer()), 3)});
      sum.add({"peak", format_gib(static_cast<double>(r.peak()), 3)});
      if (r.overhead_at_batch() > 0) {
        sum.add({"outside the allocator (CPU overhead)", format_gib(static_cast<double>(r.overhead_at_batch()), 3)});
        sum.add({"peak with CPU overhead", format_gib(static_cast<double>(r.judged_peak()), 3)});
      }
      std::cout << sum.str();
      if (!args.csv.empty()) std::cout << "\nper-step log: " << args.csv << "\n";
      if (!args.svg.empty())
        std::cout << (args.csv.empty() ? "\n" : "") << "timeline of step " << r.timeline.step << " ("
                  << r.timeline.ms.size() << " samples): " << args.svg << "\n";
      if (snapshot) {
        std::cout << (args.csv.empty() && args.svg.empty() ? "\n" : "") << "memory snapshot of the steps ("
                  << format_bytes(static_cast<double>(r.snapshot.size())) << "): " << args.snapshot << "\n"
                  << "  open it: drag it into https://pytorch.org/memory_viz, or\n"
                  << "  python -m torch.cuda._memory_viz trace_plot " << args.snapshot << " -o " << args.snapshot
                  << ".html\n";
        if (world.size > 1)
          std::cout << "  the other ranks': " << snapshot_path(args.snapshot, 1)
                    << (world.size > 2 ? " .. " + snapshot_path(args.snapshot, world.size - 1) : std::string()) << "\n";
      }
    }
    if (verdict) {
      (verdict->pass ? std::cout : std::cerr) << verdict->message << "\n";
      return static_cast<int>(verdict->pass ? kExitOk : kExitNo);
    }
    return 0;
  });
}

}  // namespace

Action add_profile_command(CLI::App& app) {
  auto args = std::make_shared<ProfileArgs>();
  auto* cmd = app.add_subcommand("profile", "run N training steps and record memory: CSV log, summary, "
                                            "SVG timeline, memory_viz snapshot, PASS/FAIL against a threshold");
  add_run_options(*cmd, args->run);
  cmd->add_option("--steps", args->steps, "training steps to run (default 10)");
  cmd->add_option("--threshold", args->threshold,
                  "PASS (exit 0) when the peak is at or below this size, e.g. 22GiB; FAIL (exit 3) above. On the "
                  "CPU the peak is the counted tensors plus what the process holds outside the allocator");
  cmd->add_flag("--tensors-only", args->tensors_only,
                "on the CPU, judge the counted tensors alone (an emulated device), not the process's resident "
                "set with what it holds outside the allocator");
  cmd->add_option("--csv", args->csv,
                  "per-step log: timestamp,step,allocated_GB,reserved_GB,peak_GB (GB = 1e9 bytes); an ensemble adds "
                  "members,peak_per_member_GB,activations_per_member_GB, --threshold adds "
                  "judged_peak_GB,threshold_GB,result (PASS/FAIL per step)");
  cmd->add_option("--svg", args->svg, "timeline of the last step's allocated memory with its phases");
  args->snapshot_option =
      cmd->add_option("--snapshot", args->snapshot,
                      "record every allocation and free of the steps and write a memory snapshot (a pickle, "
                      "as torch.cuda.memory._dump_snapshot writes) for https://pytorch.org/memory_viz or "
                      "python -m torch.cuda._memory_viz trace_plot FILE -o FILE.html; CPU and CUDA");
  cmd->add_option("--snapshot-entries", args->snapshot_entries,
                  "events the snapshot keeps, the most recent (default 100000)")
      ->needs(args->snapshot_option);
  cmd->add_flag("--json", args->json, "machine-readable output");
  return [args]() { return run_profile(*args); };
}

}  // namespace wxtrain::cli
