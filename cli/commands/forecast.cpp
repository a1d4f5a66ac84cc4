#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "cli/commands.h"
#include "cli/run_setup.h"
#include "core/autocast.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/forecast_writer.h"
#include "data/normalization.h"
#include "data/readers/reader.h"
#include "data/samples.h"
#include "trainer/checkpoint_io.h"
#include "trainer/reference_init.h"
#include "trainer/trainer.h"
#include "trainer/training_step.h"

namespace wxtrain::cli {

namespace {

struct ForecastArgs {
  std::string checkpoint;
  std::string output;
  int64_t steps = 4;
  std::string start;    // a time index or a date; "" = the last state
  std::string initial;  // a file with the initial conditions; "" = the training data
  std::string precision = "fp32";
  // Ensemble members: 0 (not given) forecasts one member with no member dimension, as before
  // --members existed; N >= 1 writes a `number` dimension of N members.
  int64_t members = 0;
  bool members_given = false;
  // The run file a reference checkpoint (a .mdlus, a state_dict) is forecast with: it carries none.
  std::string config;
  std::vector<std::string> overrides;
};

// Where the initial conditions come from: the states the model starts from and, for each step,
// the state at its valid time when the data has one (the file forcings and a limited-area run's
// boundary come from there).
struct InitialConditions {
  std::shared_ptr<const data::Dataset> data;
  std::string name;               // for messages: "the training data" or the --initial file
  std::vector<int64_t> history;   // time indices of the `history` initial states, oldest first
  int64_t start = 0;              // the newest of them
  int64_t step_seconds = 0;       // the model's step (0 without dates)

  const data::TimeAxis& axis() const { return data->time_axis(); }
  // The state at step k's valid time, when the data holds it. With dates by date (a gap in the
  // archive never stands in for the missing time), without by position.
  std::optional<int64_t> state_at_step(int64_t k) const {
    const data::TimeAxis& a = axis();
    if (!a.has_dates) {
      if (start + k < data->num_times()) return start + k;
      return std::nullopt;
    }
    const int64_t wanted = a.seconds[static_cast<size_t>(start)] + k * step_seconds;
    const auto found = std::lower_bound(a.seconds.begin(), a.seconds.end(), wanted);
    if (found == a.seconds.end() || *found != wanted) return std::nullopt;
    return found - a.seconds.begin();
  }
};

int64_t date_seconds(const std::string& option, const std::string& text, data::Calendar calendar) {
  try {
    return data::to_seconds(data::parse_date(text, calendar), calendar);
  } catch (const DataError& error) {
    throw ConfigError(option + " " + text + ": " + error.what());
  }
}

// --start as a time index ("12") or a date of the data ("2020-01-03T18:00"); the newest initial
// state, with history - 1 states before it, one time step apart.
int64_t start_index(const data::Dataset& dataset, const std::string& text, int64_t history) {
  const data::TimeAxis& axis = dataset.time_axis();
  int64_t start = dataset.num_times() - 1;
  if (!text.empty()) {
    if (text.find('-') != std::string::npos && axis.has_dates) {
      const int64_t seconds = date_seconds("--start", text, axis.calendar);
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

// From the training data itself (the default): --start within it.
// Calendar months (data.time_step = "1mo" on a calendar whose months differ in length) have no
// fixed number of seconds, which the forecast's dates below count in: refused by name rather than
// dated wrongly. 360_day months are 30 days and forecast as such.
void refuse_calendar_month_steps(const data::TimeAxis& axis, const std::string& where) {
  if (axis.step_months > 0 && axis.step_seconds <= 0)
    throw ConfigError(where + ": the model steps in calendar months (" + axis.step_text() +
                      "), which forecast does not date yet; monthly models on a 360_day calendar forecast, "
                      "others train and validate but cannot forecast in this version");
}

InitialConditions from_training_data(const std::shared_ptr<data::Dataset>& dataset, const std::string& start,
                                     int64_t history) {
  InitialConditions initial;
  initial.data = dataset;
  initial.name = "the archive";
  refuse_calendar_month_steps(dataset->time_axis(), "the archive");
  initial.start = start_index(*dataset, start, history);
  initial.step_seconds = dataset->time_axis().step_seconds;
  for (int64_t t = initial.start - history + 1; t <= initial.start; ++t) initial.history.push_back(t);
  return initial;
}

std::string grid_text(const std::vector<double>& lat, const std::vector<double>& lon) {
  char text[160];
  std::snprintf(text, sizeof text, "%zu x %zu (lat %g .. %g, lon %g .. %g)", lat.size(), lon.size(), lat.front(),
                lat.back(), lon.front(), lon.back());
  return text;
}

bool same_points(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::abs(a[i] - b[i]) > 1e-4 * std::max(1.0, std::abs(a[i]))) return false;
  }
  return true;
}

// --initial FILE: the run's sources read from FILE instead (each by its channel name when FILE has
// a variable of that name, as a wxtrain forecast writes it, else by the source's variable), its
// static fields and computed forcings as trained. The model was trained on `trained`'s grid and
// time step: FILE must have the same grid, dates (in its own calendar, which the forecast keeps),
// and the history states one model step apart up to --start.
InitialConditions from_initial_file(const std::string& file, const RunConfig& config, const data::Dataset& trained,
                                    const std::string& start, int64_t history) {
  const std::string where = "--initial " + file;
  const data::TimeAxis& trained_axis = trained.time_axis();
  refuse_calendar_month_steps(trained_axis, where);
  if (!trained_axis.has_dates || trained_axis.step_seconds <= 0) {
    throw ConfigError(where + ": the model's training data has no dates (no CF time units and no data.time_origin), "
                      "so the model's time step is unknown and initial states cannot be matched by date");
  }
  DataConfig from_file = config.data;
  from_file.time_origin.clear();  // FILE's own dates; the archive's origin says nothing about it
  from_file.time_step.clear();    // every state of FILE; the history is looked up by date below
  {
    std::unique_ptr<data::Reader> reader;
    try {
      reader = data::open_reader(file);
    } catch (const DataError& error) {
      throw ConfigError(where + ": " + error.what());
    }
    std::map<std::string, std::string> read_by;  // FILE's variable (and levels) -> the channel that reads it
    for (auto& source : from_file.sources) {
      const std::string name = source.name.empty() ? source.variable : source.name;
      if (reader->has_variable(name)) source.variable = name;
      std::string key = source.variable;
      for (double level : source.levels) key += " " + std::to_string(level);
      const auto [it, fresh] = read_by.emplace(key, name);
      if (!fresh) {
        throw ConfigError(where + ": the sources '" + it->second + "' and '" + name +
                          "' (different variables in training) would both read variable '" + source.variable +
                          "' from it; give it a variable named '" + name + "'");
      }
      source.file = file;
    }
  }
  std::shared_ptr<data::Dataset> dataset;
  try {
    dataset = std::make_shared<data::Dataset>(from_file);
  } catch (const DataError& error) {
    throw DataError(where + ": " + error.what());
  }
  const data::TimeAxis& axis = dataset->time_axis();
  if (dataset->has_coordinates() != trained.has_coordinates() ||
      (trained.has_coordinates() ? !same_points(dataset->lat(), trained.lat()) || !same_points(dataset->lon(), trained.lon())
                                 : dataset->num_lat() != trained.num_lat() || dataset->num_lon() != trained.num_lon())) {
    throw DataError(where + ": its grid is " + grid_text(dataset->lat(), dataset->lon()) +
                    " but the model was trained on " + grid_text(trained.lat(), trained.lon()) +
                    (config.data.region.set ? " (after data.region)" : "") +
                    "; regrid the initial conditions onto the training grid first");
  }
  if (!axis.has_dates) {
    throw DataError(where + ": its time coordinate has no CF units (\"hours since 1979-01-01\"), so its states have no "
                    "dates to start a forecast from");
  }
  InitialConditions initial;
  initial.data = dataset;
  initial.name = file;
  initial.step_seconds = trained_axis.step_seconds;
  const std::string range = "it has " + std::to_string(axis.size()) + " state(s), " + axis.label(0) + " .. " +
                            axis.label(axis.size() - 1);
  int64_t newest = axis.seconds.back();
  if (!start.empty()) {
    newest = date_seconds("--start", start, axis.calendar);
    if (!std::binary_search(axis.seconds.begin(), axis.seconds.end(), newest))
      throw ConfigError("--start " + start + ": " + file + " has no state at that time (" + range + ")");
  }
  for (int64_t h = history - 1; h >= 0; --h) {
    const int64_t wanted = newest - h * initial.step_seconds;
    const auto found = std::lower_bound(axis.seconds.begin(), axis.seconds.end(), wanted);
    if (found == axis.seconds.end() || *found != wanted) {
      throw ConfigError("--start " + data::from_seconds(newest, axis.calendar).to_iso() + ": the model needs " +
                        std::to_string(history) + " initial states " + data::format_duration(initial.step_seconds) +
                        " apart up to it, but " + file + " has no state at " +
                        data::from_seconds(wanted, axis.calendar).to_iso() + " (" + range + ")");
    }
    initial.history.push_back(found - axis.seconds.begin());
  }
  initial.start = initial.history.back();
  return initial;
}

// The forecast's channels (prognostic, then diagnostic), grid and times after the newest initial state.
data::ForecastCoordinates forecast_coordinates(const InitialConditions& initial, const std::vector<int64_t>& outputs,
                                               int64_t steps) {
  data::ForecastCoordinates c = data::ForecastCoordinates::after(*initial.data, initial.start, steps);
  if (c.has_dates) {
    c.seconds.clear();
    for (int64_t k = 1; k <= steps; ++k) c.seconds.push_back(*c.reference_seconds + k * initial.step_seconds);
  }
  std::vector<data::VariableInfo> predicted;
  for (int64_t i : outputs) predicted.push_back(c.variables[static_cast<size_t>(i)]);
  c.variables = predicted;
  return c;
}

// Per output channel, the cells to write as missing: those missing in every training state (the
// checkpoint's record); for a checkpoint without one, those missing in every initial state.
torch::Tensor forecast_mask(const data::MissingValues& missing, const data::Dataset& data,
                            const std::vector<int64_t>& history, const std::vector<int64_t>& outputs,
                            std::string& report) {
  const int64_t H = data.num_lat(), W = data.num_lon();
  torch::Tensor mask = torch::zeros({static_cast<int64_t>(outputs.size()), H, W}, torch::kBool);
  torch::Tensor initial_missing;
  if (!missing.recorded()) {
    initial_missing = torch::ones({data.num_variables(), H, W}, torch::kBool);
    for (int64_t t : history) initial_missing = initial_missing.logical_and(torch::isnan(data.state(t)));
  }
  for (size_t o = 0; o < outputs.size(); ++o) {
    const std::string& name = data.variables()[static_cast<size_t>(outputs[o])].name;
    torch::Tensor cells = missing.recorded() ? missing.always_missing(name) : initial_missing[outputs[o]];
    if (!cells.defined() || cells.sizes() != mask[static_cast<int64_t>(o)].sizes()) continue;
    const double share = cells.to(torch::kFloat64).mean().item<double>();
    if (share == 0) continue;
    mask[static_cast<int64_t>(o)] = cells;
    char percent[32];
    std::snprintf(percent, sizeof percent, "%.1f%%", 100 * share);
    report += (report.empty() ? "" : ", ") + name + " " + percent;
  }
  if (!report.empty()) {
    report = "forecast: NaN (the fill value) at the cells missing in every " +
             std::string(missing.recorded() ? "training state" : "initial state (the checkpoint records no mask)") +
             ": " + report + " of cells";
  }
  return mask;
}

int run_forecast(const ForecastArgs& args) {
  if (args.steps <= 0) throw ConfigError("--steps " + std::to_string(args.steps) + ": expected a positive number of steps");
  if (args.members_given && args.members < 1)
    throw ConfigError("--members " + std::to_string(args.members) + ": expected 1 or more ensemble members");
  if (args.precision != "fp32" && args.precision != "bf16")
    throw ConfigError("--precision " + args.precision + ": expected fp32 or bf16 (forecasts run on the CPU)");
  // From another file (--initial) only the training data's headers are read: its grid and time
  // step. A reference checkpoint normalises with the data's statistics, so it opens the data.
  SetupRequest request;
  request.open_data = args.initial.empty() || trainer::is_reference_checkpoint(args.checkpoint);
  trainer::Checkpoint ckpt;
  RunSetup run;
  data::Normalization norm;
  const bool reference = trainer::is_reference_checkpoint(args.checkpoint);
  if (reference) {
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
  const int64_t history = config.data.history;
  // Members differ only by their noise: a model without noise channels would give N copies of one
  // forecast, which is no ensemble: refused before the initial conditions are read.
  if (args.members > 1 && config.train.input_noise_channels() == 0)
    throw ConfigError("--members " + std::to_string(args.members) + ": " + args.checkpoint +
                      " is a deterministic model (train.ensemble_members = " +
                      std::to_string(config.train.ensemble_members) +
                      ", no noise channels), so every member would be the same forecast; an ensemble forecast "
                      "needs a model trained as an ensemble (train.ensemble_members > 1, docs/ensembles.md), "
                      "or forecast without --members");
  InitialConditions initial;
  if (args.initial.empty()) {
    initial = from_training_data(run.dataset, args.start, history);
  } else {
    data::DatasetOptions headers_only;
    headers_only.preload_max_bytes = 0;
    std::optional<data::Dataset> trained;
    try {
      trained.emplace(config.data, headers_only);
    } catch (const DataError& error) {
      throw DataError("--initial " + args.initial +
                      ": the grid and time step the model was trained on are read from its training data, which "
                      "cannot be opened: " + error.what());
    }
    initial = from_initial_file(args.initial, config, *trained, args.start, history);
  }
  const data::Dataset& dataset = *initial.data;
  const data::SampleMaker maker(dataset, norm, {history, 1});
  const ChannelLayout& layout = run.channels;
  const data::TimeAxis& axis = dataset.time_axis();

  // A step's inputs that only the data can give: file forcings at its valid time, and for a
  // limited-area run the true state on the boundary frame. Beyond the data they do not exist.
  const bool needs_states = (!layout.forcing.empty() && layout.forcing.size() > dataset.computed_forcing_names().size()) ||
                            config.data.boundary > 0;
  for (int64_t k = 1; needs_states && k <= args.steps; ++k) {
    if (initial.state_at_step(k)) continue;
    const std::string what =
        config.data.boundary > 0 ? "the boundary frame (data.boundary)" : "the forcings read from files";
    if (initial.start + k >= dataset.num_times() || !axis.has_dates ||
        axis.seconds.back() < axis.seconds[static_cast<size_t>(initial.start)] + k * initial.step_seconds) {
      throw ConfigError("--steps " + std::to_string(args.steps) + " from " + axis.label(initial.start) + ": " + what +
                        " need " + (args.initial.empty() ? "the archive's" : args.initial + "'s") +
                        " states up to the last step, but it ends at " + axis.label(axis.size() - 1) + ", " +
                        std::to_string(dataset.num_times() - 1 - initial.start) +
                        " step(s) after the start: start earlier (--start) or forecast fewer steps");
    }
    throw ConfigError("--steps " + std::to_string(args.steps) + " from " + axis.label(initial.start) + ": " + what +
                      " need the state at step " + std::to_string(k) + " (" +
                      data::from_seconds(axis.seconds[static_cast<size_t>(initial.start)] + k * initial.step_seconds,
                                         axis.calendar).to_iso() +
                      "), which " + initial.name + " does not have");
  }

  torch::NoGradGuard no_grad;
  auto model = models::build_model(config.model, models::model_shape(config));
  trainer::TensorMap weights = ckpt.model;
  // A reference's state_dict holds no grid buffers (GraphCastNet rebuilds its graph when built):
  // the model's own, built for the run's grid, stand in for them.
  if (reference) model->fit_checkpoint_to_grid(weights, {}, {});
  trainer::load_weights(*model, weights, /*strict=*/true, args.checkpoint);
  model->eval();

  const std::vector<int64_t> prognostic_channels = dataset.channel_indices("prognostic");
  std::vector<int64_t> outputs = prognostic_channels;
  for (int64_t i : dataset.channel_indices("diagnostic")) outputs.push_back(i);
  const torch::Tensor prognostic = torch::tensor(prognostic_channels, torch::kInt64);
  const torch::Tensor output_index = torch::tensor(outputs, torch::kInt64);
  const data::Normalization prognostic_norm = norm.subset(layout.prognostic_names());
  const data::Normalization output_norm = norm.subset(layout.output_names());

  std::string mask_report;
  const torch::Tensor missing = forecast_mask(norm.missing(), dataset, initial.history, outputs, mask_report);
  if (!mask_report.empty()) std::cerr << mask_report << "\n";

  std::vector<torch::Tensor> window;
  for (int64_t t : initial.history)  // missing values become 0 (the mean), as in training
    window.push_back(prognostic_norm.normalize(dataset.state(t).index_select(0, prognostic)));
  torch::Tensor input = torch::cat(window, 0).unsqueeze(0);  // [1, P * history, lat, lon]
  window.clear();

  trainer::RolloutSetup setup;
  setup.prognostic = static_cast<int64_t>(layout.prognostic.size());
  setup.diagnostic = static_cast<int64_t>(layout.diagnostic.size());
  setup.predicts_state = config.train.prediction == "state";
  if (config.train.residual_normalization && prognostic_norm.diff_std().defined())
    setup.residual_scale = trainer::residual_scale_from(prognostic_norm.diff_std(), prognostic_norm.std());
  if (config.data.boundary > 0) setup.boundary = trainer::boundary_frame(config.data.lat, config.data.lon, config.data.boundary);
  // A model trained as an ensemble takes its noise fields every step. Member m draws them from a
  // generator of its own, seeded from train.seed and m (trainer::make_noise_generator(seed, m)),
  // and is rolled out on its own (a batch of one): member m is the same forecast, bit for bit,
  // whatever the number of members, and member 0 is the forecast without --members.
  setup.noise_channels = config.train.input_noise_channels();
  setup.noise_std = config.train.noise_std;
  setup.noise_correlation = config.train.noise_correlation;
  const int64_t members = std::max<int64_t>(1, args.members);
  std::vector<at::Generator> member_noise;
  // Each member's last unit noise fields, carried from step to step (train.noise_correlation).
  std::vector<torch::Tensor> member_carry(static_cast<size_t>(members));
  for (int64_t m = 0; setup.noise_channels > 0 && m < members; ++m)
    member_noise.push_back(trainer::make_noise_generator(config.train.seed, static_cast<int>(m)));
  const int64_t P = setup.prognostic;
  const torch::Tensor prognostic_missing = missing.narrow(0, 0, P).unsqueeze(0);  // outputs: prognostic first

  // Streamed: each step is written as it is produced and only the model's window stays in memory,
  // so a long forecast needs no more memory than a short one. The output is created first: a bad
  // path fails before any step is computed.
  data::ForecastCoordinates coordinates = forecast_coordinates(initial, outputs, args.steps);
  coordinates.members = args.members;  // 0 without --members: no member dimension
  data::ForecastWriter writer(args.output, std::move(coordinates));
  // Each member's window: memory grows with the members, not with the steps.
  std::vector<torch::Tensor> inputs(static_cast<size_t>(members), input);
  input = torch::Tensor();
  for (int64_t k = 1; k <= args.steps; ++k) {
    const std::optional<int64_t> at = initial.state_at_step(k);
    const torch::Tensor state = at ? dataset.state(*at) : torch::Tensor();
    // Forcings at the step's own valid time: computed for any date, from files where the data has them.
    const int64_t seconds = axis.has_dates ? axis.seconds[static_cast<size_t>(initial.start)] + k * initial.step_seconds : 0;
    const torch::Tensor forcings = maker.step_forcings(seconds, state).unsqueeze(0).unsqueeze(0);
    const torch::Tensor truth = config.data.boundary > 0
                                    ? output_norm.normalize(state.index_select(0, output_index)).unsqueeze(0).unsqueeze(0)
                                    : torch::Tensor();
    std::vector<torch::Tensor> step_members;
    for (int64_t m = 0; m < members; ++m) {
      torch::Tensor& member_input = inputs[static_cast<size_t>(m)];
      if (!member_noise.empty()) setup.noise = member_noise[static_cast<size_t>(m)];
      setup.noise_carry = &member_carry[static_cast<size_t>(m)];
      torch::Tensor next;
      {
        AutocastGuard guard(torch::kCPU, torch::kBFloat16, args.precision == "bf16");
        next = trainer::rollout(*model, member_input, forcings, 1, setup, truth).select(1, 0).to(torch::kFloat32);  // [1, P + D, lat, lon]
      }
      // The newest prediction joins the window, the oldest state leaves it (trainer::rollout's own
      // order). At cells missing in every training state it goes back to 0, the mean, which is all
      // the model ever saw there as input.
      const torch::Tensor fed_back = next.narrow(1, 0, P).masked_fill(prognostic_missing, 0.0);
      member_input = history > 1 ? torch::cat({member_input.narrow(1, P, P * (history - 1)), fed_back}, 1) : fed_back;
      step_members.push_back(output_norm.denormalize(next.squeeze(0)));  // [P + D, lat, lon]
    }
    // [P + D, lat, lon], or [N, P + D, lat, lon] with --members
    torch::Tensor physical = args.members > 0 ? torch::stack(step_members) : step_members.front();
    physical.masked_fill_(missing, std::numeric_limits<float>::quiet_NaN());
    writer.write_step(physical);
  }
  writer.commit();
  std::cout << "forecast: " << (args.members > 0 ? std::to_string(args.members) + " member(s) x " : "") << args.steps
            << " steps of " << outputs.size() << " channels from " << axis.label(initial.start)
            << (args.initial.empty() ? " (time index " + std::to_string(initial.start) + ")" : " in " + args.initial)
            << " written to " << args.output << "\n";
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
  cmd->add_option("--start", args->start,
                  "the newest initial state: a time index or a date of the data, e.g. 2020-01-03T18:00 (default: the "
                  "last); with --initial a date of that file");
  cmd->add_option("--initial", args->initial,
                  "initial conditions from this NetCDF file, Zarr store or GRIB file instead of the training data: the "
                  "same variables (by channel or variable name) on the same grid, dated; file forcings and a boundary "
                  "come from it too");
  cmd->add_option("--precision", args->precision, "fp32 (default) or bf16 (autocast on the CPU)");
  cmd->add_option("--members", args->members,
                  "an ensemble forecast of N members (a model trained with train.ensemble_members > 1): each draws "
                  "noise of its own, seeded from train.seed and its index; written with a member dimension "
                  "`number` (0..N-1). Without it, one member and no member dimension")
      ->each([args](const std::string&) { args->members_given = true; });
  cmd->add_option("-c,--config", args->config, "run file for a reference checkpoint: its data, channels and grid");
  cmd->add_option("--set", args->overrides, "override a value of --config's run file");
  return [args]() { return run_forecast(*args); };
}

}  // namespace wxtrain::cli
