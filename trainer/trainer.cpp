#include "trainer/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/autocast.h"
#include "core/device.h"
#include "core/error.h"
#include "core/memory_meter.h"
#include "core/run_file_text.h"
#include "core/tracking_config.h"
#include "core/units.h"
#include "data/dataset.h"
#include "data/forcings.h"
#include "data/loader.h"
#include "data/samples.h"
#include "distributed/communicator.h"
#include "distributed/halo_exchange.h"
#include "trainer/channel_transfer.h"
#include "trainer/checkpoint_io.h"
#include "trainer/lr_schedule.h"
#include "trainer/metrics_log.h"
#include "trainer/reference_init.h"
#include "trainer/stop_signal.h"
#include "trainer/training_step.h"
#include "tracking/open_tracker.h"

namespace wxtrain::trainer {

double Validation::mean_skill() const {
  double s = 0;
  for (size_t i = 0; i < names.size(); ++i) s += 1.0 - model_rmse[i] / std::max(persistence_rmse[i], 1e-30);
  return names.empty() ? 0.0 : s / static_cast<double>(names.size());
}

std::string checkpoint_path(const RunConfig& config) {
  return (std::filesystem::path(config.train.out_dir) / "checkpoint.pt").string();
}

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The files a run writes into its folder; another run's copies of these make the folder taken.
const std::vector<std::string>& run_files() {
  static const std::vector<std::string> files = {"checkpoint.pt", "metrics.csv", "validation.csv",
                                                 "validation.svg", "run.toml",  "command.txt"};
  return files;
}

std::string in_out_dir(const RunConfig& config, const std::string& name) {
  return (fs::path(config.train.out_dir) / name).string();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A run killed after logging steps it never checkpointed leaves rows past the checkpoint (and
// perhaps half a row); the resumed run redoes those steps, so their rows go and the CSV keeps one
// row per step.
void drop_rows_after(const std::string& path, int64_t step) {
  if (!fs::exists(path)) return;
  const std::string text = read_text(path);
  std::string kept;
  bool header = true;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;  // no newline: a row cut off mid-write
    const std::string line = text.substr(begin, end - begin + 1);
    begin = end + 1;
    if (header) {
      kept += line;
      header = false;
      continue;
    }
    char* after = nullptr;
    const long long row_step = std::strtoll(line.c_str(), &after, 10);
    if (after != line.c_str() && row_step <= step) kept += line;
  }
  if (kept != text) write_file_atomically(path, kept);
}

// Just before the first step (so a run that fails to start takes nothing over): --overwrite
// removes the earlier run's files, then run.toml and command.txt describe this run.
void record_run(const RunConfig& config, const RunSource& source, const TrainOptions& options, int64_t first_step,
                int world_size) {
  if (options.overwrite && !options.resume) {
    for (const auto& name : run_files()) {
      const std::string path = in_out_dir(config, name);
      std::error_code ec;
      fs::remove(path, ec);
      if (ec) throw WriteError(path, ec.value(), "--overwrite could not remove the earlier run's file");
    }
    // Its TensorBoard event files and MLflow journal too, so they are not taken for this run's.
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(config.train.out_dir, ec))
      if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) fs::remove(entry.path(), ec);
    fs::remove_all(in_out_dir(config, "mlflow"), ec);
  }
  const std::string stamp = utc_now();
  write_file_atomically(in_out_dir(config, "run.toml"),
                        "# The run file of the run in this folder (from " + config.path + ", " + stamp +
                            "), with its --set values written in and the paths it reads made absolute.\n" +
                            apply_overrides_to_text(source.text, source.overrides));
  if (options.command_line.empty()) return;
  const std::string path = in_out_dir(config, "command.txt");
  std::string text = options.resume ? read_text(path) : "";
  std::error_code ec;
  const std::string cwd = fs::current_path(ec).string();
  text += "# " + stamp + ": " + (options.resume ? "resumed at step " + std::to_string(first_step) : "started") +
          " on " + std::to_string(world_size) + " rank(s), in " + cwd + "\n" + options.command_line + "\n";
  write_file_atomically(path, text);
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& n : v) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// The channels Normalization::compute covers, in its order.
std::vector<std::string> normalization_names(const data::Dataset& dataset) {
  std::vector<std::string> names = dataset.variable_names();
  for (const auto& n : dataset.static_names()) names.push_back(n);
  for (const auto& n : dataset.computed_forcing_names()) names.push_back(n);
  return names;
}

// The checkpoint's record of its channels (Checkpoint::channels): what fine-tuning maps by name
// and what a reader of the checkpoint needs to know about each channel.
std::string channels_record(const data::Dataset& dataset, const RunConfig& config, const ChannelLayout& layout,
                            const data::Normalization& norm) {
  nlohmann::json j;
  j["inputs"] = layout.input_names();
  j["outputs"] = layout.output_names();
  j["history"] = config.data.history;
  // The grid, for fine-tuning on another (a region of it): models place grid-sized tensors by it.
  if (dataset.has_coordinates()) j["grid"] = {{"lat", dataset.lat()}, {"lon", dataset.lon()}};
  if (dataset.point_set()) j["grid"]["cells"] = true;  // lat and lon one per cell
  auto stats = [&](nlohmann::json& entry, const std::string& name) {
    const auto& names = norm.names();
    auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) return;
    const int64_t i = it - names.begin();
    entry["mean"] = norm.mean()[i].item<double>();
    entry["std"] = norm.std()[i].item<double>();
    if (norm.diff_std().defined() && std::isfinite(norm.diff_std()[i].item<double>()))
      entry["diff_std"] = norm.diff_std()[i].item<double>();
  };
  nlohmann::json channels = nlohmann::json::array();
  for (const auto& v : dataset.variables()) {
    nlohmann::json e = {{"name", v.name}, {"role", v.role}, {"units", v.units}, {"long_name", v.long_name},
                        {"file", v.file}, {"variable", v.file_variable}};
    if (v.level) e["level"] = *v.level, e["level_units"] = v.level_units;
    stats(e, v.name);
    channels.push_back(e);
  }
  for (size_t i = 0; i < dataset.static_names().size(); ++i) {
    const auto& field = config.data.statics[i];
    nlohmann::json e = {{"name", field.name}, {"role", "static"}, {"file", field.file}, {"variable", field.variable},
                        {"regrid", field.regrid}};
    stats(e, field.name);
    channels.push_back(e);
  }
  for (const auto& name : dataset.computed_forcing_names()) {
    nlohmann::json e = {{"name", name}, {"role", "computed_forcing"}, {"units", data::forcing_units(name)}};
    stats(e, name);
    channels.push_back(e);
  }
  j["channels"] = channels;
  return j.dump();
}

// Everything the loop touches, built once by start_run.
struct Run {
  RunConfig config;
  ChannelLayout layout;  // config.channels()
  RunSource source;
  TrainOptions options;
  distributed::World world;
  torch::Device device{torch::kCPU};
  std::shared_ptr<data::Dataset> dataset;
  std::optional<data::TimeSplit> split;      // training windows: history + the longest rollout
  std::optional<data::TimeSplit> val_split;  // validation windows: history + train.val_lead_steps
  std::vector<int64_t> val_times;            // the validation samples' times (none: no validation)
  std::optional<Climatology> climatology;    // from the training split, for the days validation needs
  data::Normalization normalization;
  torch::Tensor residual_scale;  // per prognostic channel with train.residual_normalization, else undefined
  std::unique_ptr<TrainingState> state;
  std::unique_ptr<data::Loader> loader;
  int64_t first_step = 0;   // the step this invocation starts from (a resumed run's checkpoint step)
  int64_t saved_step = -1;  // the step checkpoint.pt holds (-1: none from this run yet)
  int64_t band_read_from = 0;  // the dataset's archive bytes when the band was set (model parallelism)
  bool is_root() const { return world.rank == 0; }
};

// The validation rollout: every validation sample rolled out val_lead_steps steps, scored per
// channel and lead as WeatherBench does (latitude-weighted RMSE and ACC against the climatology),
// beside persistence (the state at t held) and the climatology itself.
Validation validate(Run& run, int64_t step) {
  const RunConfig& c = run.config;
  const data::Dataset& dataset = *run.dataset;
  const auto window = run.val_split->window();
  const int64_t L = window.rollout_steps;
  data::LoaderOptions opts = data::LoaderOptions::from_config(c, c.train.batch_size, c.train.seed);
  opts.window = window;
  opts.shuffle = false;
  opts.drop_last = false;
  opts.prefetch = 0;
  // By data-parallel group: the ranks of an ensemble group (or a model-parallel group) validate
  // the same samples.
  const EnsembleLayout groups = ensemble_layout(run.world.rank, run.world.size, c.distributed.sample_group());
  opts.rank = groups.group;
  opts.world_size = groups.groups;
  opts.device = run.device;
  data::Loader loader(run.dataset, run.normalization, run.val_split->sample_times(data::Split::kValidation), opts);

  std::vector<int64_t> outputs = dataset.channel_indices("prognostic");
  for (int64_t i : dataset.channel_indices("diagnostic")) outputs.push_back(i);
  std::vector<std::string> names, units;
  for (int64_t i : outputs) {
    names.push_back(dataset.variables()[static_cast<size_t>(i)].name);
    units.push_back(dataset.variables()[static_cast<size_t>(i)].units);
  }
  const torch::Tensor output_index = torch::tensor(outputs, torch::kInt64);
  const data::Normalization output_norm = run.normalization.subset(names);
  const torch::Tensor& lw = run.state->lat_weights;
  torch::Tensor weights = (lw.dim() == 2 ? lw.cpu() : lw.cpu().view({-1, 1})).expand({dataset.num_lat(), dataset.num_lon()});
  if (run.state->interior.defined()) weights = weights * run.state->interior.cpu();
  // Model parallelism: each rank rolls out and scores its band (the loader reads only the band:
  // Dataset::set_band); every score is a ratio of per-sample sums over grid points, so the bands'
  // partial sums are summed over the group per batch (ScoreAccumulator::score_bands), a [B, V, 7]
  // float64 allreduce instead of gathering the [B, L, V, lat, lon] prediction.
  const ModelParallelSetup& mp = run.state->model_parallel;
  weights = mp.band(weights);
  ScoreAccumulator scores(names, L, {"model", "persistence", "climatology"}, weights.contiguous(), units);
  if (mp.on())
    scores.score_bands(
        [&mp, &run](torch::Tensor& partial) {
          torch::Tensor on_device = partial.to(run.device);  // NCCL reduces device tensors only
          mp.comm->allreduce(on_device);
          partial = on_device.cpu();
        },
        mp.rank == 0);
  // An ensemble's members are rolled out together, each with its own noise from a validation
  // stream of its own (seeded by the step), so validating leaves the training noise untouched. In
  // an ensemble group each rank rolls out its M / G members (the group's shared validation stream,
  // its slice, as in training), the members are gathered, and the group's first rank scores all M;
  // the others score nothing, so the sums over the world count each sample once.
  const int64_t M = run.state->ensemble.members, local = run.state->ensemble.local_members();
  const bool scoring = mp.on() || groups.group_rank == 0;
  scores.expect_ensemble(0, M);
  RolloutSetup setup = run.state->rollout;
  setup.boundary = mp.band(setup.boundary);
  if (setup.noise_channels > 0)
    setup.noise = make_noise_generator(c.train.seed + 0x76616cULL + static_cast<uint64_t>(step), groups.group);

  auto& model = *run.state->model;
  model.eval();
  {
    // ZeRO-3 gathers a block collectively, and the ranks' shares of the validation samples may
    // differ by a batch: the parameters are gathered whole for the validation instead.
    const std::shared_ptr<void> whole = run.state->parallel->gather_full_parameters();
    torch::NoGradGuard no_grad;
    const AutocastState autocast = autocast_for(c.train.precision, run.device);
    const auto dtype = c.train.precision == Precision::kBf16 ? torch::kBFloat16 : torch::kFloat32;
    const data::TimeAxis& axis = dataset.time_axis();
    while (auto batch = loader.next()) {
      torch::Tensor prediction;
      {
        AutocastGuard guard(autocast);
        prediction = rollout(model, tile_members(batch->input.to(dtype), local), tile_members(batch->forcings, local), L,
                             setup, setup.boundary.defined() ? tile_members(batch->target, local) : batch->target);
        prediction = gather_members(*run.state, prediction);  // collective over the ensemble group
      }
      if (!scoring) continue;
      prediction = output_norm.denormalize(prediction.cpu());  // [B * M, L, V, lat, lon], sample-major
      torch::Tensor members;  // [B, M, L, V, lat, lon]
      if (M > 1) {
        std::vector<int64_t> sizes = prediction.sizes().vec();
        sizes[0] /= M;
        sizes.insert(sizes.begin() + 1, M);
        members = prediction.view(sizes);
      }
      const torch::Tensor truth = output_norm.denormalize(batch->target.cpu());
      const torch::Tensor mask = batch->target_mask.defined() ? batch->target_mask.cpu() : torch::Tensor();
      // Persistence: the state at t, every channel (a diagnostic too), fill points at the channel mean.
      std::vector<torch::Tensor> held;
      for (int64_t t : batch->times) held.push_back(dataset.band_state(t).index_select(0, output_index));
      torch::Tensor persistence = torch::stack(held);
      persistence = torch::where(torch::isnan(persistence), output_norm.mean().view({1, -1, 1, 1}).expand_as(persistence),
                                 persistence);
      for (int64_t k = 0; k < L; ++k) {
        std::vector<torch::Tensor> clim;
        for (int64_t t : batch->times) {
          const int64_t seconds = axis.has_dates ? axis.seconds[static_cast<size_t>(t + 1 + k)] : 0;
          clim.push_back(mp.band(run.climatology->at(seconds)).index_select(0, output_index));
        }
        const torch::Tensor climatology = torch::stack(clim);
        const torch::Tensor observed = truth.select(1, k);
        const torch::Tensor m = mask.defined() ? mask.select(1, k) : torch::Tensor();
        if (M > 1) scores.add_ensemble(0, k, members.select(2, k), observed, climatology, m);
        else scores.add(0, k, prediction.select(1, k), observed, climatology, m);
        scores.add(1, k, persistence, observed, climatology, m);
        scores.add(2, k, climatology, observed, climatology, m);
      }
    }
  }
  model.train();
  torch::Tensor on_device = scores.sums().to(run.device);  // NCCL reduces device tensors only
  run.state->comm->allreduce(on_device);
  scores.set_sums(on_device.cpu());
  Validation v;
  v.step = step;
  v.scores = scores.result(step, dataset.time_axis().step_seconds);
  v.scores.latitude_weighted = dataset.has_coordinates();
  v.scores.area_weighted = dataset.point_set();
  v.names = names;
  for (size_t i = 0; i < names.size(); ++i) {
    v.model_rmse.push_back(v.scores.rmse[0][0][i]);
    v.persistence_rmse.push_back(v.scores.rmse[1][0][i]);
  }
  return v;
}

void print_validation(const Validation& v) { std::cerr << scores_table(v.scores); }

// A validation as the tracking sinks show it: per channel and lead the model's RMSE and ACC and
// persistence's RMSE ("val/rmse/t/6h", "val/acc/t/6h", "val/persistence_rmse/t/6h"; leads in steps,
// "step1", for data without dates), an ensemble's CRPS, spread, spread/skill and rank histograms,
// and the mean skill against persistence at the first lead.
tracking::Scalars validation_scalars(const Validation& v) {
  const LeadScores& s = v.scores;
  tracking::Scalars out;
  out.step = v.step;
  auto lead_name = [&](size_t k) {
    if (k < s.lead_hours.size()) {
      char h[32];
      std::snprintf(h, sizeof h, "%gh", s.lead_hours[k]);
      return std::string(h);
    }
    return "step" + std::to_string(s.lead_steps[k]);
  };
  auto add = [&](const std::string& key, double value) {
    if (std::isfinite(value)) out.values.emplace_back(key, value);
  };
  const auto forecaster = [&](const std::string& name) {
    return static_cast<size_t>(std::find(s.forecasters.begin(), s.forecasters.end(), name) - s.forecasters.begin());
  };
  const size_t model = forecaster("model"), persistence = forecaster("persistence");
  for (size_t k = 0; k < s.lead_steps.size(); ++k)
    for (size_t c = 0; c < s.names.size(); ++c) {
      const std::string at = s.names[c] + "/" + lead_name(k);
      if (model < s.forecasters.size()) {
        add("val/rmse/" + at, s.rmse[model][k][c]);
        add("val/acc/" + at, s.acc[model][k][c]);
      }
      if (persistence < s.forecasters.size()) add("val/persistence_rmse/" + at, s.rmse[persistence][k][c]);
      // A deterministic model's CRPS is its mean absolute error (validation.csv's `mae`), which a
      // tracked ensemble run's val/crps is compared with.
      if (!s.ensemble() && model < s.forecasters.size() && model < s.crps.size())
        add("val/mae/" + at, s.crps[model][k][c]);
      if (s.ensemble() && model < s.forecasters.size()) {
        add("val/crps/" + at, s.crps[model][k][c]);
        add("val/spread/" + at, s.spread[model][k][c]);
        add("val/spread_skill/" + at, s.spread[model][k][c] / s.rmse[model][k][c]);
      }
    }
  // An ensemble's rank histograms at the leads validation.svg draws (the first, middle and last):
  // each rank's relative frequency (1 = flat, a reliable ensemble), as scalars every sink takes,
  // "val/rank_hist/t/6h/rank_0" .. "rank_M"; validation.csv has the counts at every lead.
  if (s.ensemble() && model < s.forecasters.size() && model < s.ranks.size())
    for (size_t k : rank_histogram_leads(s.lead_steps.size()))
      for (size_t c = 0; c < s.names.size(); ++c) {
        const std::vector<double> freq = rank_frequencies(s.ranks[model][k][c]);
        for (size_t r = 0; r < freq.size(); ++r)
          add("val/rank_hist/" + s.names[c] + "/" + lead_name(k) + "/rank_" + std::to_string(r), freq[r]);
      }
  add("val/skill_vs_persistence", v.mean_skill());
  return out;
}

void write_validation(const RunConfig& c, const Validation& v, bool& started) {
  const std::string path = in_out_dir(c, "validation.csv");
  // A new run starts the file afresh; a resumed run (started already set) appends.
  const bool append = started && fs::exists(path);
  started = true;
  write_scores_csv(path, v.scores, append);
  write_file_atomically(in_out_dir(c, "validation.svg"),
                        scores_svg(v.scores, c.model.name + " at step " + std::to_string(v.step) + " (" + c.path + ")"));
}

// Every rank's ensemble noise generator state as the rows of one uint8 tensor [world, bytes], so a
// resumed run continues each rank's noise stream; undefined without noise. Gathered by an
// allreduce of a zero-filled table each rank writes its row of (every backend reduces float64,
// which holds a byte exactly).
torch::Tensor gather_noise_states(Run& run) {
  const at::Generator& generator = run.state->rollout.noise;
  if (!generator.defined()) return {};
  const torch::Tensor mine = generator.get_state();
  const int world = run.state->comm->size(), rank = run.state->comm->rank();
  torch::Tensor table = torch::zeros({world, mine.numel()}, torch::kFloat64);
  table[rank].copy_(mine.to(torch::kFloat64));
  if (world > 1) {
    torch::Tensor on_device = table.to(run.device);  // NCCL reduces device tensors only
    run.state->comm->allreduce(on_device);
    table = on_device.cpu();
  }
  return table.to(torch::kUInt8);
}

// The noise streams a resumed run continues. There is one stream per data-parallel group (the
// ranks of an ensemble group share theirs, so their rows of the table are equal): group d
// continues the checkpoint's group d, the row of its first rank. The number of groups must be the
// checkpoint's (the loader shards the samples by group, so it is also what continues the data);
// the group size may differ, since every rank draws its group's noise for all M members and keeps
// its slice: 2 ranks x 2 members resume as 1 process x 4 members and continue the same noise. With
// another number of groups there is no stream for each: each group then starts a stream of its own
// from train.seed and the step, and rank 0 says so.
void restore_noise_state(Run& run, const Checkpoint& from) {
  at::Generator& generator = run.state->rollout.noise;
  if (!generator.defined()) return;
  const torch::Tensor& table = from.noise_rng_state;
  const EnsembleLayout groups =
      ensemble_layout(run.state->comm->rank(), run.state->comm->size(), run.config.distributed.ensemble_group);
  const int64_t written_group = std::max<int64_t>(1, from.ensemble_group);
  const bool rows_fit = table.defined() && table.dim() == 2 && table.size(0) % written_group == 0 &&
                        table.size(1) == generator.get_state().numel();
  if (rows_fit && table.size(0) / written_group == groups.groups) {
    generator.set_state(table[groups.group * written_group].contiguous());
    return;
  }
  generator = make_noise_generator(run.config.train.seed + static_cast<uint64_t>(from.step), groups.group);
  if (run.is_root())
    std::cerr << "note: the checkpoint holds "
              << (rows_fit ? std::to_string(table.size(0) / written_group) : std::string("no"))
              << " ensemble noise stream(s) for " << groups.groups
              << " data-parallel group(s): the noise continues from streams seeded by train.seed and the step\n";
}

Checkpoint make_checkpoint(Run& run, int64_t step) {
  Checkpoint c;
  c.step = step;
  c.loader = run.loader->state();
  {
    // ZeRO-3: the blocks gathered whole (collective) and copied, since they are freed again after.
    const std::shared_ptr<void> whole = run.state->parallel->gather_full_parameters();
    c.model = model_weights(*run.state->model);
    if (run.state->parallel->stage() == 3)
      for (auto& [name, tensor] : c.model) tensor = tensor.clone();
  }
  c.optimizer = run.state->parallel->optimizer_state();  // collective: every rank calls it
  c.scaler = run.state->scaler.state();
  c.normalization = run.normalization.to_map();
  c.channels = channels_record(*run.dataset, run.config, run.layout, run.normalization);
  c.rng_state = at::globalContext().defaultGenerator(torch::Device(torch::kCPU)).get_state();
  c.noise_rng_state = gather_noise_states(run);  // collective: every rank calls it
  c.config_text = run.source.text;
  c.overrides = run.source.overrides;
  c.model_name = run.config.model.name;
  c.world_size = run.world.size;
  const TrainConfig& t = run.config.train;
  c.ensemble_members = t.ensemble_members;
  c.ensemble_group = run.config.distributed.ensemble_group;
  c.crps_alpha = t.crps_alpha;
  c.noise_channels = t.input_noise_channels();
  c.noise_std = t.noise_std;
  c.noise_correlation = t.noise_correlation;
  return c;
}

void save(Run& run, int64_t step) {
  Checkpoint c = make_checkpoint(run, step);
  if (run.is_root()) save_checkpoint(checkpoint_path(run.config), c);
  run.state->comm->barrier();
  run.saved_step = step;
}

// What a user can do after a write failed mid-run: the checkpoint on disk is whole either way.
std::string after_write_failure(const Run& run) {
  if (run.saved_step < 0) return "no checkpoint of this run was written yet";
  return "checkpoint.pt still holds step " + std::to_string(run.saved_step) +
         ": free some space, then continue with --resume";
}

// ---- The setup: everything the loop needs, built once, and the run's header. ----

// A run whose validation split holds no sample writes no validation.csv and no scores. When the
// run file asked for validation (data.val_fraction, data.val_period or train.val_lead_steps set) that
// is an error; with the defaults a warning at the start; both say what the split holds and what to
// change. data.val_fraction = 0 turns validation off, and is said once.
void no_validation_samples(const Run& run, int64_t val_leads) {
  const RunConfig& c = run.config;
  const DataConfig& d = c.data;
  if (d.val_period.empty() && d.val_fraction_set && d.val_fraction == 0) {
    if (run.is_root()) std::cerr << "validation: off (data.val_fraction = 0)\n";
    return;
  }
  const data::TimeSplit& split = *run.val_split;
  const int64_t states = split.end(data::Split::kValidation) - split.begin(data::Split::kValidation);
  const int64_t needed = d.history + val_leads, total = run.dataset->time_axis().size();
  const std::string leads = c.train.val_lead_steps > 0 ? "train.val_lead_steps = " + std::to_string(val_leads)
                                                       : "the longest training rollout, " + std::to_string(val_leads);
  std::string holds;
  if (!d.val_period.empty()) {
    holds = "data.val_period = [\"" + d.val_period[0] + "\", \"" + d.val_period[1] + "\"] holds " +
            std::to_string(states) + " state(s)";
  } else {
    char share[32];
    std::snprintf(share, sizeof share, "%g", d.val_fraction);
    holds = "the trailing data.val_fraction = " + std::string(share) + (d.val_fraction_set ? "" : " (the default)") +
            " of the " + std::to_string(total) + " states holds " + std::to_string(states);
  }
  std::string why = holds + ", but a validation sample needs " + std::to_string(needed) + " consecutive states (data.history " +
                    std::to_string(d.history) + " + " + leads + ")";
  if (states >= needed) why += "; gaps in the time axis break every window there";
  std::string change;
  if (!d.val_period.empty()) {
    change = "widen data.val_period";
  } else {
    const double fraction = std::ceil(100.0 * static_cast<double>(needed) / static_cast<double>(total)) / 100.0;
    char share[32];
    std::snprintf(share, sizeof share, "%g", fraction);
    change = "raise data.val_fraction (" + std::string(share) + " holds " + std::to_string(needed) +
             " states) or give data.train_period and data.val_period";
  }
  change += ", or lower train.val_lead_steps";
  const bool asked = !d.val_period.empty() || d.val_fraction_set || c.train.val_lead_steps_set;
  if (asked)
    throw ConfigError(c.path + ": the run asks for validation but gets no validation sample: " + why + "; " + change +
                      " (data.val_fraction = 0 trains without validation)");
  if (run.is_root())
    std::cerr << "warning: no validation: " << why << ", so this run writes no validation.csv and no scores; " << change
              << "\n";
}

// The training and validation windows, and the climatology of the days validation scores (each
// valid time of each lead), computed from the training split.
void split_samples(Run& run) {
  const RunConfig& c = run.config;
  const data::TimeAxis& axis = run.dataset->time_axis();
  run.split.emplace(axis, c.data, data::SampleWindow{c.data.history, c.max_rollout()});
  const int64_t val_leads = c.train.val_lead_steps > 0 ? c.train.val_lead_steps : c.max_rollout();
  run.val_split.emplace(axis, c.data, data::SampleWindow{c.data.history, val_leads});
  if (run.is_root()) std::cerr << data::describe_samples(*run.dataset, *run.split, *run.val_split) << "\n";
  run.val_times = run.val_split->sample_times(data::Split::kValidation);
  if (run.val_times.empty()) no_validation_samples(run, val_leads);
  // Model parallelism: from here this rank reads, caches and batches only its band of the grid,
  // the rows the training state's ModelParallelSetup gives it (start_run checks they agree), and
  // keeps the climatology of its band; the normalisation statistics stay the whole grid's
  // (Normalization::compute reads whole states: Dataset::shared_state).
  if (const int64_t P = c.distributed.model_parallel; P > 1) {
    const auto [begin, length] = data::grid_band(run.dataset->grid_extent(), P, run.world.rank % P);
    run.dataset->set_band(begin, length);
  }
  std::vector<int64_t> valid_seconds;
  if (axis.has_dates)
    for (int64_t s0 : run.val_times)
      for (int64_t k = 1; k <= val_leads; ++k) valid_seconds.push_back(axis.seconds[static_cast<size_t>(s0 + k)]);
  run.climatology.emplace(Climatology::compute(*run.dataset, run.split->begin(data::Split::kTrain),
                                               run.split->end(data::Split::kTrain), valid_seconds,
                                               static_cast<int>(c.train.climatology_window)));
  if (run.is_root() && !run.val_times.empty())
    std::cerr << "validation: " << run.val_times.size() << " samples rolled out " << val_leads << " step(s); "
              << run.climatology->describe() << "\n";
}

// The checkpoint a run continues from (--resume) or takes its weights from (train.init_from).
struct StartingPoint {
  std::optional<Checkpoint> resume_from, init_from;
};

// A resumed run continues the ensemble it was: another number of members per sample would train
// another loss (and the noise streams would no longer line up), so it is refused. The ensemble
// group may change (restore_noise_state says what continues); a changed alpha or noise std is
// said, not refused.
void check_resumed_ensemble(const Run& run, const Checkpoint& c, const std::string& path) {
  if (c.ensemble_members <= 0) return;  // written before the ensemble was recorded
  const TrainConfig& t = run.config.train;
  if (c.ensemble_members != t.ensemble_members)
    throw ConfigError("--resume: " + path + " was trained with train.ensemble_members = " +
                      std::to_string(c.ensemble_members) + " (members per sample over the ensemble group), this run " +
                      "has " + std::to_string(t.ensemble_members) + ": a resumed run continues the same ensemble; set " +
                      "train.ensemble_members = " + std::to_string(c.ensemble_members) +
                      ", or start a new run from it with train.init_from");
  if (!run.is_root()) return;
  if (c.ensemble_group != run.config.distributed.ensemble_group)
    std::cerr << "note: " << path << " was written with distributed.ensemble_group = " << c.ensemble_group
              << ", this run has " << run.config.distributed.ensemble_group
              << ": the members are spread over the ranks anew\n";
  if (t.ensemble() && (c.crps_alpha != t.crps_alpha || c.noise_std != t.noise_std ||
                       c.noise_correlation != t.noise_correlation))
    std::cerr << "note: " << path << " was trained with train.crps_alpha = " << c.crps_alpha << ", noise_std = "
              << c.noise_std << " and noise_correlation = " << c.noise_correlation << "; this run continues with "
              << t.crps_alpha << ", " << t.noise_std << " and " << t.noise_correlation << "\n";
}

StartingPoint load_starting_point(const Run& run) {
  StartingPoint from;
  const TrainConfig& t = run.config.train;
  const std::string path = checkpoint_path(run.config);
  if (run.options.resume) {
    if (!fs::exists(path)) throw Error("--resume: no checkpoint at " + path + " (train.out_dir = \"" + t.out_dir + "\")");
    from.resume_from = load_checkpoint(path);
    check_resumed_ensemble(run, *from.resume_from, path);
  } else if (!t.init_from.empty()) {
    if (is_reference_checkpoint(t.init_from)) {
      // A PhysicsNeMo .mdlus or a state_dict: translated at the boundary into a checkpoint of ours.
      std::string report;
      from.init_from = load_reference_checkpoint(t.init_from, run.config, &report);
      if (run.is_root()) std::cerr << "init_from " << report;
    } else {
      from.init_from = load_checkpoint(t.init_from);
    }
  }
  return from;
}

// A resumed model keeps the normalisation it was trained with, exactly; a fine-tuned one keeps
// the pretrained statistics of the channels it shares with this run (its weights expect them)
// and takes this run's for new channels.
data::Normalization choose_normalization(const Run& run, const StartingPoint& from) {
  if (from.resume_from && !from.resume_from->normalization.empty()) {
    data::Normalization trained = data::Normalization::from_map(from.resume_from->normalization);
    const auto expected = normalization_names(*run.dataset);
    if (trained.names() != expected)
      throw ConfigError(run.config.path + ": the checkpoint was trained on channels [" + join(trained.names()) +
                        "] but [data] has [" + join(expected) + "] (names and order must match to resume; "
                        "to train on other channels start a new run with train.init_from)");
    return trained;
  }
  data::Normalization fresh = data::Normalization::compute(*run.dataset, run.split->begin(data::Split::kTrain),
                                                           run.split->end(data::Split::kTrain));
  if (from.init_from && !from.init_from->normalization.empty())
    return keep_pretrained_statistics(fresh, data::Normalization::from_map(from.init_from->normalization));
  return fresh;
}

// train.residual_normalization: the tendency scale per prognostic channel (undefined: off, or no
// one-step differences to take it from).
torch::Tensor residual_scale_for(const Run& run) {
  if (!run.config.train.residual_normalization || run.config.train.prediction == "state") return {};
  const data::Normalization prognostic = run.normalization.subset(run.layout.prognostic_names());
  if (!prognostic.diff_std().defined()) return {};
  return residual_scale_from(prognostic.diff_std(), prognostic.std());
}

// The new model's weights before DataParallel takes its fp32 copies: the resumed checkpoint's,
// or init_from's mapped onto this run's channels, or (empty) the model's own initialisation.
// The returned function refers to `run` and `from`: call it while both live.
ModelInit weight_init(const Run& run, const StartingPoint& from) {
  if (from.resume_from)
    return [&run, &from](models::WeatherModelImpl& m) {
      // train.strict is about init_from: a resumed run continues the same model, so the remedy is
      // the checkpoint's own [model], or a new run that starts from its weights.
      const std::string& dir = run.config.train.out_dir;
      load_weights(m, from.resume_from->model, true, checkpoint_path(run.config),
                   "--resume continues the run in " + dir + " exactly, so [model] must be the one it was trained with (model.name = \"" +
                       from.resume_from->model_name + "\"; its run file is " + (fs::path(dir) / "run.toml").string() +
                       "); to train another [model] from these weights, start a new run with train.init_from = \"" +
                       checkpoint_path(run.config) + "\" (and train.strict = false to load what matches)");
    };
  if (!from.init_from) return {};
  return [&run, &from](models::WeatherModelImpl& m) {
    const TrainConfig& t = run.config.train;
    // The checkpoint's channel names (older checkpoints: its run file's), mapped onto this run's:
    // the first and last layers' slices move with their channels, new channels start fresh.
    const ChannelNames old_channels = checkpoint_channels(*from.init_from, t.init_from);
    // A checkpoint of another grid (a global model fine-tuned on a data.region) is fitted to this
    // model's (WeatherModelImpl::fit_checkpoint_to_grid) by the grid it recorded and, with
    // data.region, where the region lies in the sources' whole grid, on which it is taken to have
    // been trained; the report says what was done.
    const data::Dataset& d = *run.dataset;
    const models::GridPlacement placement{d.full_lat(), d.full_lon(), d.region_rows(), d.region_cols()};
    const models::ModelShape trained_grid = checkpoint_grid(*from.init_from, t.init_from).value_or(models::ModelShape{});
    auto report = transfer_weights(m, from.init_from->model, old_channels.inputs, old_channels.outputs,
                                   run.layout.input_names(), run.layout.output_names(), t.strict, t.init_from,
                                   placement, trained_grid);
    if (!run.is_root()) return;
    std::cerr << "init_from " << t.init_from << ": " << report.summary() << "\n";
    if (report.loaded_share < ChannelTransferReport::kFewLoaded) {
      char share[32];
      std::snprintf(share, sizeof share, "%.1f%%", 100.0 * report.loaded_share);
      std::cerr << "warning: init_from " << t.init_from << " loaded only " << share
                << " of the model's values (" << report.loaded.size() + report.remapped.size() << " of "
                << report.loaded.size() + report.remapped.size() + report.initialised.size()
                << " tensors); the rest start from scratch: is [model] the checkpoint's?\n";
    }
  };
}

// The model, optimizer and DataParallel on the device. A resumed run continues with the
// checkpoint's optimizer state, loss scale and CPU generator; a new one broadcasts rank 0's weights.
void build_state(Run& run, const StartingPoint& from) {
  auto comm = distributed::make_communicator(run.world, run.config.distributed, run.device);
  run.state = build_training_state(run.config, models::model_shape(run.config), comm, run.device,
                                   run.dataset->has_coordinates() ? run.dataset->lat() : std::vector<double>{},
                                   weight_init(run, from), run.residual_scale);
  if (run.dataset->point_set()) {
    // The dataset's cell areas: the same as the shape's for a whole grid, the Gaussian weights
    // still for a region cut from one (data/grid.h).
    torch::Tensor w = torch::tensor(run.dataset->grid().areas, torch::kFloat64);
    run.state->lat_weights = (w / w.mean()).to(torch::kFloat32).view({1, run.dataset->num_lon()}).to(run.device);
  }
  auto& parallel = *run.state->parallel;
  if (!from.resume_from) {
    parallel.broadcast_parameters();
    return;
  }
  parallel.load_optimizer_state(from.resume_from->optimizer);
  if (!from.resume_from->scaler.empty()) run.state->scaler.load_state(from.resume_from->scaler);
  if (from.resume_from->rng_state.defined()) {
    at::Generator cpu_generator = at::globalContext().defaultGenerator(torch::Device(torch::kCPU));
    cpu_generator.set_state(from.resume_from->rng_state);
  }
  restore_noise_state(run, *from.resume_from);
}

// This rank's share of the training samples, at the checkpoint's position when resuming.
void open_loader(Run& run, const StartingPoint& from) {
  const TrainConfig& t = run.config.train;
  data::LoaderOptions options = data::LoaderOptions::from_config(run.config, t.batch_size, t.seed);
  // Sharded by data-parallel group: the ranks of an ensemble group (or of a model-parallel group)
  // read the same samples.
  const EnsembleLayout groups =
      ensemble_layout(run.world.rank, run.world.size, run.config.distributed.sample_group());
  options.rank = groups.group;
  options.world_size = groups.groups;
  options.device = run.device;
  run.loader = std::make_unique<data::Loader>(run.dataset, run.normalization,
                                              run.split->sample_times(data::Split::kTrain), options);
  if (from.resume_from) run.loader->set_state(from.resume_from->loader);
}

// Rank 0's header: the model, grid and batches per epoch; the effective batch and how the step
// runs; the loss weights; the rollout curriculum and the residual scales where they are used.
void print_header(const Run& run) {
  const RunConfig& config = run.config;
  const TrainConfig& t = config.train;
  const int64_t group = config.distributed.ensemble_group, data_parallel = run.world.size / config.distributed.sample_group();
  const int64_t model_parallel = config.distributed.model_parallel;
  std::cerr << "wxtrain train: " << config.model.name << " on " << run.dataset->num_variables() << " channels, grid "
            << run.dataset->num_lat() << " x " << run.dataset->num_lon() << ", " << run.loader->batches_per_epoch()
            << " batches/epoch/rank\n"
            << "effective batch " << t.batch_size * t.accumulation * data_parallel << " = micro-batch "
            << t.batch_size << " x accumulation " << t.accumulation << " x "
            << (group > 1 ? std::to_string(data_parallel) + " ensemble group(s) of " + std::to_string(group) + " ranks"
                : model_parallel > 1
                    ? std::to_string(data_parallel) + " model-parallel group(s) of " + std::to_string(model_parallel) +
                          " ranks, each rank a band of the grid"
                    : std::to_string(run.world.size) + " rank(s)")
            << "; precision " << to_string(t.precision) << ", checkpointing " << describe_checkpointing(t)
            << ", ZeRO-" << config.distributed.zero_stage
            << (run.options.resume ? ", resuming at step " + std::to_string(run.first_step) : "") << "\n"
            << describe_loss_weights(config) << "\n";
  if (const ModelParallelSetup& mp = run.state->model_parallel; mp.on()) {
    // What one halo exchange moves: forward, an all-gather of every rank's send rows; backward, a
    // reduce-scatter of the same size. One each way per message-passing layer and rollout step
    // (a checkpointed layer's replay fetches its halo again).
    const auto& model = *run.state->model;
    const int64_t nodes = model.halo_exchange_nodes(), width = model.halo_node_width();
    const int64_t bytes = nodes * width * t.batch_size * (t.precision == Precision::kBf16 ? 2 : 4);
    std::cerr << "model parallel: " << mp.size << " ranks per sample, bands of";
    for (size_t r = 0; r < mp.sizes.size(); ++r) std::cerr << (r ? ", " : " ") << mp.sizes[r];
    std::cerr << (mp.dim == -2 ? " latitude rows" : " cells") << "; halo exchange: " << nodes << " nodes x " << width
              << " latents, " << bytes << " bytes per micro-batch of " << t.batch_size
              << " (each way, per message-passing layer)\n";
    // The models whose encoder and decoder cross to a second node set run one exchange more before
    // each (once per rollout step): GraphCast's grid embeddings and mesh latents, AIFS's input rows
    // (in_channels wide) and hidden latents.
    const models::WeatherModelImpl::MapperHalos h = model.mapper_halos();
    const int64_t value_bytes = t.precision == Precision::kBf16 ? 2 : 4;
    if (h.encoder_nodes > 0 || h.decoder_nodes > 0)
      std::cerr << "model parallel: encoder halo " << h.encoder_nodes << " nodes x " << h.encoder_width << " values, "
                << h.encoder_nodes * h.encoder_width * t.batch_size * value_bytes << " bytes; decoder halo "
                << h.decoder_nodes << " nodes x " << h.decoder_width << " values, "
                << h.decoder_nodes * h.decoder_width * t.batch_size * value_bytes
                << " bytes (each way, per micro-batch and rollout step)\n";
  }
  if (t.ensemble())
    std::cerr << "ensemble: " << t.ensemble_members << " members per sample (the model runs "
              << t.batch_size * t.ensemble_members / group << " rows per micro-batch"
              << (group > 1 ? " on each rank, " + std::to_string(t.ensemble_members / group) +
                                  " members per sample on each of the group's " + std::to_string(group) +
                                  " ranks, gathered for the loss"
                            : std::string())
              << "), afCRPS loss with alpha " << t.crps_alpha
              << ", " << t.noise_channels << " noise channel(s) of std " << t.noise_std
              << (t.conditional_noise() ? " redrawn every rollout step, taken through the processor's conditional "
                                          "LayerNorms (train.noise_injection)\n"
                                        : " appended to the input, redrawn every rollout step\n");
  if (!t.rollout_schedule.empty()) {
    std::cerr << "rollout curriculum:";
    for (size_t i = 0; i < t.rollout_schedule.size(); ++i) {
      const auto& [from, steps] = t.rollout_schedule[i];
      std::cerr << (i ? ", " : " ") << steps << (i ? "" : " step(s)") << " from step " << from;
    }
    std::cerr << "\n";
  }
  if (run.residual_scale.defined()) {
    std::cerr << "residual normalisation: tendency scale (one-step difference std / state std)";
    const auto names = run.layout.prognostic_names();
    for (size_t i = 0; i < names.size(); ++i) {
      char v[32];
      std::snprintf(v, sizeof v, "%.3g", run.residual_scale[static_cast<int64_t>(i)].item<double>());
      std::cerr << (i ? ", " : " ") << names[i] << " " << v;
    }
    std::cerr << "\n";
  }
}

// The setup, in the order its lines print: samples and validation, init_from's transfer, header.
void start_run(Run& run) {
  run.world = distributed::current_world();
  // A world that distributed.ensemble_group does not divide is refused before anything is written.
  ensemble_layout(run.world.rank, run.world.size, run.config.distributed.ensemble_group);
  if (const int64_t mp = run.config.distributed.model_parallel; run.world.size % mp != 0)
    throw ConfigError(run.config.path + ": distributed.model_parallel = " + std::to_string(mp) +
                      " does not divide the world of " + std::to_string(run.world.size) +
                      " rank(s): launch a multiple of it (mpirun -np " + std::to_string(mp) + " or more), or set "
                      "model_parallel to a divisor of the world size");
  run.device = resolve_device(run.config.train.device, run.world.local_rank);
  run.layout = run.config.channels();
  make_directories(run.config.train.out_dir);
  split_samples(run);
  const StartingPoint from = load_starting_point(run);
  run.normalization = choose_normalization(run, from);
  if (run.is_root()) {
    if (const std::string missing = run.normalization.missing().report(); !missing.empty()) std::cerr << missing << "\n";
  }
  run.residual_scale = residual_scale_for(run);
  build_state(run, from);
  // Model parallelism: the dataset's band (split_samples) is the training state's.
  if (const ModelParallelSetup& mp = run.state->model_parallel; mp.on()) {
    TORCH_CHECK(run.dataset->band_begin() == mp.start && run.dataset->band_length() == mp.length,
                "model parallel: the dataset's band (", run.dataset->band_begin(), ", ", run.dataset->band_length(),
                ") is not the training state's (", mp.start, ", ", mp.length, ")");
    run.band_read_from = run.dataset->archive_bytes_read();  // after the statistics' whole-grid pass
  }
  open_loader(run, from);
  if (from.resume_from) run.first_step = run.saved_step = from.resume_from->step;
  if (run.is_root()) print_header(run);
  install_stop_handlers();
}

// ---- The loop: step, metrics row, progress line, validation, checkpoint. ----

// Just before the first step (so a run that fails to start takes nothing over), on rank 0: this
// run's run.toml and command.txt, the rows a resumed run redoes dropped, and the tracker opened
// (metrics.csv and the sinks of [tracking]). Other ranks log nothing.
std::unique_ptr<tracking::Tracker> open_run_files(const Run& run) {
  if (!run.is_root()) return nullptr;
  record_run(run.config, run.source, run.options, run.first_step, run.world.size);
  if (run.options.resume) {
    drop_rows_after(in_out_dir(run.config, "metrics.csv"), run.first_step);
    drop_rows_after(in_out_dir(run.config, "validation.csv"), run.first_step);
  }
  tracking::RunIdentity identity;
  identity.run_file_text = apply_overrides_to_text(run.source.text, run.source.overrides);
  identity.command_line = run.options.command_line;
  identity.world_size = run.world.size;
  identity.resume = run.options.resume;
  return tracking::open_tracker(run.config, tracking_config(run.source.text, run.config.path, run.source.overrides),
                                identity);
}

class TrainingLoop {
 public:
  explicit TrainingLoop(Run& run)
      : run_(run), t_(run.config.train), meter_(memory_meter(run.device)), tracker_(open_run_files(run)),
        progress_(run.first_step, run.config.train.steps), step_runner_(*run.state), step_(run.first_step),
        validation_csv_started_(run.options.resume) {}

  // Steps to train.steps or to a stop request; a file that cannot be written (full disk, I/O
  // error) ends the run with what the user can do.
  TrainSummary run() {
    summary_.first_step = run_.first_step;
    summary_.checkpoint = checkpoint_path(run_.config);
    const auto start = Clock::now();
    try {
      while (step_ < t_.steps && step_once()) {
      }
      finish_progress();
      const bool validated_last_step = t_.val_every > 0 && step_ % t_.val_every == 0;
      if (!summary_.stopped_early && step_ == t_.steps && step_ > run_.first_step && !validated_last_step)
        validate_now();
      if (tracker_) tracker_->close(summary_.stopped_early ? tracking::RunStatus::kStopped : tracking::RunStatus::kFinished);
    } catch (const WriteError& e) {
      finish_progress();
      throw WriteError(e.path(), e.error_number(), after_write_failure(run_));
    }
    summary_.last_step = step_;
    const double total = std::chrono::duration<double>(Clock::now() - start).count();
    summary_.samples_per_s = total > 0 ? static_cast<double>(samples_seen_) / total : 0.0;
    return summary_;
  }

 private:
  // One optimizer step and what follows it; false when the run stops before train.steps.
  bool step_once() {
    const auto t0 = Clock::now();
    const std::vector<MicroBatch> micro = next_micro_batches();
    const double lr = learning_rate(t_, step_);
    meter_.reset_peak();
    const int64_t rollout = run_.config.rollout_at(step_);
    StepResult r = step_runner_.run(micro, lr, rollout);
    if (step_ == run_.first_step) print_band_data();
    // Each rank's loss is over its own shard: log the mean over ranks, the loss of the whole
    // effective batch (what one process with that batch reports).
    if (run_.world.size > 1) r.loss = run_.state->comm->sum(r.loss) / run_.world.size;
    if (!r.applied && !run_.state->scaler.enabled()) stop_on_non_finite_loss(r);
    ++step_;
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    samples_seen_ += t_.batch_size * t_.accumulation;
    log_step(r, lr, rollout, seconds);
    if (t_.val_every > 0 && step_ % t_.val_every == 0) validate_now();
    return checkpoint_or_stop();
  }

  // Model parallelism, after the first step (a collective): what each rank of a group holds and
  // reads, measured: rank 0's micro-batch bytes (its band's) against its group's sum (one
  // process's whole batch), and the archive bytes each read for its samples since set_band.
  void print_band_data() {
    const ModelParallelSetup& mp = run_.state->model_parallel;
    if (!mp.on()) return;
    const auto batch = static_cast<double>(run_.loader->batch_bytes());
    const auto read = static_cast<double>(run_.dataset->archive_bytes_read() - run_.band_read_from);
    const double groups = static_cast<double>(run_.world.size / mp.size);
    const double batch_sum = run_.state->comm->sum(batch) / groups, read_sum = run_.state->comm->sum(read) / groups;
    if (!run_.is_root()) return;
    char line[512];
    std::snprintf(line, sizeof line,
                  "model parallel data: rank 0 reads its band of %lld of %lld %s; its micro-batch is %.0f bytes of "
                  "its group's %.0f (1/%.2f); archive bytes read for its samples so far: %.0f of its group's %.0f%s\n",
                  static_cast<long long>(mp.length), static_cast<long long>(mp.extent),
                  mp.dim == -2 ? "latitude rows" : "cells", batch, batch_sum, batch > 0 ? batch_sum / batch : 0.0, read,
                  read_sum,
                  run_.dataset->preloaded() ? " (the data was small enough to read whole at open; each rank keeps its band)"
                                            : "");
    std::cerr << line;
  }

  std::vector<MicroBatch> next_micro_batches() {
    std::vector<MicroBatch> micro;
    for (int64_t m = 0; m < t_.accumulation; ++m) {
      data::Batch b = next_batch();
      micro.push_back({b.input, b.forcings, b.target, b.target_mask});
    }
    return micro;
  }

  // Across an epoch's end; with train.val_every = 0 each epoch ends with a validation.
  data::Batch next_batch() {
    if (auto b = run_.loader->next()) return std::move(*b);
    if (t_.val_every == 0) validate_now();
    if (auto b = run_.loader->next()) return std::move(*b);
    throw Error("the data loader produced no batch for a new epoch");
  }

  // Without a loss scaler the step was not applied, so the weights are still the last good ones:
  // keep them and stop with what to change.
  [[noreturn]] void stop_on_non_finite_loss(const StepResult& r) {
    save(run_, step_);
    throw Error("non-finite loss or gradients at step " + std::to_string(step_ + 1) + " (loss " +
                std::to_string(r.loss) + "); saved the last good state to " + checkpoint_path(run_.config) +
                " — lower train.lr, raise train.warmup_steps or enable train.grad_clip");
  }

  // The step's row in metrics.csv and the progress line, on rank 0.
  void log_step(const StepResult& r, double lr, int64_t rollout, double seconds) {
    StepMetrics m;
    m.step = step_;
    m.epoch = run_.loader->state().epoch;
    m.loss = r.loss;
    m.lr = lr;
    m.grad_norm = r.grad_norm;
    m.loss_scale = r.loss_scale;
    // Samples the whole job takes per step: the ranks of an ensemble or model-parallel group share
    // theirs, so the data-parallel groups count, not the ranks.
    const int64_t data_parallel = run_.world.size / run_.config.distributed.sample_group();
    m.samples_per_s = static_cast<double>(t_.batch_size * t_.accumulation * data_parallel) / seconds;
    const MemorySnapshot mem = meter_.snapshot();
    m.allocated_gb = mem.allocated / kGB;
    m.reserved_gb = mem.reserved / kGB;
    m.peak_gb = mem.peak / kGB;
    m.applied = r.applied;
    m.rollout = rollout;
    summary_.last_loss = r.loss;
    if (!run_.is_root()) return;
    tracker_->step(m);
    if (!run_.options.quiet) progress_.update(m, t_.log_every);
  }

  // Saves on train.checkpoint_every, at the last step and on a stop request (SIGINT/SIGTERM,
  // --stop-after), which every rank obeys at the same step; false when the stop ends the run early.
  bool checkpoint_or_stop() {
    const TrainOptions& o = run_.options;
    const bool local_stop = stop_requested() || (o.stop_after > 0 && step_ - run_.first_step >= o.stop_after);
    const bool stop = run_.state->comm->any(local_stop);
    if (stop || (t_.checkpoint_every > 0 && step_ % t_.checkpoint_every == 0) || step_ == t_.steps) {
      if (tracker_) tracker_->flush();  // the records reach the checkpoint's step before it exists
      save(run_, step_);
    }
    if (!stop || step_ >= t_.steps) return true;
    summary_.stopped_early = true;
    if (run_.is_root()) {
      progress_.finish();
      std::cerr << "stopped at step " << step_ << "; checkpoint saved to " << checkpoint_path(run_.config)
                << " (continue with --resume)\n";
    }
    return false;
  }

  // A run without validation samples does not validate.
  void validate_now() {
    if (run_.val_times.empty()) return;
    Validation v = validate(run_, step_);
    if (run_.is_root()) {
      print_validation(v);
      write_validation(run_.config, v, validation_csv_started_);
      tracker_->scalars(validation_scalars(v));
      tracker_->artifact(in_out_dir(run_.config, "validation.svg"));
    }
    summary_.validations.push_back(v);
  }

  void finish_progress() {
    if (run_.is_root() && !run_.options.quiet) progress_.finish();
  }

  Run& run_;
  const TrainConfig& t_;
  MemoryMeter& meter_;
  std::unique_ptr<tracking::Tracker> tracker_;  // rank 0's: metrics.csv, TensorBoard, MLflow
  ProgressLine progress_;
  TrainingStep step_runner_;
  TrainSummary summary_;
  int64_t step_;
  int64_t samples_seen_ = 0;
  bool validation_csv_started_;
};

}  // namespace

// This run's statistics, with those of the channels the pretrained model also had replaced by the
// pretrained ones: its weights were trained on inputs scaled that way.
data::Normalization keep_pretrained_statistics(const data::Normalization& fresh, const data::Normalization& pretrained) {
  torch::Tensor mean = fresh.mean().clone(), std = fresh.std().clone();
  torch::Tensor diff = fresh.diff_std().defined() ? fresh.diff_std().clone() : torch::Tensor();
  const auto& old_names = pretrained.names();
  for (size_t i = 0; i < fresh.names().size(); ++i) {
    auto it = std::find(old_names.begin(), old_names.end(), fresh.names()[i]);
    if (it == old_names.end()) continue;
    const int64_t j = it - old_names.begin(), k = static_cast<int64_t>(i);
    mean[k] = pretrained.mean()[j];
    std[k] = pretrained.std()[j];
    if (diff.defined() && pretrained.diff_std().defined() && std::isfinite(pretrained.diff_std()[j].item<float>()))
      diff[k] = pretrained.diff_std()[j];
  }
  data::Normalization out(fresh.names(), mean, std);
  if (diff.defined()) out.set_diff_std(diff);
  out.set_missing(fresh.missing());  // this run's data
  return out;
}

void check_run_folder(const RunConfig& config, const TrainOptions& options) {
  if (options.resume && options.overwrite)
    throw ConfigError("--resume and --overwrite contradict each other: --resume continues the run in train.out_dir = \"" +
                      config.train.out_dir + "\", --overwrite replaces it");
  if (options.resume || options.overwrite) return;
  std::vector<std::string> present;
  for (const auto& name : run_files())
    if (fs::exists(in_out_dir(config, name))) present.push_back(name);
  if (present.empty()) return;
  std::string files;
  for (const auto& name : present) files += (files.empty() ? "" : ", ") + name;
  const std::string& dir = config.train.out_dir;
  const bool resumable = present.front() == "checkpoint.pt";
  throw ConfigError("train.out_dir = \"" + dir + "\" already holds another run (" + files + "): " +
                    (resumable ? "continue it with --resume, " : "") +
                    "start afresh with --overwrite (replaces that run's files), or give this run its own folder, "
                    "e.g. --set train.out_dir=" + dir + "_2");
}


TrainSummary train(const RunConfig& config, std::shared_ptr<data::Dataset> dataset, const RunSource& source,
                   const TrainOptions& options) {
  Run run;
  run.config = config;
  run.dataset = std::move(dataset);
  run.source = source;
  run.options = options;
  start_run(run);
  return TrainingLoop(run).run();
}

}  // namespace wxtrain::trainer
