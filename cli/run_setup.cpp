#include "cli/run_setup.h"

#include <iostream>

#include <toml++/toml.h>

#include "autotune/batch_search.h"
#include "core/device.h"
#include "core/error.h"
#include "core/run_file_text.h"
#include "data/samples.h"
#include "data/time/cf_time.h"
#include "distributed/world.h"

namespace wxtrain::cli {

namespace {

// The training samples each rank holds: the windows of the training split (as trainer::train cuts
// them) shared by the ranks, the remainder dropped (data/loader.h).
int64_t samples_per_rank(const RunConfig& config, const data::Dataset& dataset) {
  const data::TimeSplit split(dataset.time_axis(), config.data, data::SampleWindow{config.data.history, config.max_rollout()});
  return static_cast<int64_t>(split.sample_times(data::Split::kTrain).size()) / distributed::current_world().size;
}

// Opening validates every source (files, variables, grids). To train or forecast the data is opened
// as they read it and kept; otherwise only the headers are read, and only when the run file does not
// give the grid (estimate, tune-batch and profile build the model where the data lies: graphcast's
// mesh) or the training samples must be counted (tune-batch, "auto").
void open_data(RunSetup& setup, const SetupRequest& request) {
  RunConfig& config = setup.config;
  const bool count = !config.data.sources.empty() &&
                     (request.count_samples || (request.tune_auto_batch && config.train.batch_auto));
  if (request.open_data) {
    setup.dataset = std::make_shared<data::Dataset>(config.data);
    data::take_grid(config, *setup.dataset);
    if (count) setup.samples_per_rank = samples_per_rank(config, *setup.dataset);
  } else if (!config.data.sources.empty() && (count || config.data.lat == 0 || config.data.lon == 0)) {
    data::DatasetOptions headers_only;
    headers_only.preload_max_bytes = 0;
    const data::Dataset dataset(config.data, headers_only);
    data::take_grid(config, dataset);
    if (count) setup.samples_per_rank = samples_per_rank(config, dataset);
  }
  // No files, a named grid (data.grid = "n320"): its cells are generated, so that a model placed on
  // the sphere (aifs's graph) is built where the preset's data would lie.
  if (config.data.sources.empty()) data::take_named_grid(config);
}

// train.batch_size = "auto": the micro-batch that trains within the memory budget on this run's device,
// measured beside the data the run holds, and never more than a rank's share of the training split.
// Afterwards batch_size is the batch and batch_auto is off.
void tune_auto_batch(RunConfig& config, int64_t samples_per_rank) {
  const auto& world = distributed::current_world();
  autotune::TuneOptions options;
  options.suggestions = false;
  options.samples_per_rank = samples_per_rank;
  const autotune::TuneReport report =
      autotune::tune_batch_report(config, resolve_device(config.train.device, world.local_rank), nullptr, options);
  config.train.batch_size = report.batch;
  config.train.batch_auto = false;
  if (world.rank == 0) {
    std::cerr << "train.batch_size = \"auto\": tuned micro-batch " << config.train.batch_size << " (margin "
              << static_cast<int>(config.memory.margin * 100) << "%)\n";
    if (report.capped_by_data()) std::cerr << autotune::describe_data_cap(report) << "\n";
  }
}

// "file:line" of a key in the run file's text, "command line (--set)" when --set gave it.
std::string where_in_run_file(const trainer::RunSource& source, const std::string& source_name, const std::string& key) {
  for (const auto& o : source.overrides)
    if (o.rfind(key + "=", 0) == 0) return "command line (--set)";
  try {
    const toml::table root = toml::parse(source.text, source_name);
    const toml::node* node = root.at_path(key).node();
    if (node && node->source().begin.line > 0) return source_name + ":" + std::to_string(node->source().begin.line);
  } catch (const toml::parse_error&) {
  }
  return source_name;
}

// The run file's durations and dates, read before any data is opened: one that cannot be read is
// the run file's error (exit 2, with its line), not the data's. A calendar unit ("1mo") and whether
// a date exists in the data's calendar are left to the data (data/dataset.cpp), which knows both.
void check_time_values(const RunConfig& config, const trainer::RunSource& source, const std::string& source_name) {
  const DataConfig& d = config.data;
  auto fail = [&](const std::string& key, const std::string& value, const std::string& why) {
    throw ConfigError(where_in_run_file(source, source_name, key) + ": " + key + " = \"" + value + "\": " + why);
  };
  if (!d.time_step.empty()) {
    // parse_time_step knows calendar months ("1mo", "1y") as well as fixed durations.
    data::TimeStep step;
    try {
      step = data::parse_time_step(d.time_step);
    } catch (const DataError& e) {
      fail("data.time_step", d.time_step, e.what());
    }
    if (step.seconds <= 0 && step.months <= 0) fail("data.time_step", d.time_step, "must be a positive duration, e.g. \"6h\"");
  }
  auto check_date = [&](const std::string& key, const std::string& text) {
    // A date of any CF calendar passes here ("2000-02-30" is one of the 360_day calendar's).
    std::string why;
    for (data::Calendar calendar : {data::Calendar::kStandard, data::Calendar::k360Day, data::Calendar::kAllLeap}) {
      try {
        data::parse_date(text, calendar);
        return;
      } catch (const DataError& e) {
        if (why.empty()) why = e.what();
      }
    }
    fail(key, text, why);
  };
  if (!d.time_origin.empty()) check_date("data.time_origin", d.time_origin);
  for (const auto& date : d.train_period) check_date("data.train_period", date);
  for (const auto& date : d.val_period) check_date("data.val_period", date);
}

// The rest of the setup for a parsed run file, `source` as the run records it.
RunSetup settle(RunConfig config, trainer::RunSource source, const std::string& source_name,
              const SetupRequest& request) {
  RunSetup setup;
  setup.config = std::move(config);
  setup.source = std::move(source);
  check_time_values(setup.config, setup.source, source_name);
  // Rank 0 writes the folder's files, so it alone checks them (the others would race it); an error
  // there ends every rank (distributed::run_or_abort).
  if (request.run_folder && distributed::current_world().rank == 0)
    trainer::check_run_folder(setup.config, *request.run_folder);
  open_data(setup, request);
  setup.channels = setup.config.channels();
  if (request.tune_auto_batch && setup.config.train.batch_auto) tune_auto_batch(setup.config, setup.samples_per_rank);
  return setup;
}

}  // namespace

void add_run_options(CLI::App& cmd, RunOptions& options) {
  cmd.add_option("-c,--config", options.config_path, "run file (TOML)")->required();
  cmd.add_option("--set", options.overrides,
                 "override a run-file value, e.g. --set train.batch_size=16 --set train.precision=bf16-mixed");
}

RunSetup setup_run(const RunOptions& options, const SetupRequest& request) {
  const std::string folder = run_file_folder(options.config_path);
  const std::string text = read_run_file(options.config_path);
  // Read as written (errors name the run file's lines), then recorded with absolute paths: the
  // checkpoint and run.toml then read the same files from any directory.
  RunConfig config = parse_config(text, options.config_path, options.overrides, folder);
  return settle(std::move(config),
                {absolute_paths_in_text(text, folder), absolute_paths_in_overrides(options.overrides)},
                options.config_path, request);
}

RunSetup setup_run(trainer::RunSource source, const std::string& source_name, const SetupRequest& request) {
  RunConfig config = parse_config(source.text, source_name, source.overrides);
  return settle(std::move(config), std::move(source), source_name, request);
}

}  // namespace wxtrain::cli
