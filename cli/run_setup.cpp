#include "cli/run_setup.h"

#include <iostream>

#include "autotune/batch_search.h"
#include "core/device.h"
#include "core/error.h"
#include "core/run_file_text.h"
#include "distributed/world.h"

namespace wxtrain::cli {

namespace {

// Opening validates every source (files, variables, grids). To train or forecast the data is opened
// as they read it and kept; otherwise only the headers are read, and only when the run file does not
// give the grid (estimate, tune-batch and profile build the model where the data lies: graphcast's mesh).
void open_data(RunSetup& setup, bool keep) {
  RunConfig& config = setup.config;
  if (keep) {
    setup.dataset = std::make_shared<data::Dataset>(config.data);
    data::take_grid(config, *setup.dataset);
  } else if (!config.data.sources.empty() && (config.data.lat == 0 || config.data.lon == 0)) {
    data::DatasetOptions headers_only;
    headers_only.preload_max_bytes = 0;
    data::take_grid(config, data::Dataset(config.data, headers_only));
  }
}

// train.batch_size = "auto": the micro-batch that trains within the memory budget on this run's device,
// measured beside the data the run holds. Afterwards batch_size is the batch and batch_auto is off.
void tune_auto_batch(RunConfig& config) {
  const auto& world = distributed::current_world();
  config.train.batch_size = autotune::tune_batch(config, resolve_device(config.train.device, world.local_rank));
  config.train.batch_auto = false;
  if (world.rank == 0)
    std::cerr << "train.batch_size = \"auto\": tuned micro-batch " << config.train.batch_size << " (margin "
              << static_cast<int>(config.memory.margin * 100) << "%)\n";
}

}  // namespace

void add_run_options(CLI::App& cmd, RunOptions& options) {
  cmd.add_option("-c,--config", options.config_path, "run file (TOML)")->required();
  cmd.add_option("--set", options.overrides,
                 "override a run-file value, e.g. --set train.batch_size=16 --set train.precision=bf16-mixed");
}

RunSetup setup_run(const RunOptions& options, const SetupRequest& request) {
  return setup_run({read_run_file(options.config_path), options.overrides}, options.config_path, request);
}

RunSetup setup_run(trainer::RunSource source, const std::string& source_name, const SetupRequest& request) {
  RunSetup setup;
  setup.config = parse_config(source.text, source_name, source.overrides);
  setup.source = std::move(source);
  // Rank 0 writes the folder's files, so it alone checks them (the others would race it); an error
  // there ends every rank (distributed::run_or_abort).
  if (request.run_folder && distributed::current_world().rank == 0)
    trainer::check_run_folder(setup.config, *request.run_folder);
  open_data(setup, request.open_data);
  setup.channels = setup.config.channels();
  if (request.tune_auto_batch && setup.config.train.batch_auto) tune_auto_batch(setup.config);
  return setup;
}

}  // namespace wxtrain::cli
