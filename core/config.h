#pragma once
// The run file: one TOML file with [model], [data], [train], [memory], [distributed], parsed once
// into these typed structs (the schema: core/config.cpp, written with core/config_reader.h; the
// model's own [model] keys are read by the model's schema, core/model_options.h). Every field
// documents its key. Its text is edited in place by core/run_file_text.h; its keys are listed by
// core/config_keys.h. Nothing else in wxtrain reads TOML.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/model_options.h"

namespace wxtrain {

// How the training step computes: fp32; autocast mixed precision with fp32 parameters
// (bf16-mixed on CPU and CUDA, fp16-mixed on CUDA with a loss scaler); or pure bf16 parameters
// with fp32 master weights kept by the optimizer.
enum class Precision { kFp32, kBf16Mixed, kFp16Mixed, kBf16 };
std::string to_string(Precision p);
Precision parse_precision(const std::string& text);  // throws ConfigError naming the accepted values

// [model]: which architecture, and its own keys. The options struct is the model's
// (models/<name>/<name>_options.h); `options.as<UNetOptions>()` reads it, and a ModelConfig built
// in code without a run file holds that model's defaults until set.
struct ModelConfig {
  std::string name;    // model.name: a model of the registry (models/registry.cpp); by default its first
  std::string preset;  // model.preset: the published configuration it started from (ModelPreset)
  ModelOptionsBox options;
};

// The ranges and rules of the model's keys, checked on options set in code (models::build_model
// calls it): a ConfigError "model.<key> ..." as the run file would give, without file and line.
void check_model_options(const ModelConfig& config);
// The model's options as TOML lines ("channels = [32, 64, 128]\ngroups = 8\n"), every key.
std::string model_options_text(const ModelConfig& config);

// One variable taken from one file (NetCDF, a Zarr store's directory, GRIB); `name` is how wxtrain
// calls it (u in two files -> u10, u500). With `levels` the variable has a level dimension and each
// listed level, selected by its coordinate value, becomes a channel <name>_<level> (z_500, z_850).
//
// `role` says what the model does with it: "prognostic" (input and predicted, the default),
// "forcing" (input only, taken at each rollout step's valid time: never predicted, never in the
// loss) or "diagnostic" (predicted only, e.g. precipitation: in the loss, never fed back).
struct DataSource {
  std::string file;
  std::string variable;
  std::string name;
  std::vector<double> levels;
  std::string role = "prognostic";
};

// A constant 2-D input field ([[data.static]]): land-sea mask, orography. regrid "none" needs the
// data's grid (up to latitude order and the longitude convention); "nearest" takes it from any
// 1-D lat/lon grid.
struct StaticField {
  std::string file;
  std::string variable;
  std::string name;
  std::string regrid = "none";
};

// data.region: a latitude band and a longitude range cut out of every source. lon_min > lon_max
// (after wrapping to 0..360) crosses the 0/360 seam: lon = [350, 10] is 20 degrees wide.
struct Region {
  bool set = false;
  double lat_min = -90, lat_max = 90;
  double lon_min = 0, lon_max = 360;
};

// The computed forcings data.forcings accepts (data/forcings.h computes them).
const std::vector<std::string>& computed_forcing_names();

// The channel name of one level of a source: z at 500 -> "z_500" (0.5 -> "z_0.5").
std::string level_channel_name(const std::string& source_name, double level);

struct DataConfig {
  std::vector<DataSource> sources;  // [[data.sources]] file, variable, name, levels, role
  std::vector<StaticField> statics;  // [[data.static]] file, variable, name, regrid
  std::vector<std::string> forcings;  // data.forcings: computed forcings ("insolation", "cos_latitude", ...)
  // data.time_origin: the date of the first state for sources whose time axis has no CF units
  // (the storm files' bare timestep); with data.time_step it dates every state. "" = unused.
  std::string time_origin;
  Region region;                // data.region = { lat = [20, 55], lon = [230, 300] }
  int64_t boundary = 0;         // data.boundary: cells of the region's frame forced to the truth
  // Without sources (estimating a run whose data is elsewhere) the shape comes from here:
  std::vector<std::string> variables;  // data.variables: prognostic names, one channel each
  std::vector<std::string> diagnostic_variables;  // data.diagnostic_variables: predicted only
  std::vector<std::string> forcing_variables;     // data.forcing_variables: input-only channels from files
  int64_t lat = 0;                     // data.grid = [lat, lon]
  int64_t lon = 0;
  // data.grid = "n320" / "o96": a reduced Gaussian grid by name (data/named_grids.h); lat = 1 and
  // lon = its cells, the coordinates filled in by data::take_named_grid. "" = none.
  std::string grid_name;
  // Not keys: the grid's coordinates in degrees, filled in where the data is opened (setup_run,
  // train, forecast) for the models that place the grid on the sphere (graphcast). Empty: unknown,
  // and such a model assumes a regular global grid of lat x lon.
  std::vector<double> lat_coords, lon_coords;
  int64_t history = 2;          // data.history: input states per sample
  int64_t rollout_steps = 1;    // data.rollout_steps: predicted states per sample (autoregressive)
  bool rollout_steps_set = false;  // given in the run file (a train.rollout_schedule then conflicts)
  double val_fraction = 0.2;    // data.val_fraction: trailing share of the time axis for validation
  bool val_fraction_set = false;  // given in the run file: the run asked for validation
  // data.time_step: the model's step ("6h"): states this far apart form a sample; hourly data with
  // "6h" trains on every sixth state. "" = the spacing of the data.
  std::string time_step;
  // data.train_period / data.val_period: ["1979-01-01", "2015-12-31"], both ends included; when
  // given they split by date instead of val_fraction (a sample belongs to a period when all its
  // states do). Empty = unused.
  std::vector<std::string> train_period;
  std::vector<std::string> val_period;
  int64_t prefetch = 2;         // data.prefetch: background loader workers (0 = load inline)
  int64_t queue_depth = 4;      // data.queue_depth: batches buffered ahead
  double load_delay_ms = 0;     // data.load_delay_ms: artificial per-batch delay (benchmarks)
};

struct TrainConfig {
  int64_t batch_size = 8;       // train.batch_size: micro-batch per rank, or "auto" (tune first)
  bool batch_auto = false;
  int64_t accumulation = 1;     // train.accumulation: micro-batches per optimizer step
  Precision precision = Precision::kFp32;  // train.precision: fp32 | bf16-mixed | fp16-mixed | bf16
  bool checkpointing = false;   // train.checkpointing: recompute each block in backward
  // train.rollout_checkpointing: keep only each rollout step's input through the forward and
  // replay the whole step in backward (block by block again when checkpointing is on as well):
  // what lets a long rollout hold one step's activations instead of every step's.
  bool rollout_checkpointing = false;
  std::string optimizer = "adamw";  // train.optimizer: adamw | adam | sgd
  double lr = 1e-3;             // train.lr: peak learning rate
  double weight_decay = 0.01;   // train.weight_decay
  double momentum = 0.0;        // train.momentum (sgd; 0 = no momentum buffer)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // train.beta1 / beta2 / eps (adam, adamw)
  int64_t steps = 100;          // train.steps: optimizer steps in the run (>= 1)
  int64_t warmup_steps = 10;    // train.warmup_steps: linear warmup, then cosine decay
  double min_lr_ratio = 0.1;    // train.min_lr_ratio: cosine floor as a fraction of lr
  double grad_clip = 1.0;       // train.grad_clip: max global grad norm (0 = off)
  uint64_t seed = 0;            // train.seed: model init, shuffling, dropout
  std::string device = "auto"; // train.device: auto | cpu | cuda | cuda:N
  std::string out_dir = "runs/run";  // train.out_dir: checkpoints, metrics.csv
  int64_t checkpoint_every = 50;  // train.checkpoint_every: steps between checkpoints (0 = only at the end and on a stop)
  int64_t log_every = 1;        // train.log_every
  int64_t val_every = 0;        // train.val_every: steps between validations (0 = per epoch)
  int64_t val_lead_steps = 0;   // train.val_lead_steps: validation rollout length (0 = the longest training rollout)
  bool val_lead_steps_set = false;  // given in the run file: the run asked for validation
  int64_t climatology_window = 15;  // train.climatology_window: days either side of a day of year
  // Loss weights on top of the area weight: per channel by glob (train.loss_weights, t_850 = 1.0,
  // "q_*" = 0.5; the first pattern that matches wins, in file order), and by pressure level
  // (train.level_weighting: "uniform", "linear" = proportional to the level's value as GraphCast,
  // or "table" = train.level_weights, "500" = 1.0). Normalised to mean 1 over the predicted channels.
  std::vector<std::pair<std::string, double>> loss_weights;
  std::string level_weighting = "uniform";
  std::vector<std::pair<double, double>> level_weights;
  // train.rollout_schedule = [[0, 1], [2000, 2], [4000, 4]]: from step s on, roll out r steps
  // (a curriculum); empty = data.rollout_steps throughout.
  std::vector<std::pair<int64_t, int64_t>> rollout_schedule;
  // train.residual_normalization: the model's prognostic output is the tendency scaled by the
  // standard deviation of one-step differences over the training split (GraphCast), not by the
  // states' own standard deviation.
  bool residual_normalization = true;
  // train.prediction: what the model's prognostic output is. "tendency": the change from the newest
  // state (the next state is newest + output x residual scale, as GraphCast). "state": the next
  // (normalised) state itself, as FourCastNet and PhysicsNeMo's AFNO predict it: what a model
  // imported from, or exported to, a reference implementation needs to compute its forecast.
  std::string prediction = "tendency";
  // Loss scaler (fp16-mixed): dynamic scale as in torch.cuda.amp.GradScaler.
  double loss_scale = 65536.0;  // train.loss_scale: initial scale
  double scale_growth = 2.0;    // train.scale_growth
  double scale_backoff = 0.5;   // train.scale_backoff
  int64_t scale_interval = 2000;  // train.scale_interval: finite steps before growing
  // Fine-tuning
  std::string init_from;        // train.init_from: checkpoint whose weights start this run
  bool strict = true;           // train.strict: every name must match when loading init_from
  std::vector<std::string> freeze;  // train.freeze: glob patterns of parameter names
  double frozen_lr_scale = 0.0;     // train.frozen_lr_scale: lr multiplier of frozen groups (0 = frozen)
  // Ensembles (docs/ensembles.md): train.ensemble_members members per sample, each the
  // model run on the sample's input plus its own noise fields (train.noise_channels of
  // N(0, train.noise_std^2), appended to the input, redrawn every rollout step), trained jointly on
  // the almost-fair CRPS with train.crps_alpha (Lang et al. 2024). 1 = the deterministic model.
  int64_t ensemble_members = 1;
  double crps_alpha = 0.95;
  int64_t noise_channels = 4;
  double noise_std = 1.0;
  // train.noise_correlation: the noise's correlation from one rollout step to the next (an AR(1)
  // in time per member, each field keeping N(0, noise_std^2)): 0 redraws it every step, 1 keeps a
  // member's first fields for its whole rollout. Independent per-step noise makes the members'
  // spread grow as a random walk (sqrt of the lead) while forecast errors grow about linearly;
  // correlated noise lets the per-step perturbations add up (docs/ensembles.md).
  double noise_correlation = 0.0;
  // train.noise_injection: how the model takes the noise fields. "input": as its last input
  // channels (every model). "conditional_norm": anemoi's NoiseConditioning (AIFS-ENS): the fields
  // are still drawn and appended by the rollout (the same stream), but the model takes them out of
  // its input, embeds them by a small MLP on its processor's nodes and modulates the processor's
  // LayerNorms with them (zero-initialised, so an untrained model ignores the noise). Only models
  // with a processor of LayerNorms take it (docs/ensembles.md); others are refused by name.
  std::string noise_injection = "input";
  bool conditional_noise() const { return ensemble() && noise_injection == "conditional_norm"; }
  // train.loss: "auto" (mse for one member, crps for an ensemble), "mse" or "crps".
  std::string loss = "auto";
  bool ensemble() const { return ensemble_members > 1; }
  // The noise fields the model's input carries: noise_channels for an ensemble, else none.
  int64_t input_noise_channels() const { return ensemble() ? noise_channels : 0; }
};

// train.checkpointing and train.rollout_checkpointing in words, for the lines that describe a run:
// "off", "on" (per block), "per rollout step", "per block and per rollout step".
std::string describe_checkpointing(const TrainConfig& t);

struct MemoryConfig {
  int64_t limit = 0;          // memory.limit: device budget ("24GiB"); 0 = the device's own size
  double margin = 0.10;       // memory.margin: share of the budget kept free by tune-batch
  int64_t multiple_of = 1;    // memory.multiple_of: tune-batch keeps batch sizes multiples of this
  int64_t max_batch = 4096;   // memory.max_batch: tune-batch never goes above
  int64_t probe_steps = 2;    // memory.probe_steps: training steps per tune-batch probe
};

struct DistributedConfig {
  int64_t zero_stage = 0;     // distributed.zero_stage: 0 (DDP) | 1 | 2 | 3
  int64_t world_size = 0;     // distributed.world_size: for estimate; 0 = from MPI
  double bucket_mb = 25.0;    // distributed.bucket_mb: DDP gradient bucket size
  std::string backend = "auto";  // distributed.backend: auto | mpi | nccl
  // distributed.ensemble_group: consecutive ranks sharing one ensemble (the same samples, each
  // holding train.ensemble_members / ensemble_group of the members); 1 = every rank its own.
  int64_t ensemble_group = 1;
  // distributed.model_parallel: consecutive ranks sharing one sample, each holding a contiguous
  // band of its grid cells (the models whose ModelSchema::shards_grid; docs/distributed.md "Model
  // parallelism"). The world
  // splits into world / model_parallel data-parallel groups of model_parallel ranks.
  int64_t model_parallel = 1;
  // Ranks that read the same samples: an ensemble group or a model-parallel group.
  int64_t sample_group() const { return ensemble_group * model_parallel; }
};

// The channels of a run by role, in the order the model sees them. Model input: `history`
// prognostic states (oldest first, each state's channels in order), then the forcings at the
// step's valid time, then the static fields; model output: prognostic then diagnostic channels.
struct ChannelLayout {
  struct Channel {
    std::string name;
    std::optional<double> level;  // pressure level, for level weighting
  };
  std::vector<Channel> prognostic, diagnostic, forcing, statics;  // forcing: file forcings, then computed
  int64_t history = 1;
  // An ensemble's noise fields (train.noise_channels), the last input channels ("noise_0", ...):
  // drawn by the rollout each step, never read from data.
  int64_t noise = 0;

  int64_t in_channels() const {
    return static_cast<int64_t>(prognostic.size()) * history + static_cast<int64_t>(forcing.size() + statics.size()) +
           noise;
  }
  int64_t out_channels() const { return static_cast<int64_t>(prognostic.size() + diagnostic.size()); }
  // Names of the model's input channels: "t_850@t-1", "t_850@t0" (history), "insolation@t+1"
  // (forcings at the predicted state's time), "lsm" (static); and of its outputs ("t_850", "tp").
  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  std::vector<std::string> prognostic_names() const;
  std::vector<Channel> outputs() const;
};

struct RunConfig {
  std::string path;  // the file it came from, for messages
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  MemoryConfig memory;
  DistributedConfig distributed;

  ChannelLayout channels() const;   // the channels by role (from sources, or the names without data)
  int64_t num_variables() const;    // prognostic channels per state (a source with levels gives one per level)
  int64_t in_channels() const { return channels().in_channels(); }
  int64_t out_channels() const { return channels().out_channels(); }
  // The rollout length at optimizer step `step` (0-based), and the longest any step uses: what a
  // sample holds and what estimate and tune-batch size memory for.
  int64_t rollout_at(int64_t step) const;
  int64_t max_rollout() const;
};

// Reads and validates a run file. `overrides` are "section.key=value" strings (TOML values:
// train.batch_size=16, train.precision="bf16-mixed" or train.precision=bf16-mixed) applied before
// validation so they get the same checks. Throws ConfigError naming file, line, key and what was
// expected; unknown keys get a did-you-mean, a key of another section the section that has it.
//
// The paths the run reads (data.sources.file, data.static.file, train.init_from) come out absolute:
// relative ones in the text resolve against `folder` (the run file's folder; "" = the working
// directory), those given with --set against the working directory, so a run means the same from
// any directory. train.out_dir, like an output path on the command line, stays relative to the
// working directory. load_config takes the folder of `path`.
RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
RunConfig parse_config(const std::string& toml_text, const std::string& source_name,
                       const std::vector<std::string>& overrides = {}, const std::string& folder = "");

// The folder a run file's relative paths resolve against: the absolute folder of `path`.
std::string run_file_folder(const std::string& path);

}  // namespace wxtrain
