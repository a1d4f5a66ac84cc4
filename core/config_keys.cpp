#include "core/config_keys.h"

#include <algorithm>
#include <map>

#include "core/config.h"
#include "core/config_reader.h"

namespace wxtrain {

namespace {

// What each key means, and a type where the parser's own word would mislead. The parser records
// key, type, default and range itself; a key missing here still appears, with no description.
const std::map<std::string, std::pair<std::string, std::string>>& key_docs() {
  static const std::map<std::string, std::pair<std::string, std::string>> docs = {
      {"model.name", {"", "architecture from the zoo"}},
      {"model.preset", {"", "a published configuration (docs/estimator.md): its [model] keys, and for a run file "
                            "without sources its [data] shape; keys set here win"}},
      {"data.sources", {"array of tables", "[[data.sources]]: one variable from one file each (keys below)"}},
      {"data.sources.file", {"", "NetCDF file, Zarr store or GRIB file (required); relative to the run file's folder"}},
      {"data.sources.variable", {"", "the variable's name in the file (required)"}},
      {"data.sources.name", {"", "wxtrain's name for it (default: variable); unique"}},
      {"data.sources.levels", {"", "level coordinate values to take, one channel <name>_<level> each"}},
      {"data.sources.role", {"", "prognostic (input and predicted), forcing (input only) or diagnostic (predicted only)"}},
      {"data.static", {"array of tables", "[[data.static]]: constant 2-D input fields (keys below)"}},
      {"data.static.file", {"", "file holding the field (required); relative to the run file's folder"}},
      {"data.static.variable", {"", "the field's name in the file (required)"}},
      {"data.static.name", {"", "wxtrain's name for it (default: variable); unique"}},
      {"data.static.regrid", {"", "none: on the data's grid; nearest: nearest point of another lat/lon grid"}},
      {"data.forcings", {"", "computed input forcings, each at the step's valid time: " + join_list(computed_forcing_names())}},
      {"data.time_origin", {"", "date of the first state for data without CF time units (with time_step)"}},
      {"data.region", {"", "{ lat = [south, north], lon = [west, east] }: crop every source (west > east crosses 0/360)"}},
      {"data.region.lat", {"", "[south, north] in degrees"}},
      {"data.region.lon", {"", "[west, east] in degrees"}},
      {"data.boundary", {"", "cells of the region's frame overwritten by the truth each step and kept out of the loss"}},
      {"data.variables", {"", "without sources: prognostic channel names, to estimate without data"}},
      {"data.diagnostic_variables", {"", "without sources: predicted-only channel names"}},
      {"data.forcing_variables", {"", "without sources: input-only channel names from files"}},
      {"data.grid", {"", "without sources: [lat, lon], or a reduced Gaussian grid by name: \"n320\" (classic, ecCodes' points per row; n32 too) or \"o<N>\" (octahedral), a point set of generated cells"}},
      {"data.history", {"", "input states per sample"}},
      {"data.rollout_steps", {"", "predicted states per sample (autoregressive); or train.rollout_schedule"}},
      {"data.val_fraction", {"", "trailing share of the time axis for validation (0 = none); set here, too few states "
                                     "for one validation sample is an error, by default a warning"}},
      {"data.time_step", {"", "the model's step, a multiple of the data's spacing: \"6h\", \"1d\", or calendar months \"1mo\", \"3mo\", \"1y\" (= 12mo); \"\" = the data's spacing (1mo for monthly data)"}},
      {"data.train_period", {"", "[first, last] dates of training samples (with val_period)"}},
      {"data.val_period", {"", "[first, last] dates of validation samples (with train_period)"}},
      {"data.prefetch", {"", "background loader workers (0 = load inline)"}},
      {"data.queue_depth", {"", "batches buffered ahead"}},
      {"data.load_delay_ms", {"", "artificial delay per batch (benchmarks)"}},
      {"train.batch_size", {"integer or \"auto\"", "micro-batch per rank; \"auto\" tunes it first"}},
      {"train.accumulation", {"", "micro-batches per optimizer step"}},
      {"train.precision", {"", "fp32, autocast mixed (bf16/fp16), or pure bf16 with fp32 master weights"}},
      {"train.checkpointing", {"", "recompute each block in backward (activation checkpointing)"}},
      {"train.rollout_checkpointing",
       {"", "keep only each rollout step's input and replay the step in backward (long rollouts)"}},
      {"train.optimizer", {"", "optimizer"}},
      {"train.lr", {"", "peak learning rate"}},
      {"train.weight_decay", {"", "decoupled (adamw) or L2 (adam, sgd) weight decay"}},
      {"train.momentum", {"", "sgd: momentum (0 = none)"}},
      {"train.beta1", {"", "adam, adamw: first-moment decay"}},
      {"train.beta2", {"", "adam, adamw: second-moment decay"}},
      {"train.eps", {"", "adam, adamw: denominator term"}},
      {"train.steps", {"", "optimizer steps in the run"}},
      {"train.warmup_steps", {"", "linear warmup steps, then cosine decay"}},
      {"train.min_lr_ratio", {"", "cosine floor as a fraction of lr"}},
      {"train.grad_clip", {"", "max global gradient norm (0 = off)"}},
      {"train.seed", {"", "model init, shuffling, dropout"}},
      {"train.device", {"", "auto, cpu, cuda or cuda:N"}},
      {"train.out_dir", {"", "the run's folder (relative to the working directory): checkpoint.pt, metrics.csv, "
                          "validation.csv, run.toml, command.txt"}},
      {"train.checkpoint_every", {"", "steps between checkpoints (0 = only at the end and on a stop)"}},
      {"train.log_every", {"", "steps between progress lines when not on a terminal"}},
      {"train.val_every", {"", "steps between validations (0 = at each epoch's end)"}},
      {"train.val_lead_steps", {"", "validation rollout length in steps (0 = the longest training rollout)"}},
      {"train.climatology_window", {"", "climatology: training states within this many days of the day of year"}},
      {"train.loss_weights", {"", "[train.loss_weights] channel or glob = weight (first match in file order)"}},
      {"train.level_weighting", {"", "uniform, linear (proportional to the level, as GraphCast) or table"}},
      {"train.level_weights", {"", "[train.level_weights] \"500\" = weight (level_weighting = \"table\")"}},
      {"train.rollout_schedule", {"", "curriculum: [[from step, rollout], ...]; replaces data.rollout_steps"}},
      {"train.residual_normalization", {"", "scale the predicted tendency by the std of one-step differences"}},
      {"train.prediction", {"", "the model predicts the \"tendency\" (next = newest + output) or the next \"state\" itself (FourCastNet, PhysicsNeMo)"}},
      {"train.loss_scale", {"", "fp16-mixed: initial loss scale"}},
      {"train.scale_growth", {"", "fp16-mixed: scale factor after scale_interval finite steps"}},
      {"train.scale_backoff", {"", "fp16-mixed: scale factor after a non-finite step"}},
      {"train.scale_interval", {"", "fp16-mixed: finite steps before the scale grows"}},
      {"train.init_from", {"", "checkpoint whose weights start this run (\"\" = none; relative to the run file's "
                            "folder); one of which no tensor fits the model is an error"}},
      {"train.strict", {"", "init_from: every name must match"}},
      {"train.freeze", {"", "glob patterns of parameter names to freeze"}},
      {"train.frozen_lr_scale", {"", "lr multiplier of frozen groups (0 = frozen)"}},
      {"train.ensemble_members", {"", "members per sample, trained jointly on the afCRPS (1 = deterministic); the "
                                      "model runs batch_size x members inputs"}},
      {"train.crps_alpha", {"", "afCRPS alpha: 1 = fair CRPS, 0 = kernel CRPS (ensembles)"}},
      {"train.noise_channels", {"", "noise fields appended to an ensemble member's input, redrawn every rollout step"}},
      {"train.noise_std", {"", "standard deviation of the ensemble's noise fields"}},
      {"train.noise_correlation", {"", "correlation of a member's noise fields from one rollout step to the next "
                                       "(AR(1) in time): 0 redraws them every step, 1 keeps them for the whole rollout"}},
      {"train.noise_injection", {"", "how the model takes the noise: input (extra input channels, every model) or "
                                     "conditional_norm (anemoi's noise-conditioned LayerNorms: aifs, vit)"}},
      {"train.loss", {"", "auto (mse for one member, crps for an ensemble), mse, or crps (the afCRPS over the members)"}},
      {"memory.limit", {"", "device budget for tune-batch and estimate (0 = the device's size)"}},
      {"memory.margin", {"", "share of the budget tune-batch keeps free"}},
      {"memory.multiple_of", {"", "tune-batch keeps batch sizes multiples of this"}},
      {"memory.max_batch", {"", "tune-batch never goes above"}},
      {"memory.probe_steps", {"", "training steps per tune-batch probe"}},
      {"distributed.zero_stage", {"", "0 = DDP, 1-2 = ZeRO (sharded optimizer state, gradients), 3 = also the parameters, gathered per block"}},
      {"distributed.world_size", {"", "ranks for estimate (0 = from MPI)"}},
      {"distributed.bucket_mb", {"", "gradient bucket size in MB"}},
      {"distributed.backend", {"", "collectives: auto, mpi or nccl"}},
      {"distributed.ensemble_group", {"", "consecutive ranks sharing one ensemble: they read the same samples and each "
                                          "holds train.ensemble_members / ensemble_group members (must divide both the "
                                          "members and the world size)"}},
      {"distributed.model_parallel", {"", "consecutive ranks sharing one sample, each holding a band of the grid's cells "
                                          "and exchanging halo nodes (gnn, graphcast, aifs; must divide the world size)"}},
      {"tracking.mlflow_uri", {"", "MLflow tracking server, http(s)://host:port (\"\" = off); what it cannot take waits "
                                   "in <out_dir>/mlflow/ for `wxtrain sync`"}},
      {"tracking.experiment", {"", "MLflow experiment of the run (created if missing)"}},
      {"tracking.run_name", {"", "MLflow run name and TensorBoard subfolder (\"\" = the run folder's name)"}},
      {"tracking.tags", {"", "[tracking.tags] name = \"text\": tags on the MLflow run"}},
      {"tracking.tensorboard", {"", "write TensorBoard event files as the run goes"}},
      {"tracking.tensorboard_dir", {"", "\"\" = event files in the run folder; else in <dir>/<run name>"}},
      {"tracking.checkpoint_max_size", {"", "upload checkpoint.pt to MLflow at the end when at most this large (0 = never)"}},
      {"tracking.timeout", {"", "seconds one request to the MLflow server may take"}},
      {"tracking.flush_timeout", {"", "seconds the end of a run waits for a reachable server; the rest waits for `wxtrain sync`"}},
  };
  return docs;
}

}  // namespace

std::vector<ConfigKey> config_keys() {
  // The smallest run file every section accepts: one source, so [[data.sources]]'s keys are read
  // too. Defaults are recorded from the structs before a key is read, so nothing here shows.
  std::vector<ConfigKey> keys;
  {
    KeyCatalogue catalogue(keys);
    (void)parse_config("[data]\nregion = { lat = [0, 1], lon = [0, 1] }\n[[data.sources]]\nfile = \"f\"\n"
                       "variable = \"v\"\n[[data.static]]\nfile = \"f\"\nvariable = \"s\"\n",
                       "config_keys");
  }
  for (auto& k : keys) {
    auto it = key_docs().find(k.key);
    if (it == key_docs().end()) continue;
    if (!it->second.first.empty()) k.type = it->second.first;
    k.doc = it->second.second;
  }
  // The parse above read the default model's keys as well; every model's own come from its schema,
  // after model.name and model.preset, each meaning prefixed with the model's name.
  keys.erase(std::remove_if(keys.begin(), keys.end(),
                            [](const ConfigKey& k) {
                              return k.key.rfind("model.", 0) == 0 && k.key != "model.name" && k.key != "model.preset";
                            }),
             keys.end());
  auto at = std::find_if(keys.begin(), keys.end(), [](const ConfigKey& k) { return k.key == "model.preset"; });
  at = at == keys.end() ? keys.begin() : at + 1;
  std::vector<ConfigKey> model_keys;
  for (const auto& schema : model_schemas())
    for (ConfigKey k : model_option_catalogue(schema)) {
      k.model = schema.name;
      k.doc = schema.name + ": " + k.doc;
      model_keys.push_back(k);
    }
  keys.insert(at, model_keys.begin(), model_keys.end());
  return keys;
}

std::string config_keys_markdown() {
  auto cell = [](const std::string& text) {
    std::string out;
    for (char ch : text) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
    return out;
  };
  std::string md =
      "# Run-file keys\n\n"
      "Every key of the run file (TOML) with its type, built-in default and accepted range. A value\n"
      "outside its range is an error naming the file, line and key (exit code 2). This file is\n"
      "generated from the parser itself (core/config.cpp, and for [model] each model's own options,\n"
      "models/<name>/<name>_options.cpp) by `wxtrain config-keys --markdown`; the CTest\n"
      "`docs.config_keys` fails when the two differ. A model reads only its own [model] keys; those of\n"
      "another model are accepted and ignored. Regenerate it with\n\n"
      "    build/cli/wxtrain config-keys --markdown > docs/config.md\n\n"
      "**Paths.** The files a run reads (`data.sources.file`, `data.static.file`, `train.init_from`)\n"
      "resolve against the run file's folder when relative, so a run file works from any directory;\n"
      "given with `--set` they resolve against the working directory. `train.out_dir`, an output, is\n"
      "relative to the working directory. Checkpoints and `<out_dir>/run.toml` record the paths\n"
      "absolute, so `wxtrain forecast` finds the data from anywhere.\n\n"
      "**Exit codes** (README, \"Exit codes\"): 0 done; 1 the work failed (data, a write, memory);\n"
      "2 the input is wrong (a run-file key or value, a duration or date, a command-line argument, a\n"
      "checkpoint that does not fit the run file); 3 the answer is no (`estimate` fits no GPU asked\n"
      "about, `profile --threshold` FAIL).\n";
  // Sections in the order the parser reads them, [[data.sources]] after the rest of [data].
  std::vector<ConfigKey> keys = config_keys();
  auto section_of = [](const ConfigKey& k) { return k.key.substr(0, k.key.rfind('.')); };
  std::vector<std::string> order;
  for (const auto& k : keys)
    if (std::find(order.begin(), order.end(), section_of(k)) == order.end()) order.push_back(section_of(k));
  auto rank = [&](const std::string& s) {
    const auto own = std::find(order.begin(), order.end(), s) - order.begin();
    // Sub-tables of [data] ([[data.sources]], [[data.static]], data.region) follow [data] itself.
    if (s.rfind("data.", 0) == 0)
      return 2.0 * static_cast<double>(std::find(order.begin(), order.end(), "data") - order.begin()) + 1 +
             static_cast<double>(own) / 1000.0;
    return 2.0 * static_cast<double>(own);
  };
  std::stable_sort(keys.begin(), keys.end(),
                   [&](const ConfigKey& a, const ConfigKey& b) { return rank(section_of(a)) < rank(section_of(b)); });
  std::string section;
  for (const auto& k : keys) {
    const std::string s = section_of(k);
    if (s != section) {
      section = s;
      md += "\n## " + (s == "data.sources" || s == "data.static" ? "[[" + s + "]]" : "[" + s + "]") + "\n\n";
      md += "| key | type | default | range | meaning |\n|---|---|---|---|---|\n";
    }
    md += "| `" + k.key.substr(s.size() + 1) + "` | " + cell(k.type) + " | " +
          (k.default_value.empty() ? "" : "`" + cell(k.default_value) + "`") + " | " + cell(k.range) + " | " +
          cell(k.doc) + " |\n";
  }
  return md;
}

}  // namespace wxtrain
