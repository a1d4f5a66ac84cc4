#include "trainer/trainer.h"

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/atomic_file.h"
#include "core/autocast.h"
#include "core/device.h"
#include "core/error.h"
#include "core/memory_meter.h"
#include "core/units.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/samples.h"
#include "distributed/communicator.h"
#include "trainer/checkpoint_io.h"
#include "trainer/lr_schedule.h"
#include "trainer/metrics_log.h"
#include "trainer/stop_signal.h"
#include "trainer/training_step.h"

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
  static const std::vector<std::string> files = {"checkpoint.pt", "metrics.csv", "validation.csv", "run.toml",
                                                 "command.txt"};
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
  }
  const std::string stamp = utc_now();
  write_file_atomically(in_out_dir(config, "run.toml"),
                        "# The run file of the run in this folder (from " + config.path + ", " + stamp +
                            "), with its --set values written in.\n" +
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

// Everything the loop touches, built once.
struct Run {
  RunConfig config;
  distributed::World world;
  torch::Device device{torch::kCPU};
  std::shared_ptr<data::Dataset> dataset;
  std::optional<data::TimeSplit> split;
  data::Normalization normalization;
  std::unique_ptr<TrainingState> state;
  std::unique_ptr<data::Loader> loader;
  int64_t saved_step = -1;  // the step checkpoint.pt holds (-1: none from this run yet)
  bool is_root() const { return world.rank == 0; }
};

Validation validate(Run& run, int64_t step) {
  const RunConfig& c = run.config;
  const auto window = run.split->window();
  data::LoaderOptions opts = data::LoaderOptions::from_config(c.data, c.train.batch_size, c.train.seed);
  opts.shuffle = false;
  opts.drop_last = false;
  opts.prefetch = 0;
  opts.rank = run.world.rank;
  opts.world_size = run.world.size;
  opts.device = run.device;
  data::Loader loader(run.dataset, run.normalization, run.split->sample_times(data::Split::kValidation), opts);
  const int64_t V = run.normalization.num_variables();
  torch::Tensor sums = torch::zeros({3, V}, torch::kFloat64);  // model sq err, persistence sq err, weight
  auto& model = *run.state->model;
  model.eval();
  {
    torch::NoGradGuard no_grad;
    const AutocastState autocast = autocast_for(c.train.precision, run.device);
    const auto dtype = c.train.precision == Precision::kBf16 ? torch::kBFloat16 : torch::kFloat32;
    while (auto batch = loader.next()) {
      torch::Tensor prediction;
      {
        AutocastGuard guard(autocast);
        prediction = rollout(model, batch->input.to(dtype), 1, V).select(1, 0);
      }
      const int64_t B = batch->input.size(0);
      torch::Tensor newest = batch->input.view({B, window.history, V, batch->input.size(2), batch->input.size(3)})
                                 .select(1, window.history - 1);
      torch::Tensor truth = run.normalization.denormalize(batch->target.select(1, 0).cpu());
      torch::Tensor pred = run.normalization.denormalize(prediction.cpu());
      torch::Tensor persist = run.normalization.denormalize(newest.cpu());
      torch::Tensor w = run.state->lat_weights.cpu().view({1, 1, -1, 1}).expand_as(truth);
      if (batch->target_mask.defined()) w = w * batch->target_mask.select(1, 0).cpu();
      const std::vector<int64_t> dims = {0, 2, 3};
      sums[0] += ((pred - truth).square() * w).sum(dims).to(torch::kFloat64);
      sums[1] += ((persist - truth).square() * w).sum(dims).to(torch::kFloat64);
      sums[2] += w.sum(dims).to(torch::kFloat64);
    }
  }
  model.train();
  torch::Tensor on_device = sums.to(run.device);  // NCCL reduces device tensors only
  run.state->comm->allreduce(on_device);
  sums = on_device.cpu();
  Validation v;
  v.step = step;
  v.names = run.normalization.names();
  for (int64_t i = 0; i < V; ++i) {
    const double weight = std::max(sums[2][i].item<double>(), 1e-30);
    v.model_rmse.push_back(std::sqrt(sums[0][i].item<double>() / weight));
    v.persistence_rmse.push_back(std::sqrt(sums[1][i].item<double>() / weight));
  }
  return v;
}

void print_validation(const Validation& v) {
  std::ostringstream out;
  out << "validation at step " << v.step << " (RMSE, data units; lower is better)\n";
  char line[200];
  std::snprintf(line, sizeof line, "  %-10s %14s %14s %8s\n", "variable", "model", "persistence", "skill");
  out << line;
  for (size_t i = 0; i < v.names.size(); ++i) {
    std::snprintf(line, sizeof line, "  %-10s %14.5g %14.5g %7.1f%%\n", v.names[i].c_str(), v.model_rmse[i],
                  v.persistence_rmse[i], 100.0 * (1.0 - v.model_rmse[i] / std::max(v.persistence_rmse[i], 1e-30)));
    out << line;
  }
  std::cerr << out.str();
}

void append_validation_csv(const RunConfig& c, const Validation& v, bool& started) {
  const std::string path = in_out_dir(c, "validation.csv");
  // A new run starts the file afresh; a resumed run (started already set) appends.
  const bool fresh = !started || !fs::exists(path);
  AppendFile out(path, /*truncate=*/fresh);
  started = true;
  std::ostringstream rows;
  if (out.empty()) rows << "step,variable,model_rmse,persistence_rmse\n";
  for (size_t i = 0; i < v.names.size(); ++i)
    rows << v.step << "," << v.names[i] << "," << v.model_rmse[i] << "," << v.persistence_rmse[i] << "\n";
  out.append(rows.str());  // one validation's rows whole, or none of them
}

Checkpoint make_checkpoint(Run& run, int64_t step, const RunSource& source) {
  Checkpoint c;
  c.step = step;
  c.loader = run.loader->state();
  c.model = model_weights(*run.state->model);
  c.optimizer = run.state->parallel->optimizer_state();  // collective: every rank calls it
  c.scaler = run.state->scaler.state();
  c.normalization = run.normalization.to_map();
  c.rng_state = at::globalContext().defaultGenerator(torch::Device(torch::kCPU)).get_state();
  c.config_text = source.text;
  c.overrides = source.overrides;
  c.model_name = run.config.model.name;
  c.world_size = run.world.size;
  return c;
}

void save(Run& run, int64_t step, const RunSource& source) {
  Checkpoint c = make_checkpoint(run, step, source);
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

}  // namespace

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

TrainSummary train(const RunConfig& config, const RunSource& source, const TrainOptions& options) {
  Run run;
  run.config = config;
  run.world = distributed::current_world();
  const TrainConfig& t = config.train;
  // Rank 0 writes the folder's files; the others must not race it over them.
  if (run.world.rank == 0) check_run_folder(config, options);
  run.device = resolve_device(config.train.device, run.world.local_rank);
  make_directories(t.out_dir);

  run.dataset = std::make_shared<data::Dataset>(config.data);
  const data::SampleWindow window{config.data.history, config.data.rollout_steps};
  run.split.emplace(run.dataset->time_axis(), config.data, window);
  if (run.is_root()) std::cerr << data::describe_samples(*run.dataset, *run.split) << "\n";

  std::optional<Checkpoint> resume_from, init_from;
  const std::string ckpt_path = checkpoint_path(config);
  if (options.resume) {
    if (!std::filesystem::exists(ckpt_path))
      throw Error("--resume: no checkpoint at " + ckpt_path + " (train.out_dir = \"" + t.out_dir + "\")");
    resume_from = load_checkpoint(ckpt_path);
  } else if (!t.init_from.empty()) {
    init_from = load_checkpoint(t.init_from);
  }
  // A resumed or fine-tuned model keeps the normalisation it was trained with.
  const Checkpoint* pretrained = resume_from ? &*resume_from : init_from ? &*init_from : nullptr;
  if (pretrained && !pretrained->normalization.empty()) {
    run.normalization = data::Normalization::from_map(pretrained->normalization);
    if (run.normalization.names() != run.dataset->variable_names()) {
      auto join = [](const std::vector<std::string>& v) {
        std::string s;
        for (const auto& n : v) s += (s.empty() ? "" : ", ") + n;
        return s;
      };
      throw ConfigError(config.path + ": the checkpoint was trained on variables [" + join(run.normalization.names()) +
                        "] but [data] has [" + join(run.dataset->variable_names()) + "] (names and order must match)");
    }
  } else {
    run.normalization = data::Normalization::compute(*run.dataset, run.split->begin(data::Split::kTrain),
                                                     run.split->end(data::Split::kTrain));
  }

  models::ModelShape shape = models::model_shape(config);
  shape.lat = run.dataset->num_lat();
  shape.lon = run.dataset->num_lon();
  auto comm = distributed::make_communicator(run.world, config.distributed, run.device);
  ModelInit init;
  if (resume_from) {
    init = [&](models::WeatherModelImpl& m) { load_weights(m, resume_from->model, true, ckpt_path); };
  } else if (init_from) {
    init = [&](models::WeatherModelImpl& m) {
      auto report = load_weights(m, init_from->model, t.strict, t.init_from);
      if (run.is_root())
        std::cerr << "init_from " << t.init_from << ": loaded " << report.loaded.size() << " tensors, "
                  << report.missing.size() << " missing (newly initialised), " << report.unexpected.size()
                  << " unexpected (ignored)\n";
    };
  }
  run.state = build_training_state(config, shape, comm, run.device,
                                   run.dataset->has_coordinates() ? run.dataset->lat() : std::vector<double>{}, init);
  auto& parallel = *run.state->parallel;
  if (resume_from) {
    parallel.load_optimizer_state(resume_from->optimizer);
    if (!resume_from->scaler.empty()) run.state->scaler.load_state(resume_from->scaler);
    if (resume_from->rng_state.defined()) {
      at::Generator cpu_generator = at::globalContext().defaultGenerator(torch::Device(torch::kCPU));
      cpu_generator.set_state(resume_from->rng_state);
    }
  } else {
    parallel.broadcast_parameters();
  }

  data::LoaderOptions lo = data::LoaderOptions::from_config(config.data, t.batch_size, t.seed);
  lo.rank = run.world.rank;
  lo.world_size = run.world.size;
  lo.device = run.device;
  run.loader = std::make_unique<data::Loader>(run.dataset, run.normalization,
                                              run.split->sample_times(data::Split::kTrain), lo);
  if (resume_from) run.loader->set_state(resume_from->loader);

  const int64_t first_step = resume_from ? resume_from->step : 0;
  const int64_t effective = t.batch_size * t.accumulation * run.world.size;
  if (run.is_root()) {
    std::cerr << "wxtrain train: " << config.model.name << " on " << run.dataset->num_variables() << " channels, grid "
              << shape.lat << " x " << shape.lon << ", " << run.loader->batches_per_epoch() << " batches/epoch/rank\n"
              << "effective batch " << effective << " = micro-batch " << t.batch_size << " x accumulation "
              << t.accumulation << " x " << run.world.size << " rank(s); precision " << to_string(t.precision)
              << ", checkpointing " << (t.checkpointing ? "on" : "off") << ", ZeRO-" << config.distributed.zero_stage
              << (resume_from ? ", resuming at step " + std::to_string(first_step) : "") << "\n";
  }

  install_stop_handlers();
  MemoryMeter& meter = memory_meter(run.device);
  std::unique_ptr<MetricsCsv> csv;
  if (resume_from) run.saved_step = first_step;
  if (run.is_root()) {
    record_run(config, source, options, first_step, run.world.size);
    if (resume_from) {
      drop_rows_after(in_out_dir(config, "metrics.csv"), first_step);
      drop_rows_after(in_out_dir(config, "validation.csv"), first_step);
    }
    csv = std::make_unique<MetricsCsv>(in_out_dir(config, "metrics.csv"), options.resume);
  }
  ProgressLine progress(first_step, t.steps);
  TrainingStep step_runner(*run.state);

  TrainSummary summary;
  summary.first_step = first_step;
  summary.checkpoint = ckpt_path;
  int64_t step = first_step;
  int64_t samples_seen = 0;
  bool validation_csv_started = options.resume;
  const auto run_start = Clock::now();
  auto validate_now = [&]() {
    Validation v = validate(run, step);
    if (run.is_root()) {
      print_validation(v);
      append_validation_csv(config, v, validation_csv_started);
    }
    summary.validations.push_back(v);
  };
  auto next_batch = [&]() -> data::Batch {
    if (auto b = run.loader->next()) return std::move(*b);
    if (t.val_every == 0 && run.split->sample_times(data::Split::kValidation).size() > 0) validate_now();
    if (auto b = run.loader->next()) return std::move(*b);
    throw Error("the data loader produced no batch for a new epoch");
  };

  // A file that cannot be written (full disk, I/O error) ends the run with what the user can do.
  try {
    while (step < t.steps) {
      const auto t0 = Clock::now();
      std::vector<MicroBatch> micro;
      for (int64_t m = 0; m < t.accumulation; ++m) {
        data::Batch b = next_batch();
        micro.push_back({b.input, b.target, b.target_mask});
      }
      const double lr = learning_rate(t, step);
      meter.reset_peak();
      StepResult r = step_runner.run(micro, lr);
      // Each rank's loss is over its own shard: log the mean over ranks, the loss of the whole
      // effective batch (what one process with that batch reports).
      if (run.world.size > 1) r.loss = run.state->comm->sum(r.loss) / run.world.size;
      if (!r.applied && !run.state->scaler.enabled()) {
        // The step was not applied, so the weights are still the last good ones: keep them.
        save(run, step, source);
        throw Error("non-finite loss or gradients at step " + std::to_string(step + 1) + " (loss " +
                    std::to_string(r.loss) + "); saved the last good state to " + ckpt_path +
                    " — lower train.lr, raise train.warmup_steps or enable train.grad_clip");
      }
      ++step;
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      samples_seen += t.batch_size * t.accumulation;
      StepMetrics m;
      m.step = step;
      m.epoch = run.loader->state().epoch;
      m.loss = r.loss;
      m.lr = lr;
      m.grad_norm = r.grad_norm;
      m.loss_scale = r.loss_scale;
      m.samples_per_s = static_cast<double>(effective) / seconds;
      const MemorySnapshot mem = meter.snapshot();
      m.allocated_gb = mem.allocated / kGB;
      m.reserved_gb = mem.reserved / kGB;
      m.peak_gb = mem.peak / kGB;
      m.applied = r.applied;
      summary.last_loss = r.loss;
      if (run.is_root()) {
        csv->write(m);
        if (!options.quiet) progress.update(m, t.log_every);
      }
      if (t.val_every > 0 && step % t.val_every == 0) validate_now();

      const bool local_stop = stop_requested() || (options.stop_after > 0 && step - first_step >= options.stop_after);
      const bool stop = run.state->comm->any(local_stop);  // all ranks stop together
      if (stop || (t.checkpoint_every > 0 && step % t.checkpoint_every == 0) || step == t.steps)
        save(run, step, source);
      if (stop && step < t.steps) {
        summary.stopped_early = true;
        if (run.is_root()) {
          progress.finish();
          std::cerr << "stopped at step " << step << "; checkpoint saved to " << ckpt_path
                    << " (continue with --resume)\n";
        }
        break;
      }
    }
    if (run.is_root() && !options.quiet) progress.finish();
    const bool validated_last_step = t.val_every > 0 && step % t.val_every == 0;
    if (!summary.stopped_early && step == t.steps && step > first_step && !validated_last_step) validate_now();
  } catch (const WriteError& e) {
    if (run.is_root() && !options.quiet) progress.finish();
    throw WriteError(e.path(), e.error_number(), after_write_failure(run));
  }
  summary.last_step = step;
  const double total = std::chrono::duration<double>(Clock::now() - run_start).count();
  summary.samples_per_s = total > 0 ? static_cast<double>(samples_seen) / total : 0.0;
  return summary;
}

}  // namespace wxtrain::trainer
