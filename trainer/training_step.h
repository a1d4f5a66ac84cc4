#pragma once
// The one training step that train, tune-batch, profile and estimate all run: micro-batches,
// autocast, activation checkpointing (inside the model's blocks), autoregressive rollout loss,
// gradient accumulation, loss scaling, gradient communication and the optimizer update. Because
// every command runs this code, what the estimator predicts and the tuner finds is what training
// does.
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "core/autocast.h"
#include "core/config.h"
#include "core/memory_meter.h"
#include "distributed/zero_data_parallel.h"
#include "models/weather_model.h"
#include "trainer/loss_scaler.h"

namespace wxtrain::trainer {

// One micro-batch (data/samples.h's layout): input [B, P*history, lat, lon]; forcings
// [B, rollout, F+S, lat, lon] (F+S may be 0); target [B, rollout, P+D, lat, lon]; target_mask like
// target (1 = valid) or undefined when the data has no fill values.
struct MicroBatch {
  torch::Tensor input;
  torch::Tensor forcings;
  torch::Tensor target;
  torch::Tensor target_mask;
};

// What the autoregressive rollout needs besides the model: how the output splits into prognostic
// and diagnostic channels, the residual scale, and the boundary frame of a limited-area run.
struct RolloutSetup {
  int64_t prognostic = 0;
  int64_t diagnostic = 0;
  // [P]: the std of one-step differences over the states' std (train.residual_normalization), so
  // the model's output is a tendency in units of typical tendencies; undefined = 1.
  torch::Tensor residual_scale;
  // train.prediction = "state": the prognostic output is the next state itself (no newest state
  // added, no residual scale), as FourCastNet and PhysicsNeMo's AFNO predict.
  bool predicts_state = false;
  // [lat, lon] 1 on the data.boundary frame, 0 inside; undefined without a boundary.
  torch::Tensor boundary;
  // train.rollout_checkpointing: while gradients are recorded, each step's model call is one
  // checkpointed unit (ops/checkpoint.h), so the forward keeps a step's input rather than its
  // activations and backward replays the step, last step first.
  bool checkpoint_steps = false;
  // An ensemble's noise (train.noise_channels > 0 with ensemble_members > 1): every step appends
  // `noise_channels` fields of N(0, noise_std^2) to each row's input, drawn on the CPU from
  // `noise` (a generator of its own, so its stream is the same on every device and a checkpoint
  // can hold it; a copy of the setup shares the generator).
  int64_t noise_channels = 0;
  double noise_std = 1.0;
  at::Generator noise;
  // train.noise_correlation rho: step r's fields are rho x step r-1's + sqrt(1 - rho^2) x the
  // fresh draw (the same draws as rho = 0, so the stream does not depend on it), N(0, noise_std^2)
  // at every step. Within one rollout() call; `noise_carry`, where set, holds the last step's unit
  // fields across calls (forecast, which rolls a member out one step per call).
  double noise_correlation = 0.0;
  torch::Tensor* noise_carry = nullptr;
  // An ensemble group (distributed.ensemble_group = G > 1): the rows are this rank's
  // `noise_members` members of each sample (M / G), the members noise_group_rank * M/G onwards. The
  // noise is drawn for all M members of every sample from the group's shared stream and this
  // rank's slice kept, so member j of sample b gets the same noise whatever the layout (and G = 1
  // draws exactly what it always did).
  int64_t noise_group = 1;
  int64_t noise_group_rank = 0;
  int64_t noise_members = 1;
};

// What an ensemble needs besides the rollout: members per sample and the afCRPS alpha; members = 1
// is the deterministic model and its MSE.
struct EnsembleSetup {
  int64_t members = 1;  // members per sample, over the whole ensemble group
  double crps_alpha = 0.95;
  // distributed.ensemble_group: G consecutive ranks share the samples of one ensemble, each
  // holding members / G of its members (group_rank = rank % G holds members group_rank * M/G ..).
  int64_t group = 1;
  int64_t group_rank = 0;
  int64_t local_members() const { return members / group; }
};

struct StepResult {
  double loss = 0;        // mean latitude-weighted MSE (an ensemble: afCRPS) over micro-batches and rollout steps
  double grad_norm = 0;   // global norm before clipping (0 when skipped)
  bool applied = false;   // false: inf/NaN gradients, optimizer step skipped
  double loss_scale = 1;  // the scale used for this step
  // Peaks seen by the meter (when one is attached), above nothing: absolute allocated bytes.
  int64_t peak_forward_backward = 0;
  int64_t peak_optimizer = 0;
};

// Model parallelism (distributed.model_parallel = P > 1): the P consecutive ranks of a group read
// the same samples and each runs the model on its own band of the grid (models::NodeShard): rank r
// of the group holds sizes[r] entries of the grid's `dim` (-2: latitude rows of a rectangle, -1: the
// cells of a point set) from `start`. The step cuts each micro-batch to the band, the loss is this
// band's share of the whole grid's weighted loss (so the group's sum is the whole loss), and the
// gradient is summed within the group and averaged across groups.
struct ModelParallelSetup {
  int64_t size = 1;
  int rank = 0;
  std::shared_ptr<distributed::Communicator> comm;  // the group's ranks
  int64_t dim = -2;
  std::vector<int64_t> sizes;
  int64_t start = 0, length = 0;
  int64_t extent = 0;  // the whole grid's entries along `dim`
  bool on() const { return size > 1; }
  // t [..., lat, lon] cut to this rank's band (t itself when off or undefined). A tensor that is
  // the band already (the loader read only the band: Dataset::set_band) is returned as it is;
  // one of neither size is an error naming both.
  torch::Tensor band(const torch::Tensor& t) const;
  // Loss weights (TrainingState::lat_weights: [lat] or [1, cells]) cut to the band.
  torch::Tensor band_weights(const torch::Tensor& w) const;
};

// Everything a step needs, built once from the run config.
struct TrainingState {
  RunConfig config;
  torch::Device device{torch::kCPU};
  models::WeatherModel model;
  std::shared_ptr<distributed::Communicator> comm;
  // The ensemble group's ranks (distributed.ensemble_group > 1; null otherwise): the members are
  // gathered over it before the loss.
  std::shared_ptr<distributed::Communicator> group_comm;
  std::unique_ptr<distributed::ZeroDataParallel> parallel;
  LossScaler scaler{LossScaler::Options{}};
  // [lat] cos(latitude) normalised to mean 1 (a rectangle), or [1, cells] the cells' areas
  // normalised to mean 1 (a point set, data/grid.h); on the device.
  torch::Tensor lat_weights;
  // [P+D] per output channel: train.loss_weights x level weighting, mean 1 (core/config.h).
  torch::Tensor channel_weights;
  // [lat, lon] 0 on the boundary frame, 1 inside: the loss sees the interior only; undefined
  // without data.boundary.
  torch::Tensor interior;
  RolloutSetup rollout;
  EnsembleSetup ensemble;
  ModelParallelSetup model_parallel;
  std::vector<std::string> frozen;  // names of parameters frozen by train.freeze
};

// The noise generator of a run: a CPU generator seeded from train.seed and the data-parallel group
// (the rank, without ensemble groups), so groups draw different noise for their different samples
// and the ranks of one ensemble group share one stream.
at::Generator make_noise_generator(uint64_t seed, int group);

// The data-parallel group of `rank` and the number of groups when `group_size` consecutive ranks
// share one ensemble (distributed.ensemble_group); throws ConfigError when group_size does not
// divide the world.
// (Model-parallel groups use it too, with group_size = distributed.sample_group().)
struct EnsembleLayout {
  int group = 0;       // data-parallel group: rank / group_size (the loader's shard and noise stream)
  int groups = 1;      // world / group_size
  int group_rank = 0;  // rank % group_size
};
EnsembleLayout ensemble_layout(int rank, int world, int64_t group_size);

// An ensemble group's predictions gathered along the member dimension: `prediction` [B * m, ...]
// holds this rank's m members of each sample (sample-major), the result [B * m * G, ...] all M
// members of each sample, sample-major, member g * m + j being rank g's member j. Differentiable:
// its backward hands this rank the gradient of its own members only (every rank of the group
// computes the same loss of the gathered members). Without a group (null group_comm) it returns
// `prediction` as is.
torch::Tensor gather_members(const TrainingState& state, const torch::Tensor& prediction);

// Sets the weights of a freshly built model (fine-tuning's init_from, or a resumed checkpoint)
// before the optimizer takes its fp32 copies.
using ModelInit = std::function<void(models::WeatherModelImpl&)>;

// Builds the model (seeded by train.seed), applies `init`, moves it to the device and precision,
// freezes the train.freeze patterns, and creates the parameter groups and their ZeroDataParallel
// (gradient reduction and the optimizer). `latitudes` in degrees (one per grid row); empty means uniform weights.
// `residual_scale` [P] (RolloutSetup); undefined = 1 (estimate and tune-batch: the same memory).
std::unique_ptr<TrainingState> build_training_state(const RunConfig& config, const models::ModelShape& shape,
                                                     std::shared_ptr<distributed::Communicator> comm,
                                                     torch::Device device, const std::vector<double>& latitudes = {},
                                                     const ModelInit& init = {},
                                                     const torch::Tensor& residual_scale = {});

// Loss weight per output channel (ChannelLayout::outputs()): the first train.loss_weights glob
// that matches the name (else 1) times the level weight (uniform 1; linear: the level's value;
// table: train.level_weights, 1 for levels it lacks and for channels without a level), scaled to
// mean 1. Throws ConfigError when every weight is 0 or a loss_weights pattern matches no channel.
std::vector<double> loss_channel_weights(const RunConfig& config);
// The table `train` prints at start: "loss weights: t_850 1.00 (level 850), tp 0.50, ...".
std::string describe_loss_weights(const RunConfig& config);

// [lat, lon] float32: 1 on the outer `cells` rows and columns, 0 inside.
torch::Tensor boundary_frame(int64_t lat, int64_t lon, int64_t cells);

// Residual scale from the normalisation statistics of the prognostic channels: diff_std / std,
// [P] float32 (1 where no difference statistics exist).
torch::Tensor residual_scale_from(const torch::Tensor& diff_std, const torch::Tensor& std);

// The autocast state a precision runs under on `device` (on for the *-mixed precisions).
AutocastState autocast_for(Precision precision, const torch::Device& device);

// Weighted MSE of prediction [..., C, lat, lon] against target (same shape): latitude weights
// [lat] (or per cell [lat, lon]: a point set's areas), optional channel weights [C] and interior [lat, lon], and an optional validity mask;
// the weighted mean sum(w err^2) / sum(w), computed in fp32.
torch::Tensor weighted_mse(const torch::Tensor& prediction, const torch::Tensor& target,
                           const torch::Tensor& lat_weights, const torch::Tensor& mask = {},
                           const torch::Tensor& channel_weights = {}, const torch::Tensor& interior = {});
// The weighted mean of a per-point error [..., C, lat, lon] with weighted_mse's weights and mask:
// sum(w e) / sum(w). weighted_mse is this of the squared error, the ensemble loss of the afCRPS.
torch::Tensor weighted_mean(const torch::Tensor& error, const torch::Tensor& lat_weights, const torch::Tensor& mask = {},
                            const torch::Tensor& channel_weights = {}, const torch::Tensor& interior = {});

// The almost-fair CRPS of anemoi-training's CRPS(alpha) (Lang et al. 2024, arXiv 2412.15832) per
// point: members [..., M, ...] along `member_dim` (M >= 2), target shaped like members without that
// dimension. With eps = (1 - alpha) / M,
//   afCRPS = (1/M) sum_j |x_j - y| - (1 - eps) / (2 M (M - 1)) sum_{j != k} |x_j - x_k|
// (alpha = 1: the fair CRPS; alpha = 0: the kernel CRPS). The pair sum is never materialised: with
// the members sorted, sum_{j<k} |x_(k) - x_(j)| = sum_k (2k - M - 1) x_(k) (k = 1..M ascending), so
// memory and time are those of a sort. Computed in fp32 (double stays double).
torch::Tensor afcrps(const torch::Tensor& members, const torch::Tensor& target, double alpha, int64_t member_dim = 1);

// The training loss with the state's weights: the weighted MSE, or for an ensemble (prediction
// [B * M, ...], sample-major: the M members of sample b are rows b*M .. b*M + M - 1) the weighted
// afCRPS against target [B, ...].
torch::Tensor training_loss(const TrainingState& state, const torch::Tensor& prediction, const torch::Tensor& target,
                            const torch::Tensor& mask = {});

// Each sample's rows repeated `members` times, sample-major (rows b*M .. b*M + M - 1 are sample b's
// members); undefined and members = 1 are returned as they are.
torch::Tensor tile_members(const torch::Tensor& x, int64_t members);

// Rolls the model forward `steps` times from input [B, P*history, lat, lon] with forcings
// [B, >= steps, F+S, lat, lon]; returns fp32 [B, steps, P+D, lat, lon]. Step k feeds the window
// and forcings[:, k] (the forcings of that step's valid time); its prognostic state is newest +
// residual_scale * model output (the model learns the tendency), its diagnostics the model's
// output as is. With a boundary, the frame of each predicted state is overwritten by `truth`
// [B, >= steps, P+D, lat, lon] before it is fed back. The new prognostic state replaces the
// oldest in the window.
torch::Tensor rollout(models::WeatherModelImpl& model, torch::Tensor input, const torch::Tensor& forcings,
                      int64_t steps, const RolloutSetup& setup, const torch::Tensor& truth = {});

class TrainingStep {
 public:
  // `meter` (optional) records the peak of the forward/backward and optimizer phases.
  explicit TrainingStep(TrainingState& state, MemoryMeter* meter = nullptr);
  // One optimizer step over `micro_batches` (train.accumulation of them) at learning rate lr,
  // rolling out `rollout_steps` steps (0 = all the targets hold; the curriculum passes
  // RunConfig::rollout_at(step)).
  StepResult run(const std::vector<MicroBatch>& micro_batches, double lr, int64_t rollout_steps = 0);

 private:
  TrainingState& state_;
  MemoryMeter* meter_;
};

// Random micro-batches of the configured shape (for estimate, tune-batch and profile probes,
// which need the real step on inputs of the right size, not real data).
std::vector<MicroBatch> synthetic_micro_batches(const RunConfig& config, const models::ModelShape& shape,
                                                int64_t batch_size, int64_t count, torch::Device device);

}  // namespace wxtrain::trainer
