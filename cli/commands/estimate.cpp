#include <chrono>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/run_setup.h"
#include "cli/table.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/svg_plot.h"
#include "core/units.h"
#include "estimator/analytic.h"
#include "estimator/estimate.h"

namespace wxtrain::cli {

namespace {

struct EstimateArgs {
  RunOptions run;
  std::string gpu;
  std::string memory;
  std::string mode = "train";
  std::string svg;
  bool analytic = false;
  bool trace = false;
  bool json = false;
  int64_t batch = 0;
  int64_t world_size = 0;
  CLI::Option* batch_option = nullptr;       // given at all: then it must be 1 or more
  CLI::Option* world_size_option = nullptr;
};

nlohmann::json breakdown_json(const estimator::Breakdown& b) {
  return {{"batch", b.batch},           {"params_bytes", b.params},     {"grads_bytes", b.grads},
          {"optimizer_bytes", b.optimizer}, {"activations_bytes", b.activations},
          {"overhead_bytes", b.overhead}, {"total_bytes", b.total()}};
}

// Memory against batch size: the CPU and GPU totals with their overheads (the GPU's for `column_gpu`,
// named in the legend) and a dashed line at each GPU's capacity: the GPUs asked about, else the
// common ones (estimator::common_gpus).
void write_plot(const estimator::Estimate& e, const std::vector<estimator::GpuFit>& targets,
                const estimator::GpuSpec& column_gpu, const std::string& path) {
  PlotSpec plot;
  plot.title = "wxtrain estimate: " + e.config.model.name + " (" + to_string(e.config.train.precision) +
               (e.config.train.checkpointing || e.config.train.rollout_checkpointing
                    ? ", checkpointing " + describe_checkpointing(e.config.train)
                    : "") +
               ")";
  plot.x_label = "micro-batch size";
  plot.y_label = "memory per rank (GiB)";
  int64_t top = std::max<int64_t>(e.batch() * 2, 8);
  for (const auto& t : targets) top = std::max(top, std::min<int64_t>(t.max_batch + t.max_batch / 4, 4096));
  Series cpu{"CPU (with overhead)"}, gpu{"GPU (with the overhead of a " + column_gpu.label + ")"};
  gpu.color = "#d62728";
  for (int64_t b = 1; b <= top; b += std::max<int64_t>(1, top / 64)) {
    cpu.x.push_back(b);
    cpu.y.push_back(e.cpu_breakdown(b).total() / kGiB);
    gpu.x.push_back(b);
    gpu.y.push_back(e.breakdown(b, column_gpu).total() / kGiB);
  }
  plot.series = {cpu, gpu};
  const char* colors[] = {"#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                          "#bcbd22", "#17becf", "#1f77b4", "#ff7f0e"};
  for (size_t i = 0; i < targets.size(); ++i) {
    Series cap{targets[i].gpu.label, {1.0, static_cast<double>(top)},
               {targets[i].gpu.memory_bytes / kGiB, targets[i].gpu.memory_bytes / kGiB},
               colors[i % (sizeof colors / sizeof colors[0])], true};
    plot.series.push_back(cap);
  }
  write_file_atomically(path, render_svg(plot));
}

// Beside the central figure, the largest batch the estimate is sure of: the central total raised by
// the error band measured on a GPU for this model's family (estimator/error_band.h).
void print_sure_batches(const estimator::Estimate& e, const std::vector<estimator::GpuFit>& fits) {
  char band[96];
  std::snprintf(band, sizeof band, "+%.1f%% / -%.1f%%", 100 * e.band.under, 100 * e.band.over);
  std::cout << "\nerror band " << band << " (a GPU measured up to that far above / below this estimate): "
            << e.band.family << ", " << e.band.basis << "\n";
  // An ensemble also asks how many members per sample the estimate is sure of at the batch.
  const bool members = e.config.train.ensemble() && e.options.mode == estimator::Mode::kTrain;
  std::vector<std::string> header{"GPU", "max batch", "sure of"};
  if (members) header.insert(header.end(), {"max members", "sure of"});
  std::vector<bool> right(header.size(), true);
  right[0] = false;
  Table s(header, right);
  for (const auto& f : fits) {
    std::vector<std::string> row{f.gpu.label, std::to_string(f.max_batch), std::to_string(f.sure_max_batch)};
    if (members) row.insert(row.end(), {std::to_string(f.max_members), std::to_string(f.sure_max_members)});
    s.add(row);
  }
  std::cout << s.str();
}

// "M ensemble members per sample (B x M rows per micro-batch)"; in ensemble groups of G ranks
// (each rank rolls out M / G members of every sample, and the loss takes all M gathered) "M
// ensemble members per sample, M/G = m members per rank in groups of G ranks (B x m rows per
// micro-batch per rank)": the estimate is of one rank of the group.
std::string ensemble_layout_text(const RunConfig& config, int64_t batch) {
  const int64_t M = config.train.ensemble_members, G = config.distributed.ensemble_group;
  const int64_t m = estimator::members_per_sample(config);
  std::string text = std::to_string(M) + " ensemble members per sample";
  if (G <= 1) return text + " (" + std::to_string(batch * M) + " rows per micro-batch)";
  return text + ", " + std::to_string(M) + "/" + std::to_string(G) + " = " + std::to_string(m) +
         " members per rank in groups of " + std::to_string(G) + " ranks (" + std::to_string(batch * m) +
         " rows per micro-batch per rank)";
}

// GPUs per model, for the GPUs where one rank does not hold the run: the smallest
// distributed.model_parallel whose per-rank estimate fits (estimator::model_parallel_fit).
std::vector<estimator::ModelParallelFit> gpus_per_model(const estimator::Estimate& e,
                                                        const std::vector<estimator::GpuFit>& fits) {
  std::vector<estimator::ModelParallelFit> out;
  for (const auto& f : fits)
    if (!f.fits) out.push_back(estimator::model_parallel_fit(e, f.gpu));
  return out;
}

std::string model_parallel_caveat(const estimator::Estimate& e) {
  const RunConfig& config = e.config;
  // The formulas that describe one rank (the gnn on a rectangle, GraphCast, AIFS) are asked for each P.
  if (estimator::per_rank_formulas(e))
    return "the formulas of the largest rank of P (its band, the edges it receives, its halos): activations per "
           "rank, whole model states";
  if (e.activation_ranks > 1)
    return "from rank 0 of model_parallel = " + std::to_string(e.activation_ranks) +
           " (halos included there): activations x " + std::to_string(e.activation_ranks) +
           " / P per rank, whole model states";
  return estimator::model_can_shard(config)
             ? "activations / P per rank, whole model states; the halo nodes are not counted"
             : "a projection for a model not yet shardable: model.name = \"" + config.model.name +
                   "\" cannot shard its grid over model-parallel ranks (only the gnn, graphcast and aifs can); "
                   "activations / P per rank, whole model states";
}

int run_estimate(const EstimateArgs& args) {
  const RunConfig config = setup_run(args.run).config;
  const auto shape = models::model_shape(config);
  estimator::EstimateOptions options;
  if (args.mode != "train" && args.mode != "inference")
    throw ConfigError("--mode " + args.mode + ": expected train or inference");
  options.mode = args.mode == "train" ? estimator::Mode::kTrain : estimator::Mode::kInference;
  options.analytic = args.analytic;
  options.force_trace = args.trace;
  if (args.analytic && args.trace) throw ConfigError("--analytic and --trace: choose one");
  // Numbers on the command line are held to the rules of the run file's.
  if (args.batch_option->count() && args.batch < 1)
    throw ConfigError("--batch " + std::to_string(args.batch) + " is out of range: expected a micro-batch of 1 or more");
  if (args.world_size_option->count() && args.world_size < 1)
    throw ConfigError("--world-size " + std::to_string(args.world_size) + " is out of range: expected 1 or more ranks");
  options.world_size = args.world_size > 0 ? args.world_size
                       : config.distributed.world_size > 0 ? config.distributed.world_size : 1;
  if (args.batch_option->count()) options.batch = args.batch;

  std::vector<estimator::GpuSpec> targets;
  if (!args.gpu.empty()) {
    auto g = estimator::find_gpu(args.gpu);
    if (!g) throw ConfigError("--gpu " + args.gpu + ": unknown GPU; known: " + estimator::gpu_names() +
                              " (or give --memory 24GiB)");
    targets.push_back(*g);
  }
  if (!args.memory.empty()) {
    auto bytes = parse_bytes(args.memory);
    if (!bytes || *bytes <= 0) throw ConfigError("--memory " + args.memory + ": expected a size such as 24GiB or 80GB");
    targets.push_back({"custom", "custom " + args.memory, *bytes});
  }

  const auto t0 = std::chrono::steady_clock::now();
  estimator::Estimate e = estimator::estimate(config, shape, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::vector<estimator::GpuFit> fits;
  if (targets.empty()) fits = e.fits();
  else for (const auto& t : targets) fits.push_back(e.fit(t));
  bool any_fits = false;
  for (const auto& f : fits) any_fits = any_fits || f.fits;
  const std::vector<estimator::ModelParallelFit> per_model = gpus_per_model(e, fits);

  const int64_t batch = e.batch();
  const bool ensemble = config.train.ensemble() && options.mode == estimator::Mode::kTrain;
  const auto cpu = e.cpu_breakdown(batch);
  const estimator::CpuOverhead cpu_overhead = e.cpu_overhead();
  // The table's GPU column prices the overhead of one GPU: the first asked about, else the catalog's
  // last (a large CUDA board); its header names it.
  const estimator::GpuSpec column_gpu = targets.empty() ? estimator::gpu_catalog().back() : targets[0];
  const auto gpu = e.breakdown(batch, column_gpu);
  if (!args.svg.empty()) {
    std::vector<estimator::GpuFit> drawn = fits;
    if (targets.empty()) {
      drawn.clear();
      for (const auto& g : estimator::common_gpus()) drawn.push_back(e.fit(g));
    }
    write_plot(e, drawn, column_gpu, args.svg);
  }

  if (args.json) {
    nlohmann::json j;
    j["config"] = config.path;
    j["model"] = config.model.name;
    j["parameters"] = e.states.num_params;
    j["mode"] = args.mode;
    j["method"] = e.method;
    j["precision"] = to_string(config.train.precision);
    j["checkpointing"] = config.train.checkpointing;
    j["rollout_checkpointing"] = config.train.rollout_checkpointing;
    j["batch"] = batch;
    j["accumulation"] = config.train.accumulation;
    j["rollout_steps"] = config.max_rollout();
    j["zero_stage"] = config.distributed.zero_stage;
    j["world_size"] = options.world_size;
    j["cpu"] = breakdown_json(cpu);
    j["gpu"] = breakdown_json(gpu);  // the table's GPU column: with the overhead of gpu_column
    j["gpu_column"] = column_gpu.name;
    j["activation_bytes_per_sample"] = e.activations.per_sample();
    // The CPU column's overhead (cpu.overhead_bytes at the batch): resident bytes outside the
    // counting allocator, a fixed part measured in this process and a per-sample part.
    j["cpu_overhead"] = {{"process_bytes", cpu_overhead.process},
                         {"per_sample_bytes", cpu_overhead.per_sample},
                         {"per_sample_share", estimator::kUnseenPerSampleShare}};
    for (const auto& f : fits)
      j["gpus"].push_back({{"name", f.gpu.name}, {"label", f.gpu.label}, {"memory_bytes", f.gpu.memory_bytes},
                           {"fits", f.fits}, {"max_batch", f.max_batch}, {"at_batch", breakdown_json(f.at_batch)}});
    // The measured error band (estimator/error_band.h) and, per GPU, the largest batch the estimate
    // is sure of with it.
    j["error_band"] = {{"family", e.band.family}, {"under", e.band.under}, {"over", e.band.over},
                       {"measured", e.band.measured}, {"basis", e.band.basis}};
    for (size_t i = 0; i < fits.size(); ++i) j["gpus"][i]["sure_max_batch"] = fits[i].sure_max_batch;
    if (ensemble) {
      // How many members per sample (per rank) fit at the batch, beside the batch the members allow.
      j["ensemble_members"] = config.train.ensemble_members;
      // distributed.ensemble_group ranks share the members of a sample: this rank rolls out M / G.
      j["ensemble_group"] = config.distributed.ensemble_group;
      j["members_per_rank"] = estimator::members_per_sample(config);
      j["activation_bytes_per_member"] = e.member_bytes_per_sample();
      for (size_t i = 0; i < fits.size(); ++i) {
        j["gpus"][i]["max_members"] = fits[i].max_members;
        j["gpus"][i]["sure_max_members"] = fits[i].sure_max_members;
      }
    }
    // Where one GPU does not hold a rank: the ranks per model (distributed.model_parallel) that would.
    j["model_can_shard"] = estimator::model_can_shard(config);
    j["gpus_per_model"] = nlohmann::json::array();
    for (const auto& m : per_model)
      j["gpus_per_model"].push_back({{"name", m.gpu.name},
                                     {"ranks", m.ranks},
                                     {"projection", !estimator::model_can_shard(config)},
                                     {"per_rank", breakdown_json(m.per_rank)}});
    j["seconds"] = seconds;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "wxtrain estimate: " << config.path << "\n"
              << "model      " << config.model.name << ", " << e.states.num_params << " parameters, grid "
              << shape.lat << " x " << shape.lon << ", " << shape.in_channels << " -> " << shape.out_channels
              << " channels\n"
              << "run        " << args.mode << ", " << to_string(config.train.precision) << ", checkpointing "
              << describe_checkpointing(config.train) << ", micro-batch " << batch << " x accumulation "
              << config.train.accumulation << ", rollout " << config.max_rollout() << ", ZeRO-"
              << config.distributed.zero_stage << " over " << options.world_size << " rank(s)"
              << (ensemble ? ", " + ensemble_layout_text(config, batch) : std::string())
              << "\n"
              << "method     " << e.method << ", " << std::fixed;
    std::printf("%.2f s\n\n", seconds);
    std::cout.flush();
    Table t({"memory per rank", "CPU", "GPU: " + column_gpu.label}, {false, true, true});
    t.add({"parameters", format_bytes(cpu.params), format_bytes(gpu.params)});
    t.add({"gradients", format_bytes(cpu.grads), format_bytes(gpu.grads)});
    t.add({"optimizer state", format_bytes(cpu.optimizer), format_bytes(gpu.optimizer)});
    t.add({"activations", format_bytes(cpu.activations), format_bytes(gpu.activations)});
    t.add({"CPU overhead: process", format_bytes(cpu_overhead.process), "-"});
    t.add({"CPU overhead: per sample x " + std::to_string(batch), format_bytes(cpu_overhead.per_sample * batch), "-"});
    t.add({"GPU overhead", "-", format_bytes(gpu.overhead)});
    t.add({"total", format_bytes(cpu.total()), format_bytes(gpu.total())});
    std::cout << t.str() << "\n";
    std::vector<std::string> header{"GPU", "memory GiB", "at batch " + std::to_string(batch), "fits", "max batch"};
    // An ensemble: the batch the configured members allow, and the members the configured batch allows.
    if (ensemble) {
      header[2] = "at batch " + std::to_string(batch) + " x " + std::to_string(config.train.ensemble_members) + " members";
      header[4] = "max batch (" + std::to_string(config.train.ensemble_members) + " members)";
      header.push_back("max members (batch " + std::to_string(batch) +
                       (config.distributed.ensemble_group > 1
                            ? ", over " + std::to_string(config.distributed.ensemble_group) + " ranks"
                            : std::string()) +
                       ")");
    }
    std::vector<bool> right{false, true, true, false, true};
    if (ensemble) right.push_back(true);
    Table g(header, right);
    for (const auto& f : fits) {
      std::vector<std::string> row{f.gpu.label, format_gib(f.gpu.memory_bytes, 2), format_gib(f.at_batch.total(), 2),
                                   f.fits ? "yes" : "no", std::to_string(f.max_batch)};
      if (ensemble) row.push_back(std::to_string(f.max_members));
      g.add(row);
    }
    std::cout << g.str();
    print_sure_batches(e, fits);
    if (!per_model.empty()) {
      std::cout << "\nGPUs per model where one does not hold a rank (distributed.model_parallel; "
                << model_parallel_caveat(e) << "):\n";
      Table m({"GPU", "GPUs per model", "per rank at batch " + std::to_string(batch) + " GiB"}, {false, true, true});
      for (const auto& f : per_model)
        m.add({f.gpu.label, f.ranks > 0 ? std::to_string(f.ranks) : "more than " + std::to_string(estimator::kMaxModelParallel),
               format_gib(f.per_rank.total(), 2)});
      std::cout << m.str();
    }
    if (!args.svg.empty()) std::cout << "\nplot: " << args.svg << "\n";
  }
  if (!any_fits) {
    std::cerr << "error: at micro-batch " << batch << " this run needs " << format_gib(gpu.total(), 2)
              << " GiB per rank and fits " << (targets.empty() ? "no GPU in the catalog" : "none of the given targets")
              << "; try " << estimator::ways_to_save_memory(config, batch, options.mode) << "\n";
    return kExitNo;  // an answer, not a failure: the run was estimated
  }
  return kExitOk;
}

}  // namespace

Action add_estimate_command(CLI::App& app) {
  auto args = std::make_shared<EstimateArgs>();
  auto* cmd = app.add_subcommand("estimate", "predict a run's memory and the GPUs (and batch sizes) that fit it");
  add_run_options(*cmd, args->run);
  cmd->add_option("--gpu", args->gpu, "one GPU from the catalog (T4, A100-80, H100, ...)");
  cmd->add_option("--memory", args->memory, "a device of this size instead of the catalog, e.g. 24GiB");
  cmd->add_option("--mode", args->mode, "train (default) or inference (forecast only)");
  args->batch_option = cmd->add_option("--batch", args->batch, "micro-batch to report (default train.batch_size)");
  args->world_size_option =
      cmd->add_option("--world-size", args->world_size, "ranks for ZeRO sharding (default distributed.world_size or 1)");
  cmd->add_flag("--analytic", args->analytic, "formulas instead of tracing (for models too large to trace here)");
  cmd->add_flag("--trace", args->trace, "trace the real step even when it is large (slow)");
  cmd->add_flag("--json", args->json, "machine-readable output");
  cmd->add_option("--svg", args->svg,
                  "write a plot of memory against batch size to this SVG file, with the capacity of the GPUs "
                  "given (--gpu, --memory) or of the common ones");
  return [args]() { return run_estimate(*args); };
}

}  // namespace wxtrain::cli
