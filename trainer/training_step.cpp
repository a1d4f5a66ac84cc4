#include "trainer/training_step.h"

#include <fnmatch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/autocast.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/grid.h"
#include "distributed/world.h"
#include "distributed/autograd_gather.h"
#include "distributed/halo_exchange.h"
#include "ops/checkpoint.h"

namespace wxtrain::trainer {

namespace {

bool matches_any(const std::string& name, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns)
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

// One rollout step's model call as a checkpointed unit, on the input's parts (the window's states
// and the step's forcings), concatenated inside: what it saves are those parts, which are views of
// the micro-batch or the fed-back predictions, not a concatenated copy of the whole input per step.
// The replay in backward runs the model's forward with gradients on, so with train.checkpointing
// its blocks checkpoint themselves again (the replay of a step holds one block's activations at a
// time, as the un-nested step does). The model outlives the step's backward (TrainingState owns
// it), which is what the pointer captured here relies on.
torch::Tensor checkpointed_forward(models::WeatherModelImpl& model, const std::vector<torch::Tensor>& parts) {
  models::WeatherModelImpl* m = &model;
  return ops::checkpoint(
      [m](const std::vector<torch::Tensor>& in) { return std::vector<torch::Tensor>{m->forward(torch::cat(in, 1))}; },
      parts, model.parameters())[0];
}

// A group of `size` ranks in a process of its own (estimate, tune-batch, profile): this process is
// its rank 0, and the collectives a stand-in supports (below) fill in what the other ranks would
// send, shaped as a real group's, so that the step allocates, and the trace counts, what a rank of
// the real group holds. What a stand-in does not support is an error naming it.
class StandInGroup : public distributed::Communicator {
 public:
  StandInGroup(int size, std::string name, std::string supports)
      : size_(size), name_(std::move(name)), supports_(std::move(supports)) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  std::string backend() const override { return name_; }
  distributed::WorkHandle allgather_async(torch::Tensor, torch::Tensor, std::vector<int64_t>) override {
    return unsupported("allgather");
  }
  distributed::WorkHandle allreduce_async(torch::Tensor) override { return unsupported("allreduce"); }
  distributed::WorkHandle reduce_scatter_async(torch::Tensor, torch::Tensor, std::vector<int64_t>) override {
    return unsupported("reduce_scatter");
  }
  distributed::WorkHandle broadcast_async(torch::Tensor, int) override { return unsupported("broadcast"); }
  void barrier() override {}
  double max(double value) override { return value; }
  double sum(double value) override { return value * size_; }
  std::shared_ptr<distributed::Communicator> split(int, int) override {
    unsupported("split");
    return nullptr;
  }

 protected:
  distributed::WorkHandle unsupported(const char* op) const {
    throw Error(std::string(op) + ": the one-process " + name_ + " only " + supports_);
  }
  int size_;

 private:
  std::string name_, supports_;
};

// An ensemble group's stand-in: the all-gather repeats this rank's members G times, so the step
// holds what a rank of a real group holds (M/G members rolled out, all M in the loss).
class RepeatingGroup final : public StandInGroup {
 public:
  explicit RepeatingGroup(int size) : StandInGroup(size, "ensemble group stand-in", "gathers members") {}
  distributed::WorkHandle allgather_async(torch::Tensor input, torch::Tensor output,
                                          std::vector<int64_t> counts) override {
    check_tensor(input, "allgather");
    check_tensor(output, "allgather");
    resolve_counts(std::move(counts), output.numel(), input.numel(), "allgather");
    output.view({size_, -1}).copy_(input.reshape({1, -1}).expand({size_, input.numel()}));
    return distributed::completed_work();
  }
};

// A model-parallel group's stand-in (distributed.model_parallel = P > 1): rank 0 of P, the rank of
// the widest band (the first ranks take the extra row). The halo exchange's all-gather puts this
// rank's send rows at their offset and zeros where the other ranks' rows would be, and its
// reduce-scatter hands back this rank's piece: the values do not matter for memory, the shapes do,
// so the step allocates what rank 0 of a real group allocates (the gathered halo, its gradient).
// The gradient flows through this rank's rows as in the real exchange. The loss's allreduce scales
// this band's share by P (what the group's sum would be with P bands like it).
class BandGroup final : public StandInGroup {
 public:
  explicit BandGroup(int size) : StandInGroup(size, "model-parallel group stand-in", "exchanges halos") {}
  distributed::WorkHandle allgather_async(torch::Tensor input, torch::Tensor output,
                                          std::vector<int64_t> counts) override {
    check_tensor(input, "allgather");
    check_tensor(output, "allgather");
    const std::vector<int64_t> c = resolve_counts(std::move(counts), output.numel(), input.numel(), "allgather");
    output.zero_();
    output.view({-1}).narrow(0, 0, c[0]).copy_(input.reshape({-1}));
    return distributed::completed_work();
  }
  distributed::WorkHandle reduce_scatter_async(torch::Tensor input, torch::Tensor output,
                                               std::vector<int64_t> counts) override {
    check_tensor(input, "reduce_scatter");
    check_tensor(output, "reduce_scatter");
    const std::vector<int64_t> c = resolve_counts(std::move(counts), input.numel(), output.numel(), "reduce_scatter");
    output.view({-1}).copy_(input.reshape({-1}).narrow(0, 0, c[0]));
    return distributed::completed_work();
  }
  distributed::WorkHandle allreduce_async(torch::Tensor tensor) override {
    tensor.mul_(static_cast<double>(size_));
    return distributed::completed_work();
  }
};

}  // namespace

AutocastState autocast_for(Precision precision, const torch::Device& device) {
  const bool on = precision == Precision::kBf16Mixed || precision == Precision::kFp16Mixed;
  return AutocastGuard::with(device.type(), precision == Precision::kFp16Mixed ? c10::kHalf : c10::kBFloat16, on);
}

std::vector<double> loss_channel_weights(const RunConfig& config) {
  const TrainConfig& t = config.train;
  const auto outputs = config.channels().outputs();
  std::vector<double> weights;
  if (outputs.empty()) return weights;  // a config built in code around a bare model shape
  std::vector<bool> pattern_used(t.loss_weights.size(), false);
  for (const auto& channel : outputs) {
    double w = 1.0;
    for (size_t i = 0; i < t.loss_weights.size(); ++i) {
      if (fnmatch(t.loss_weights[i].first.c_str(), channel.name.c_str(), 0) == 0) {
        w = t.loss_weights[i].second;
        pattern_used[i] = true;
        break;
      }
    }
    if (channel.level) {
      if (t.level_weighting == "linear") {
        w *= *channel.level;
      } else if (t.level_weighting == "table") {
        for (const auto& [level, lw] : t.level_weights)
          if (std::abs(level - *channel.level) <= 1e-6 * std::max(1.0, std::abs(level))) w *= lw;
      }
    }
    weights.push_back(w);
  }
  for (size_t i = 0; i < pattern_used.size(); ++i) {
    if (pattern_used[i]) continue;
    std::string names;
    for (const auto& c : outputs) names += (names.empty() ? "" : ", ") + c.name;
    throw ConfigError(config.path + ": train.loss_weights pattern '" + t.loss_weights[i].first +
                      "' matches no predicted channel (they are " + names + ")");
  }
  // Linear level weights are relative: a level's share of the pressure column. Surface channels
  // (no level) keep 1 against levelled channels averaging 1, as GraphCast weights them.
  if (t.level_weighting == "linear") {
    double sum = 0;
    int levelled = 0;
    for (size_t c = 0; c < outputs.size(); ++c)
      if (outputs[c].level) sum += *outputs[c].level, ++levelled;
    if (levelled > 0 && sum > 0)
      for (size_t c = 0; c < outputs.size(); ++c)
        if (outputs[c].level) weights[c] *= levelled / sum;
  }
  double total = 0;
  for (double w : weights) total += w;
  if (!(total > 0))
    throw ConfigError(config.path + ": train.loss_weights give every predicted channel weight 0: nothing would be learned");
  for (double& w : weights) w *= static_cast<double>(weights.size()) / total;
  return weights;
}

std::string describe_loss_weights(const RunConfig& config) {
  const auto outputs = config.channels().outputs();
  const auto weights = loss_channel_weights(config);
  std::ostringstream out;
  out << "loss weights (area x channel";
  if (config.train.level_weighting != "uniform") out << " x level: " << config.train.level_weighting;
  if (config.data.boundary > 0) out << ", interior only: " << config.data.boundary << "-cell boundary";
  out << "):";
  for (size_t c = 0; c < outputs.size(); ++c) {
    char w[32];
    std::snprintf(w, sizeof w, "%.3g", weights[c]);
    out << (c ? ", " : " ") << outputs[c].name << " " << w;
  }
  return out.str();
}

torch::Tensor boundary_frame(int64_t lat, int64_t lon, int64_t cells) {
  torch::Tensor frame = torch::ones({lat, lon}, torch::kFloat32);
  if (lat > 2 * cells && lon > 2 * cells) frame.slice(0, cells, lat - cells).slice(1, cells, lon - cells).zero_();
  return frame;
}

torch::Tensor residual_scale_from(const torch::Tensor& diff_std, const torch::Tensor& std) {
  torch::Tensor scale = diff_std.to(torch::kFloat32) / std.to(torch::kFloat32);
  return torch::where(torch::isfinite(scale) & (scale > 0), scale, torch::ones_like(scale));
}

std::unique_ptr<TrainingState> build_training_state(const RunConfig& config, const models::ModelShape& shape,
                                                     std::shared_ptr<distributed::Communicator> comm,
                                                     torch::Device device, const std::vector<double>& latitudes,
                                                     const ModelInit& init, const torch::Tensor& residual_scale) {
  const TrainConfig& t = config.train;
  if (t.precision == Precision::kFp16Mixed && !device.is_cuda())
    throw ConfigError(config.path + ": train.precision = \"fp16-mixed\" needs a CUDA device (CPU autocast "
                      "supports bf16 only): use \"bf16-mixed\" on " + device.str());

  auto state = std::make_unique<TrainingState>();
  state->config = config;
  state->device = device;
  torch::manual_seed(t.seed);
  state->model = models::build_model(config.model, shape);
  state->model->set_checkpointing(t.checkpointing);
  if (init) init(*state->model);
  state->model->to(device, t.precision == Precision::kBf16 ? torch::kBFloat16 : torch::kFloat32);

  distributed::ParamGroup trainable, slowed;
  trainable.weight_decay = slowed.weight_decay = t.weight_decay;
  slowed.lr_scale = t.frozen_lr_scale;
  size_t matched = 0;
  for (auto& item : state->model->named_parameters()) {
    if (matches_any(item.key(), t.freeze)) {
      ++matched;
      state->frozen.push_back(item.key());
      if (t.frozen_lr_scale == 0.0) {
        item.value().requires_grad_(false);
        continue;
      }
      slowed.names.push_back(item.key());
      slowed.params.push_back(item.value());
    } else {
      trainable.names.push_back(item.key());
      trainable.params.push_back(item.value());
    }
  }
  if (!t.freeze.empty() && matched == 0)
    throw ConfigError(config.path + ": train.freeze patterns match no parameter; names look like '" +
                      state->model->named_parameters().keys().front() + "'");
  std::vector<distributed::ParamGroup> groups;
  if (!trainable.params.empty()) groups.push_back(std::move(trainable));
  if (!slowed.params.empty()) groups.push_back(std::move(slowed));
  if (groups.empty()) throw ConfigError(config.path + ": train.freeze leaves no parameter to train");

  distributed::OptimizerOptions opt;
  opt.kind = t.optimizer;
  opt.beta1 = t.beta1;
  opt.beta2 = t.beta2;
  opt.eps = t.eps;
  opt.momentum = t.momentum;
  state->comm = std::move(comm);
  // ZeRO-3 shards and gathers the parameters block by block: the model's blocks are its units.
  std::vector<std::vector<torch::Tensor>> blocks = state->model->block_parameters();
  state->parallel = std::make_unique<distributed::ZeroDataParallel>(state->comm, std::move(groups), opt,
                                                                    static_cast<int>(config.distributed.zero_stage),
                                                                    config.distributed.bucket_mb, blocks);
  state->model->set_block_runner(state->parallel->block_runner());
  state->scaler = LossScaler::from_config(t);

  torch::Tensor w = torch::ones({shape.lat}, torch::kFloat32);
  if (shape.point_set) {
    // A point set weighs each cell by its area (data/grid.h): [1, cells], mean 1. The trainer puts
    // the dataset's own weights in place of these (the same cells; a region keeps its Gaussian
    // weights there), estimate and tune-batch keep these.
    const data::Grid grid = data::cell_grid(shape.latitudes, shape.longitudes, "the model's grid");
    w = torch::tensor(grid.areas, torch::kFloat64);
    w = (w / w.mean()).to(torch::kFloat32).view({1, shape.lon});
  } else if (!latitudes.empty()) {
    if (static_cast<int64_t>(latitudes.size()) != shape.lat)
      throw Error("latitude count " + std::to_string(latitudes.size()) + " does not match the grid's " +
                  std::to_string(shape.lat) + " rows");
    w = torch::tensor(latitudes, torch::kFloat64).mul(M_PI / 180.0).cos().clamp_min(0.0).to(torch::kFloat32);
    w = w / w.mean();
  }
  state->lat_weights = w.to(device);
  std::vector<double> channel_weights = loss_channel_weights(config);
  if (static_cast<int64_t>(channel_weights.size()) != shape.out_channels)  // no named channels: all 1
    channel_weights.assign(static_cast<size_t>(shape.out_channels), 1.0);
  state->channel_weights = torch::tensor(channel_weights, torch::kFloat64).to(torch::kFloat32).to(device);
  const ChannelLayout layout = config.channels();
  state->rollout.prognostic = static_cast<int64_t>(layout.prognostic.size());
  state->rollout.diagnostic = static_cast<int64_t>(layout.diagnostic.size());
  state->rollout.checkpoint_steps = t.rollout_checkpointing;
  state->rollout.predicts_state = t.prediction == "state";
  if (layout.out_channels() != shape.out_channels) {
    // A bare model shape without named channels (estimator and tuner tests): all prognostic.
    state->rollout.prognostic = shape.out_channels;
    state->rollout.diagnostic = 0;
  }
  if (residual_scale.defined()) {
    TORCH_CHECK(residual_scale.numel() == state->rollout.prognostic, "residual scale has ", residual_scale.numel(),
                " entries for ", state->rollout.prognostic, " prognostic channels");
    state->rollout.residual_scale = residual_scale.to(torch::kFloat32).to(device);
  }
  if (config.data.boundary > 0 && shape.point_set) {
    // On a point set the frame is the cells within data.boundary grid spacings of the region's
    // edge (of the cells' own extent without data.region), by great-circle distance.
    const data::Grid grid = data::cell_grid(shape.latitudes, shape.longitudes, "the model's grid");
    data::Box box;
    const Region& r = config.data.region;
    if (r.set) box = {r.lat_min, r.lat_max, r.lon_min, r.lon_max};
    const double width = (static_cast<double>(config.data.boundary) - 0.5) * data::typical_spacing_degrees(grid);
    const std::vector<uint8_t> band =
        data::boundary_band(shape.latitudes, shape.longitudes, r.set ? &box : nullptr, width);
    std::vector<float> frame(band.begin(), band.end());
    if (std::all_of(band.begin(), band.end(), [](uint8_t b) { return b != 0; }))
      throw ConfigError(config.path + ": data.boundary = " + std::to_string(config.data.boundary) +
                        " leaves no interior cell: every one of the " + std::to_string(shape.lon) +
                        " cells lies within " + std::to_string(width) + " degrees of the region's edge");
    state->rollout.boundary = torch::tensor(frame, torch::kFloat32).view({1, shape.lon}).to(device);
    state->interior = (1 - state->rollout.boundary);
  } else if (config.data.boundary > 0) {
    state->rollout.boundary = boundary_frame(shape.lat, shape.lon, config.data.boundary).to(device);
    state->interior = (1 - state->rollout.boundary);
  }
  state->ensemble.members = t.ensemble_members;
  state->ensemble.crps_alpha = t.crps_alpha;
  const int rank = state->comm ? state->comm->rank() : 0, world = state->comm ? state->comm->size() : 1;
  const int64_t G = config.distributed.ensemble_group;
  // A world of one with a group (estimate, tune-batch and profile in one process; train refuses
  // that world before it gets here) runs the step of one rank of a group, as group rank 0.
  const bool stand_in = world == 1 && G > 1;
  const EnsembleLayout layout_of_groups = stand_in ? EnsembleLayout{} : ensemble_layout(rank, world, G);
  state->ensemble.group = G;
  state->ensemble.group_rank = layout_of_groups.group_rank;
  if (stand_in) {
    state->group_comm = std::make_shared<RepeatingGroup>(static_cast<int>(G));
  } else if (G > 1) {
    // Collective: every rank of the world calls it (build_training_state is).
    state->group_comm = state->comm->split(layout_of_groups.group, layout_of_groups.group_rank);
  }
  state->rollout.noise_channels = t.input_noise_channels();
  state->rollout.noise_std = t.noise_std;
  state->rollout.noise_correlation = t.noise_correlation;
  state->rollout.noise_group = state->ensemble.group;
  state->rollout.noise_group_rank = state->ensemble.group_rank;
  state->rollout.noise_members = state->ensemble.local_members();
  if (state->rollout.noise_channels > 0) state->rollout.noise = make_noise_generator(t.seed, layout_of_groups.group);

  // Model parallelism. A world of one (estimate, tune-batch, profile in one process; train refuses
  // that world before it gets here) runs the step of rank 0 of a group, the widest band, over the
  // stand-in group (BandGroup), as an ensemble group's stand-in does above.
  const int64_t MP = config.distributed.model_parallel;
  const bool mp_stand_in = world == 1 && MP > 1;
  if (MP > 1) {
    if (!mp_stand_in && world % MP != 0)
      throw ConfigError("distributed.model_parallel = " + std::to_string(MP) + " does not divide the world of " +
                        std::to_string(world) + " rank(s): a model-parallel group is model_parallel consecutive "
                        "ranks, so launch a multiple of it (mpirun -np)");
    if (!state->model->can_shard_nodes())
      throw ConfigError(config.path + ": distributed.model_parallel = " + std::to_string(MP) + ": model " +
                        config.model.name + " cannot shard its grid (the gnn, graphcast and aifs can)");
    ModelParallelSetup& mp = state->model_parallel;
    mp.size = MP;
    mp.rank = static_cast<int>(rank % MP);
    mp.comm = mp_stand_in ? std::make_shared<BandGroup>(static_cast<int>(MP))
                          : state->comm->split(static_cast<int>(rank / MP), mp.rank);  // collective over the world
    // Bands of whole rows on a rectangle (the cells' flattened order is row-major, so a band is a
    // contiguous range of nodes), of cells on a point set; the first ranks take one more when the
    // count does not divide.
    mp.dim = shape.point_set ? -1 : -2;
    const int64_t extent = shape.point_set ? shape.lon : shape.lat, per_cell = shape.point_set ? 1 : shape.lon;
    if (extent < MP)
      throw ConfigError(config.path + ": distributed.model_parallel = " + std::to_string(MP) + " needs at least as many " +
                        (shape.point_set ? "cells" : "latitude rows") + " as ranks, the grid has " +
                        std::to_string(extent));
    models::NodeShard shard;
    shard.rank = mp.rank;
    shard.bounds.push_back(0);
    for (int64_t r = 0; r < MP; ++r) {
      mp.sizes.push_back(extent / MP + (r < extent % MP ? 1 : 0));
      if (r < mp.rank) mp.start += mp.sizes.back();
      shard.bounds.push_back(shard.bounds.back() + mp.sizes.back() * per_cell);
    }
    mp.length = mp.sizes[static_cast<size_t>(mp.rank)];
    mp.extent = extent;
    std::shared_ptr<distributed::Communicator> group = mp.comm;
    shard.exchange = [group](const torch::Tensor& send, const std::vector<int64_t>& rows) {
      return distributed::exchange_halo_rows(group, send, rows);
    };
    state->model->set_node_shard(shard);
  }
  return state;
}

torch::Tensor ModelParallelSetup::band(const torch::Tensor& t) const {
  if (!on() || !t.defined()) return t;
  const int64_t n = t.size(dim);
  if (n == length) return t;  // read as the band (data::Dataset::set_band)
  TORCH_CHECK(n == extent, "model parallel: a tensor of shape ", t.sizes(), " has ", n, " entries along dimension ",
              dim, "; expected the whole grid's ", extent, " or this rank's band of ", length);
  return t.narrow(dim, start, length);
}

torch::Tensor ModelParallelSetup::band_weights(const torch::Tensor& w) const {
  if (!on() || !w.defined()) return w;
  return w.dim() == 1 ? w.narrow(0, start, length) : w.narrow(dim, start, length);
}

torch::Tensor weighted_mean(const torch::Tensor& error, const torch::Tensor& lat_weights, const torch::Tensor& mask,
                            const torch::Tensor& channel_weights, const torch::Tensor& interior) {
  const torch::Tensor& err = error;
  // The weights of one [C, lat, lon] state; the sum over the batch and rollout dims follows.
  const int64_t C = err.size(-3);
  // [lat] row weights (a rectangle) or [lat, lon] per cell (a point set's areas, [1, cells]).
  torch::Tensor w = lat_weights.dim() == 2 ? lat_weights : lat_weights.view({-1, 1});
  if (interior.defined()) w = w * interior;
  if (channel_weights.defined()) w = channel_weights.view({C, 1, 1}) * w;
  if (!mask.defined()) {
    const double states = static_cast<double>(err.numel()) / static_cast<double>(C * err.size(-2) * err.size(-1));
    torch::Tensor per_state = w.expand({C, err.size(-2), err.size(-1)}).sum();
    return (err * w).sum() / (per_state * states);
  }
  torch::Tensor wm = mask.to(torch::kFloat32) * w;
  return (err * wm).sum() / wm.sum().clamp_min(1e-12);
}

torch::Tensor weighted_mse(const torch::Tensor& prediction, const torch::Tensor& target,
                           const torch::Tensor& lat_weights, const torch::Tensor& mask,
                           const torch::Tensor& channel_weights, const torch::Tensor& interior) {
  return weighted_mean((prediction.to(torch::kFloat32) - target.to(torch::kFloat32)).square(), lat_weights, mask,
                       channel_weights, interior);
}

torch::Tensor afcrps(const torch::Tensor& members, const torch::Tensor& target, double alpha, int64_t member_dim) {
  const auto dtype = members.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  const torch::Tensor x = members.to(dtype);
  const int64_t d = member_dim < 0 ? member_dim + x.dim() : member_dim;
  TORCH_CHECK(d >= 0 && d < x.dim(), "afcrps: member dimension ", member_dim, " of a ", x.dim(), "-D tensor");
  const int64_t M = x.size(d);
  TORCH_CHECK(M >= 2, "afcrps: needs 2 or more members, got ", M);
  TORCH_CHECK(target.dim() + 1 == x.dim(), "afcrps: target ", target.sizes(), " against members ", x.sizes());
  const torch::Tensor skill = (x - target.to(dtype).unsqueeze(d)).abs().mean(d);
  // sum_{j<k} |x_k - x_j| over the sorted members: each x_(k) is above k - 1 and below M - k of them.
  std::vector<int64_t> along(static_cast<size_t>(x.dim()), 1);
  along[static_cast<size_t>(d)] = M;
  const torch::Tensor coefficient =
      (torch::arange(1, M + 1, x.options()) * 2 - static_cast<double>(M + 1)).view(along);
  const torch::Tensor pairs = (std::get<0>(x.sort(d)) * coefficient).sum(d);
  const double m = static_cast<double>(M), eps = (1.0 - alpha) / m;
  // sum_{j != k} is twice the ordered-pair sum.
  return skill - pairs * ((1.0 - eps) / (m * (m - 1.0)));
}

torch::Tensor tile_members(const torch::Tensor& x, int64_t members) {
  if (!x.defined() || members <= 1) return x;
  return x.repeat_interleave(members, 0);
}

torch::Tensor training_loss(const TrainingState& state, const torch::Tensor& prediction, const torch::Tensor& target,
                            const torch::Tensor& mask) {
  const int64_t M = state.ensemble.members;
  const ModelParallelSetup& mp = state.model_parallel;
  if (mp.on()) {
    // prediction, target and mask hold this rank's band. The band's weighted mean times the band's
    // share of the whole grid's weights is its part of the whole grid's mean: the group's losses sum
    // to it. A masked loss stays the band's mean: TrainingStep::run weighs it by the band's valid
    // points, which makes the same sum.
    const torch::Tensor band = weighted_mse(prediction, target, mp.band_weights(state.lat_weights), mask,
                                            state.channel_weights, mp.band(state.interior));
    if (mask.defined()) return band;
    const int64_t C = prediction.size(-3);
    torch::Tensor w = state.lat_weights.dim() == 2 ? state.lat_weights : state.lat_weights.view({-1, 1});
    if (state.interior.defined()) w = w * state.interior;
    w = (state.channel_weights.view({C, 1, 1}) * w).expand({C, state.model->shape().lat, state.model->shape().lon});
    return band * (mp.band(w).sum() / w.sum());
  }
  if (M <= 1) return weighted_mse(prediction, target, state.lat_weights, mask, state.channel_weights, state.interior);
  TORCH_CHECK(prediction.size(0) == target.size(0) * M, "ensemble loss: ", prediction.size(0), " predictions for ",
              target.size(0), " samples of ", M, " members");
  std::vector<int64_t> sizes = prediction.sizes().vec();
  sizes[0] = target.size(0);
  sizes.insert(sizes.begin() + 1, M);
  return weighted_mean(afcrps(prediction.reshape(sizes), target, state.ensemble.crps_alpha, 1), state.lat_weights,
                       mask, state.channel_weights, state.interior);
}

at::Generator make_noise_generator(uint64_t seed, int group) {
  // A stream of its own, apart from the global generator's (model init, dropout) and per group
  // (per rank without ensemble groups: the group is then the rank).
  const uint64_t mixed = (seed + 0x6e6f697365ULL) * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(group);
  return at::make_generator<at::CPUGeneratorImpl>(mixed);
}

EnsembleLayout ensemble_layout(int rank, int world, int64_t group_size) {
  if (group_size < 1 || world % group_size != 0)
    throw ConfigError("distributed.ensemble_group = " + std::to_string(group_size) + " does not divide the world of " +
                      std::to_string(world) + " rank(s): an ensemble group is ensemble_group consecutive ranks, so "
                      "launch a multiple of it (mpirun -np), or set distributed.ensemble_group to a divisor of " +
                      std::to_string(world) + " that divides train.ensemble_members");
  const int g = static_cast<int>(group_size);
  return EnsembleLayout{rank / g, world / g, rank % g};
}

torch::Tensor gather_members(const TrainingState& state, const torch::Tensor& prediction) {
  if (!state.group_comm || state.ensemble.group <= 1) return prediction;
  const int64_t G = state.ensemble.group, m = state.ensemble.local_members();
  TORCH_CHECK(prediction.size(0) % m == 0, "gather_members: ", prediction.size(0), " rows are not samples of ", m,
              " members");
  const int64_t B = prediction.size(0) / m;
  // [G * B * m, ...] in rank order -> [G, B, m, ...] -> [B, G, m, ...] -> [B * M, ...] sample-major,
  // member g * m + j of sample b being rank g's row b * m + j.
  const torch::Tensor gathered = distributed::allgather_rows(state.group_comm, prediction);
  std::vector<int64_t> split = prediction.sizes().vec();
  split[0] = m;
  split.insert(split.begin(), {G, B});
  std::vector<int64_t> merged = prediction.sizes().vec();
  merged[0] = B * G * m;
  return gathered.view(split).transpose(0, 1).reshape(merged);
}

torch::Tensor rollout(models::WeatherModelImpl& model, torch::Tensor input, const torch::Tensor& forcings,
                      int64_t steps, const RolloutSetup& setup, const torch::Tensor& truth) {
  const int64_t P = setup.prognostic, D = setup.diagnostic;
  const bool has_forcings = forcings.defined() && forcings.size(2) > 0;
  if (has_forcings)
    TORCH_CHECK(forcings.size(1) >= steps, "rollout of ", steps, " steps needs forcings for each, got ", forcings.size(1));
  const bool boundary = setup.boundary.defined() && truth.defined();
  TORCH_CHECK(P > 0 && input.size(1) % P == 0, "rollout: the input's ", input.size(1), " channels are not states of ", P);
  const auto dtype = input.scalar_type();
  // The window of the last `history` states as parts, oldest first: at the start the micro-batch's
  // input (all of them), then the fed-back predictions one by one.
  std::vector<torch::Tensor> window{input};
  std::vector<torch::Tensor> states;
  // The last step's unit noise (before noise_std), for train.noise_correlation.
  torch::Tensor previous_noise = setup.noise_carry ? *setup.noise_carry : torch::Tensor();
  for (int64_t r = 0; r < steps; ++r) {
    std::vector<torch::Tensor> parts = window;
    if (has_forcings) parts.push_back(forcings.select(1, r).to(dtype));
    if (setup.noise_channels > 0) {
      // Each row (an ensemble member) its own noise, every step: drawn on the CPU from the run's
      // noise generator, so the stream does not depend on the device.
      TORCH_CHECK(setup.noise.defined(), "rollout: noise_channels without a noise generator");
      // In an ensemble group the rows are this rank's members of each sample: the noise of all
      // the group's members is drawn, as one process holding them all draws it, and this rank's
      // slice kept, so a member's noise does not depend on which rank holds it.
      const int64_t G = setup.noise_group, rows = input.size(0);
      torch::Tensor noise = at::randn({rows * G, setup.noise_channels, input.size(2), input.size(3)}, setup.noise,
                                      torch::TensorOptions().dtype(torch::kFloat32));
      if (G > 1) {
        const int64_t m = setup.noise_members;
        TORCH_CHECK(m >= 1 && rows % m == 0, "rollout: ", rows, " rows are not samples of ", m, " members");
        noise = noise.view({rows / m, G, m, setup.noise_channels, input.size(2), input.size(3)})
                    .select(1, setup.noise_group_rank)
                    .reshape({rows, setup.noise_channels, input.size(2), input.size(3)});
      }
      const double rho = setup.noise_correlation;
      if (rho > 0 && previous_noise.defined()) {
        TORCH_CHECK(previous_noise.sizes() == noise.sizes(), "rollout: the carried noise ", previous_noise.sizes(),
                    " does not match this step's ", noise.sizes());
        noise = previous_noise * rho + noise * std::sqrt(1.0 - rho * rho);
      }
      if (rho > 0) previous_noise = noise;
      parts.push_back((noise * setup.noise_std).to(input.device(), dtype));
    }
    const bool checkpoint_step = setup.checkpoint_steps && torch::GradMode::is_enabled();
    const torch::Tensor out =
        (checkpoint_step ? checkpointed_forward(model, parts)
                         : model.forward(parts.size() == 1 ? parts[0] : torch::cat(parts, 1)))
            .to(torch::kFloat32);
    // The model predicts the change from the newest state (as GraphCast does): persistence is the
    // starting point and the network learns the tendency, in units of typical tendencies. With
    // train.prediction = "state" it predicts the state itself, as FourCastNet does.
    torch::Tensor next;
    if (setup.predicts_state) {
      next = out.narrow(1, 0, P);
    } else {
      const torch::Tensor& last = window.back();
      const torch::Tensor newest = last.narrow(1, last.size(1) - P, P).to(torch::kFloat32);
      torch::Tensor tendency = out.narrow(1, 0, P);
      if (setup.residual_scale.defined()) tendency = tendency * setup.residual_scale.view({1, P, 1, 1});
      next = newest + tendency;
    }
    if (D > 0) next = torch::cat({next, out.narrow(1, P, D)}, 1);
    if (boundary) {
      // A limited-area model is driven at its edge: the frame takes the true state.
      const torch::Tensor b = setup.boundary;
      next = next * (1 - b) + truth.select(1, r).to(torch::kFloat32) * b;
    }
    states.push_back(next);
    if (r + 1 < steps) {  // the oldest state leaves the window, the prediction joins it
      if (window.front().size(1) > P) window.front() = window.front().narrow(1, P, window.front().size(1) - P);
      else window.erase(window.begin());
      window.push_back(next.narrow(1, 0, P).to(dtype));
    }
  }
  if (setup.noise_carry && previous_noise.defined()) *setup.noise_carry = previous_noise;
  return torch::stack(states, 1);
}

TrainingStep::TrainingStep(TrainingState& state, MemoryMeter* meter) : state_(state), meter_(meter) {}

StepResult TrainingStep::run(const std::vector<MicroBatch>& micro_batches, double lr, int64_t rollout_steps) {
  StepResult result;
  auto& parallel = *state_.parallel;
  auto& model = *state_.model;
  const RunConfig& config = state_.config;
  if (rollout_steps <= 0 && !micro_batches.empty()) rollout_steps = micro_batches[0].target.size(1);
  const double scale = state_.scaler.scale();
  const auto input_dtype = config.train.precision == Precision::kBf16 ? torch::kBFloat16 : torch::kFloat32;
  const AutocastState autocast = autocast_for(config.train.precision, state_.device);
  result.loss_scale = scale;

  // Model parallelism: this rank's band of every micro-batch and of the boundary frame. The
  // trainer's loader reads the band only (data::Dataset::set_band), so its micro-batches arrive
  // banded and pass through; a whole-grid micro-batch (a caller's own) is cut here.
  const ModelParallelSetup& mp = state_.model_parallel;
  std::vector<MicroBatch> banded;
  RolloutSetup setup = state_.rollout;
  if (mp.on()) {
    for (const MicroBatch& mb : micro_batches)
      banded.push_back({mp.band(mb.input), mp.band(mb.forcings), mp.band(mb.target), mp.band(mb.target_mask)});
    setup.boundary = mp.band(setup.boundary);
  }
  const std::vector<MicroBatch>& batches = mp.on() ? banded : micro_batches;

  if (meter_) meter_->reset_peak();
  parallel.zero_grad();
  torch::Tensor loss_sum;  // read once after backward: no host sync between micro-batches on CUDA
  const auto n = static_cast<int64_t>(batches.size());
  // A masked loss is a mean over the valid points of its micro-batch, so averaging micro-batch (and
  // rank) losses would weight a point by 1 / (valid points of its micro-batch). Weight each
  // micro-batch by its share of the valid points of the whole effective batch instead: the step is
  // then that of one process on the whole batch (at the price of one scalar allreduce).
  std::vector<double> weights(static_cast<size_t>(n), 1.0);
  if (n > 0 && batches[0].target_mask.defined()) {
    torch::NoGradGuard no_grad;
    torch::Tensor w = state_.lat_weights.dim() == 2 ? state_.lat_weights : state_.lat_weights.view({-1, 1});
    if (state_.interior.defined()) w = w * state_.interior;
    w = state_.channel_weights.view({-1, 1, 1}) * mp.band(w);
    double local = 0;
    for (int64_t m = 0; m < n; ++m) {
      weights[m] = (batches[m].target_mask.narrow(1, 0, rollout_steps).to(torch::kFloat32) * w).sum().item<double>();
      local += weights[m];
    }
    // Under model parallelism the world's sum counts each sample's valid points once (each rank
    // its band's), so the ranks' weighted band losses sum over a group to its samples' loss: the
    // data-parallel groups, not the ranks, are what the reduction averages over (below).
    const int world = state_.comm ? state_.comm->size() : 1;
    const int64_t groups = std::max<int64_t>(1, world / mp.size);  // 1: the one-process stand-in
    const double total = world > 1 ? state_.comm->sum(local) : local;
    for (double& v : weights) v = total > 0 ? v * static_cast<double>(n * groups) / total : 1.0;
  }
  for (int64_t m = 0; m < n; ++m) {
    const MicroBatch& mb = batches[m];
    parallel.prepare_backward(/*sync=*/m == n - 1);
    torch::Tensor loss;
    {
      AutocastGuard guard(autocast);
      const torch::Tensor target = mb.target.narrow(1, 0, rollout_steps);
      // An ensemble rolls out every sample's members together: M rows per sample, sample-major (in
      // an ensemble group this rank's M / G of them, gathered into all M before the loss).
      const int64_t M = state_.ensemble.local_members();
      torch::Tensor prediction =
          rollout(model, tile_members(mb.input.to(input_dtype), M), tile_members(mb.forcings, M), rollout_steps,
                  setup, setup.boundary.defined() ? tile_members(target, M) : target);
      prediction = gather_members(state_, prediction);
      loss = training_loss(state_, prediction, target,
                           mb.target_mask.defined() ? mb.target_mask.narrow(1, 0, rollout_steps) : torch::Tensor());
    }
    const torch::Tensor weighted = loss.detach() * weights[m];
    loss_sum = loss_sum.defined() ? loss_sum + weighted : weighted;
    (loss * (scale * weights[m] / static_cast<double>(n))).backward();
  }
  // The gradient reduction averages over the world's W ranks. In an ensemble group of G ranks every
  // rank computes the same loss of the gathered members, but its parameters' gradient comes through
  // its own members only (gather_members' backward), so the gradient of one process holding all M
  // members is the SUM of the group's G gradients, and data parallelism then averages over the
  // W / G groups (each its own samples). Sum within, mean across = (G / W) x the sum over the
  // world: the reducer's 1 / W times G. (Masked weights above are unchanged by this: the ranks of a
  // group hold the same samples, so the world's sum of valid points is G times the groups'.)
  // A model-parallel group of P ranks likewise: each rank's gradient is that of its band's share
  // of the loss (the halo exchange's backward hands the gradients of halo nodes to their owners),
  // so the group's gradient is the sum of its P, and the groups are averaged: P / W x the world's sum.
  const double group = static_cast<double>(state_.ensemble.group * mp.size);
  const bool finite = parallel.finish_backward(group / scale);
  if (mp.on()) mp.comm->allreduce(loss_sum);  // the bands' shares sum to the samples' loss
  result.loss = loss_sum.item<double>() / static_cast<double>(n);
  if (meter_) {
    result.peak_forward_backward = meter_->snapshot().peak;
    meter_->reset_peak();
  }
  result.applied = state_.scaler.update(finite);
  if (result.applied) {
    result.grad_norm = parallel.clip_grad_norm(config.train.grad_clip);
    parallel.step(lr);
  }
  if (meter_) result.peak_optimizer = meter_->snapshot().peak;
  return result;
}

std::vector<MicroBatch> synthetic_micro_batches(const RunConfig& config, const models::ModelShape& shape,
                                                int64_t batch_size, int64_t count, torch::Device device) {
  std::vector<MicroBatch> out;
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  // Under model parallelism a rank holds its band only, as the trainer's loader reads it: rank 0's
  // in one process (the stand-in group), this rank's in a world the group size divides.
  int64_t lat = shape.lat, lon = shape.lon;
  if (const int64_t P = config.distributed.model_parallel; P > 1) {
    const int world = distributed::current_world().size;
    const int64_t r = world % P == 0 ? distributed::current_world().rank % P : 0;
    (shape.point_set ? lon : lat) = data::grid_band(shape.point_set ? shape.lon : shape.lat, P, r).second;
  }
  for (int64_t i = 0; i < count; ++i) {
    MicroBatch mb;
    const ChannelLayout layout = config.channels();
    // A bare model shape without named channels has no forcings.
    const int64_t forcings = layout.in_channels() == shape.in_channels
                                 ? static_cast<int64_t>(layout.forcing.size() + layout.statics.size())
                                 : 0;
    // An ensemble's noise channels are drawn by the rollout, not held by the batch.
    const int64_t noise = layout.in_channels() == shape.in_channels ? layout.noise : 0;
    const int64_t rollout = config.max_rollout();
    mb.input = torch::randn({batch_size, shape.in_channels - forcings - noise, lat, lon}, opts);
    mb.forcings = torch::randn({batch_size, rollout, forcings, lat, lon}, opts);
    mb.target = torch::randn({batch_size, rollout, shape.out_channels, lat, lon}, opts);
    out.push_back(std::move(mb));
  }
  return out;
}

}  // namespace wxtrain::trainer
