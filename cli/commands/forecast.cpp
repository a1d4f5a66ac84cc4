#include <iostream>

#include "cli/commands.h"
#include "core/autocast.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/forecast_writer.h"
#include "data/normalization.h"
#include "data/samples.h"
#include "trainer/checkpoint_io.h"
#include "trainer/training_step.h"

namespace wxtrain::cli {

namespace {

struct ForecastArgs {
  std::string checkpoint;
  std::string output;
  int64_t steps = 4;
  int64_t start = -1;
  std::string precision = "fp32";
};

int run_forecast(const ForecastArgs& args) {
  trainer::Checkpoint ckpt = trainer::load_checkpoint(args.checkpoint);
  RunConfig config = parse_config(ckpt.config_text, args.checkpoint + " (embedded run file)", ckpt.overrides);
  if (args.steps <= 0) throw ConfigError("--steps " + std::to_string(args.steps) + ": expected a positive number of steps");
  if (args.precision != "fp32" && args.precision != "bf16")
    throw ConfigError("--precision " + args.precision + ": expected fp32 or bf16 (forecasts run on the CPU)");
  auto dataset = std::make_shared<data::Dataset>(config.data);
  const int64_t history = config.data.history;
  const int64_t start = args.start >= 0 ? args.start : dataset->num_times() - 1;
  if (start < history - 1 || start >= dataset->num_times())
    throw ConfigError("--start " + std::to_string(start) + ": expected a time index from " + std::to_string(history - 1) +
                      " to " + std::to_string(dataset->num_times() - 1) + " (the model needs " +
                      std::to_string(history) + " states up to it)");
  config.data.lat = dataset->num_lat();
  config.data.lon = dataset->num_lon();
  data::Normalization norm = data::Normalization::from_map(ckpt.normalization);

  torch::NoGradGuard no_grad;
  auto model = models::build_model(config.model, models::model_shape(config));
  trainer::load_weights(*model, ckpt.model, /*strict=*/true, args.checkpoint);
  model->eval();

  std::vector<torch::Tensor> window;
  for (int64_t t = start - history + 1; t <= start; ++t)
    window.push_back(norm.normalize(dataset->state(t)));  // fill values become 0 (the mean)
  torch::Tensor input = torch::cat(window, 0).unsqueeze(0);
  torch::Tensor states;
  {
    AutocastGuard guard(torch::kCPU, torch::kBFloat16, args.precision == "bf16");
    states = trainer::rollout(*model, input, args.steps, norm.num_variables()).to(torch::kFloat32);
  }
  torch::Tensor physical = norm.denormalize(states.squeeze(0));  // [steps, V, lat, lon]

  data::write_forecast(args.output, physical, data::ForecastCoordinates::after(*dataset, start, args.steps));
  std::cout << "forecast: " << args.steps << " steps of " << norm.num_variables() << " channels from "
            << dataset->time_axis().label(start) << " (time index " << start << ") written to " << args.output << "\n";
  return 0;
}

}  // namespace

Action add_forecast_command(CLI::App& app) {
  auto args = std::make_shared<ForecastArgs>();
  auto* cmd = app.add_subcommand("forecast", "roll a trained checkpoint forward and write the forecast as NetCDF or Zarr");
  cmd->add_option("--checkpoint", args->checkpoint, "checkpoint written by wxtrain train")->required();
  cmd->add_option("-o,--output", args->output, "output: a NetCDF file, or a Zarr v2 store for a path ending .zarr")->required();
  cmd->add_option("--steps", args->steps, "forecast steps (default 4)");
  cmd->add_option("--start", args->start, "time index of the newest initial state (default: the last)");
  cmd->add_option("--precision", args->precision, "fp32 (default) or bf16 (autocast on the CPU)");
  return [args]() { return run_forecast(*args); };
}

}  // namespace wxtrain::cli
