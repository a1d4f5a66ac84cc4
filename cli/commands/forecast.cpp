#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "cli/commands.h"
#include "cli/run_setup.h"
#include "core/autocast.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/forecast_writer.h"
#include "data/normalization.h"
#include "data/samples.h"
#include "trainer/checkpoint_io.h"
#include "trainer/trainer.h"
#include "trainer/training_step.h"

namespace wxtrain::cli {

namespace {

struct ForecastArgs {
  std::string checkpoint;
  std::string output;
  int64_t steps = 4;
  std::string start;  // a time index or a date; "" = the last state
  std::string precision = "fp32";
  // The run file a reference checkpoint (a .mdlus, a state_dict) is forecast with: it carries none.
  std::string config;
  std::vector<std::string> overrides;
};

// --start as a time index ("12") or a date of the data ("2020-01-03T18:00"); the newest initial
// state, with history - 1 states before it, one time step apart.
int64_t start_index(const data::Dataset& dataset, const std::string& text, int64_t history) {
  const data::TimeAxis& axis = dataset.time_axis();
  int64_t start = dataset.num_times() - 1;
  if (!text.empty()) {
    if (text.find('-') != std::string::npos && axis.has_dates) {
      int64_t seconds = 0;
      try {
        seconds = data::to_seconds(data::parse_date(text, axis.calendar), axis.calendar);
      } catch (const DataError& error) {
        throw ConfigError(std::string("--start: ") + error.what());
      }
      const auto found = std::find(axis.seconds.begin(), axis.seconds.end(), seconds);
      if (found == axis.seconds.end()) {
        throw ConfigError("--start " + text + ": the data has no state at that time (it runs from " + axis.label(0) +
                          " to " + axis.label(axis.size() - 1) + ", every " + data::format_duration(axis.step_seconds) + ")");
      }
      start = found - axis.seconds.begin();
    } else {
      char* end = nullptr;
      start = std::strtoll(text.c_str(), &end, 10);
      if (end == text.c_str() || *end != '\0') {
        throw ConfigError("--start " + text + ": expected a time index" +
                          std::string(axis.has_dates ? " or a date such as " + axis.label(axis.size() - 1) : ""));
      }
    }
  }
  if (start < history - 1 || start >= dataset.num_times())
    throw ConfigError("--start " + (text.empty() ? std::to_string(start) : text) + ": expected a time index from " +
                      std::to_string(history - 1) + " to " + std::to_string(dataset.num_times() - 1) +
                      " (the model needs " + std::to_string(history) + " states up to it)");
  if (axis.has_dates) {
    for (int64_t t = start - history + 1; t < start; ++t) {
      if (axis.seconds[t + 1] - axis.seconds[t] != axis.step_seconds) {
        throw ConfigError("--start " + axis.label(start) + ": the " + std::to_string(history) + " initial states must be " +
                          data::format_duration(axis.step_seconds) + " apart, but the data jumps from " + axis.label(t) +
                          " to " + axis.label(t + 1));
      }
    }
  }
  return start;
}

int run_forecast(const ForecastArgs& args) {
  if (args.steps <= 0) throw ConfigError("--steps " + std::to_string(args.steps) + ": expected a positive number of steps");
  if (args.precision != "fp32" && args.precision != "bf16")
    throw ConfigError("--precision " + args.precision + ": expected fp32 or bf16 (forecasts run on the CPU)");
  SetupRequest request;
  request.open_data = true;
  trainer::Checkpoint ckpt;
  RunSetup run;
  data::Normalization norm;
  if (trainer::is_reference_checkpoint(args.checkpoint)) {
    // A .mdlus or a state_dict has weights and an architecture, but no data: the run file says
    // which data, channels and grid it forecasts on.
    if (args.config.empty())
      throw ConfigError("--checkpoint " + args.checkpoint + " is a reference implementation's checkpoint, which carries "
                        "no run file: give --config run.toml with the data to forecast from (wxtrain import " +
                        args.checkpoint + " writes its [model] and [train] lines)");
    run = setup_run(RunOptions{args.config, args.overrides}, request);
    std::string report;
    ckpt = trainer::load_reference_checkpoint(args.checkpoint, run.config, &report);
    std::cerr << report;
    // The statistics the weights were trained with where the file brings them; the data's own
    // (all its times) for the channels it does not.
    const data::Normalization data_statistics = data::Normalization::compute(*run.dataset, 0, run.dataset->num_times());
    norm = ckpt.normalization.empty()
               ? data_statistics
               : trainer::keep_pretrained_statistics(data_statistics, data::Normalization::from_map(ckpt.normalization));
    if (ckpt.normalization.empty())
      std::cerr << "  no statistics beside the checkpoint: normalising with the data's own, over all its times\n";
  } else {
    if (!args.config.empty())
      throw ConfigError("--config " + args.config + ": a wxtrain checkpoint forecasts with the run file it was trained "
                        "with; --config is for a reference checkpoint (.mdlus, state_dict)");
    ckpt = trainer::load_checkpoint(args.checkpoint);
    // The run the checkpoint was trained as, on the data as it lies now (graphcast's graph is built on its grid).
    run = setup_run({ckpt.config_text, ckpt.overrides}, args.checkpoint + " (embedded run file)", request);
    norm = data::Normalization::from_map(ckpt.normalization);
  }
  const RunConfig& config = run.config;
  const std::shared_ptr<data::Dataset>& dataset = run.dataset;
  const int64_t history = config.data.history;
  const int64_t start = start_index(*dataset, args.start, history);
  const data::SampleMaker maker(*dataset, norm, {history, 1});
  const ChannelLayout& layout = run.channels;
  const data::TimeAxis& axis = dataset->time_axis();

  // A step's inputs that only the archive can give: file forcings at its valid time, and for a
  // limited-area run the true state on the boundary frame. Beyond the archive they do not exist.
  const int64_t last_needed = start + args.steps;
  const bool needs_archive = !layout.forcing.empty() && layout.forcing.size() > dataset->computed_forcing_names().size();
  if ((needs_archive || config.data.boundary > 0) && last_needed >= dataset->num_times()) {
    throw ConfigError("--steps " + std::to_string(args.steps) + " from " + axis.label(start) + ": " +
                      (config.data.boundary > 0 ? "the boundary frame (data.boundary)" : "the forcings read from files") +
                      " need the archive's states up to the last step, but it ends at " + axis.label(axis.size() - 1) +
                      ", " + std::to_string(dataset->num_times() - 1 - start) +
                      " step(s) after the start: start earlier (--start) or forecast fewer steps");
  }

  torch::NoGradGuard no_grad;
  auto model = models::build_model(config.model, models::model_shape(config));
  trainer::load_weights(*model, ckpt.model, /*strict=*/true, args.checkpoint);
  model->eval();

  std::vector<int64_t> outputs = dataset->channel_indices("prognostic");
  for (int64_t i : dataset->channel_indices("diagnostic")) outputs.push_back(i);
  const torch::Tensor prognostic = torch::tensor(dataset->channel_indices("prognostic"), torch::kInt64);
  const torch::Tensor output_index = torch::tensor(outputs, torch::kInt64);
  const data::Normalization prognostic_norm = norm.subset(layout.prognostic_names());
  const data::Normalization output_norm = norm.subset(layout.output_names());

  std::vector<torch::Tensor> window;
  for (int64_t t = start - history + 1; t <= start; ++t)  // fill values become 0 (the mean)
    window.push_back(prognostic_norm.normalize(dataset->state(t).index_select(0, prognostic)));
  const torch::Tensor input = torch::cat(window, 0).unsqueeze(0);
  // Forcings at each step's own valid time: computed for any date, from files within the archive.
  std::vector<torch::Tensor> forcings, truth;
  for (int64_t k = 1; k <= args.steps; ++k) {
    const bool in_archive = start + k < dataset->num_times();
    const torch::Tensor state = in_archive ? dataset->state(start + k) : torch::Tensor();
    const int64_t seconds = axis.has_dates ? axis.seconds[static_cast<size_t>(start)] + k * axis.step_seconds : 0;
    forcings.push_back(maker.step_forcings(seconds, state));
    if (config.data.boundary > 0) truth.push_back(output_norm.normalize(state.index_select(0, output_index)));
  }
  trainer::RolloutSetup setup;
  setup.prognostic = static_cast<int64_t>(layout.prognostic.size());
  setup.diagnostic = static_cast<int64_t>(layout.diagnostic.size());
  setup.predicts_state = config.train.prediction == "state";
  if (config.train.residual_normalization && prognostic_norm.diff_std().defined())
    setup.residual_scale = trainer::residual_scale_from(prognostic_norm.diff_std(), prognostic_norm.std());
  if (config.data.boundary > 0) setup.boundary = trainer::boundary_frame(config.data.lat, config.data.lon, config.data.boundary);
  torch::Tensor states;
  {
    AutocastGuard guard(torch::kCPU, torch::kBFloat16, args.precision == "bf16");
    states = trainer::rollout(*model, input, torch::stack(forcings).unsqueeze(0), args.steps, setup,
                              truth.empty() ? torch::Tensor() : torch::stack(truth).unsqueeze(0))
                 .to(torch::kFloat32);
  }
  const torch::Tensor physical = output_norm.denormalize(states.squeeze(0));  // [steps, P + D, lat, lon]

  // The predicted channels only: forcings and static fields are inputs, not forecasts.
  data::ForecastCoordinates coordinates = data::ForecastCoordinates::after(*dataset, start, args.steps);
  std::vector<data::VariableInfo> predicted;
  for (int64_t i : outputs) predicted.push_back(coordinates.variables[static_cast<size_t>(i)]);
  coordinates.variables = predicted;
  data::write_forecast(args.output, physical, coordinates);
  std::cout << "forecast: " << args.steps << " steps of " << outputs.size() << " channels from " << axis.label(start)
            << " (time index " << start << ") written to " << args.output << "\n";
  return 0;
}

}  // namespace

Action add_forecast_command(CLI::App& app) {
  auto args = std::make_shared<ForecastArgs>();
  auto* cmd = app.add_subcommand("forecast", "roll a trained checkpoint forward and write the forecast as NetCDF or Zarr");
  cmd->add_option("--checkpoint", args->checkpoint,
                  "checkpoint written by wxtrain train, or a reference implementation's (.mdlus, state_dict) with --config")
      ->required();
  cmd->add_option("-o,--output", args->output, "output: a NetCDF file, or a Zarr v2 store for a path ending .zarr")->required();
  cmd->add_option("--steps", args->steps, "forecast steps (default 4)");
  cmd->add_option("--start", args->start, "the newest initial state: a time index or a date of the data, e.g. 2020-01-03T18:00 (default: the last)");
  cmd->add_option("--precision", args->precision, "fp32 (default) or bf16 (autocast on the CPU)");
  cmd->add_option("-c,--config", args->config, "run file for a reference checkpoint: its data, channels and grid");
  cmd->add_option("--set", args->overrides, "override a value of --config's run file");
  return [args]() { return run_forecast(*args); };
}

}  // namespace wxtrain::cli
