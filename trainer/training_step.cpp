#include "trainer/training_step.h"

#include <fnmatch.h>

#include <cmath>

#include "core/autocast.h"
#include "core/error.h"

namespace wxtrain::trainer {

namespace {

bool matches_any(const std::string& name, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns)
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

}  // namespace

AutocastState autocast_for(Precision precision, const torch::Device& device) {
  const bool on = precision == Precision::kBf16Mixed || precision == Precision::kFp16Mixed;
  return AutocastGuard::with(device.type(), precision == Precision::kFp16Mixed ? c10::kHalf : c10::kBFloat16, on);
}

std::unique_ptr<TrainingState> build_training_state(const RunConfig& config, const models::ModelShape& shape,
                                                     std::shared_ptr<distributed::Communicator> comm,
                                                     torch::Device device, const std::vector<double>& latitudes,
                                                     const ModelInit& init) {
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
  state->parallel = std::make_unique<distributed::DataParallel>(state->comm, std::move(groups), opt,
                                                                static_cast<int>(config.distributed.zero_stage),
                                                                config.distributed.bucket_mb);
  state->scaler = LossScaler::from_config(t);

  torch::Tensor w = torch::ones({shape.lat}, torch::kFloat32);
  if (!latitudes.empty()) {
    if (static_cast<int64_t>(latitudes.size()) != shape.lat)
      throw Error("latitude count " + std::to_string(latitudes.size()) + " does not match the grid's " +
                  std::to_string(shape.lat) + " rows");
    w = torch::tensor(latitudes, torch::kFloat64).mul(M_PI / 180.0).cos().clamp_min(0.0).to(torch::kFloat32);
    w = w / w.mean();
  }
  state->lat_weights = w.to(device);
  return state;
}

torch::Tensor weighted_mse(const torch::Tensor& prediction, const torch::Tensor& target,
                           const torch::Tensor& lat_weights, const torch::Tensor& mask) {
  torch::Tensor err = (prediction.to(torch::kFloat32) - target.to(torch::kFloat32)).square();
  torch::Tensor w = lat_weights.view({1, 1, -1, 1});
  if (!mask.defined()) return (err * w).mean() / w.mean();
  torch::Tensor wm = mask.to(torch::kFloat32) * w;
  return (err * wm).sum() / wm.sum().clamp_min(1.0);
}

torch::Tensor rollout(models::WeatherModelImpl& model, torch::Tensor input, int64_t steps, int64_t variables) {
  std::vector<torch::Tensor> states;
  for (int64_t r = 0; r < steps; ++r) {
    // The model predicts the change from the newest state (as GraphCast does): persistence is the
    // starting point and the network learns the tendency.
    torch::Tensor newest = input.narrow(1, input.size(1) - variables, variables);
    torch::Tensor next = newest.to(torch::kFloat32) + model.forward(input).to(torch::kFloat32);
    states.push_back(next);
    if (r + 1 < steps) input = torch::cat({input.narrow(1, variables, input.size(1) - variables), next.to(input.dtype())}, 1);
  }
  return torch::stack(states, 1);
}

TrainingStep::TrainingStep(TrainingState& state, MemoryMeter* meter) : state_(state), meter_(meter) {}

StepResult TrainingStep::run(const std::vector<MicroBatch>& micro_batches, double lr) {
  StepResult result;
  auto& parallel = *state_.parallel;
  auto& model = *state_.model;
  const RunConfig& config = state_.config;
  const int64_t variables = state_.model->shape().out_channels;
  const int64_t rollout_steps = config.data.rollout_steps;
  const double scale = state_.scaler.scale();
  const auto input_dtype = config.train.precision == Precision::kBf16 ? torch::kBFloat16 : torch::kFloat32;
  const AutocastState autocast = autocast_for(config.train.precision, state_.device);
  result.loss_scale = scale;

  if (meter_) meter_->reset_peak();
  parallel.zero_grad();
  torch::Tensor loss_sum;  // read once after backward: no host sync between micro-batches on CUDA
  const auto n = static_cast<int64_t>(micro_batches.size());
  // A masked loss is a mean over the valid points of its micro-batch, so averaging micro-batch (and
  // rank) losses would weight a point by 1 / (valid points of its micro-batch). Weight each
  // micro-batch by its share of the valid points of the whole effective batch instead: the step is
  // then that of one process on the whole batch (at the price of one scalar allreduce).
  std::vector<double> weights(static_cast<size_t>(n), 1.0);
  if (n > 0 && micro_batches[0].target_mask.defined()) {
    torch::NoGradGuard no_grad;
    const torch::Tensor w = state_.lat_weights.view({1, 1, -1, 1});
    double local = 0;
    for (int64_t m = 0; m < n; ++m) {
      weights[m] = (micro_batches[m].target_mask.to(torch::kFloat32) * w).sum().item<double>();
      local += weights[m];
    }
    const int world = state_.comm ? state_.comm->size() : 1;
    const double total = world > 1 ? state_.comm->sum(local) : local;
    for (double& v : weights) v = total > 0 ? v * static_cast<double>(n * world) / total : 1.0;
  }
  for (int64_t m = 0; m < n; ++m) {
    const MicroBatch& mb = micro_batches[m];
    parallel.prepare_backward(/*sync=*/m == n - 1);
    torch::Tensor loss;
    {
      AutocastGuard guard(autocast);
      torch::Tensor prediction = rollout(model, mb.input.to(input_dtype), rollout_steps, variables);
      loss = weighted_mse(prediction, mb.target, state_.lat_weights, mb.target_mask);
    }
    const torch::Tensor weighted = loss.detach() * weights[m];
    loss_sum = loss_sum.defined() ? loss_sum + weighted : weighted;
    (loss * (scale * weights[m] / static_cast<double>(n))).backward();
  }
  const bool finite = parallel.finish_backward(1.0 / scale);
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
  for (int64_t i = 0; i < count; ++i) {
    MicroBatch mb;
    mb.input = torch::randn({batch_size, shape.in_channels, shape.lat, shape.lon}, opts);
    mb.target = torch::randn({batch_size, config.data.rollout_steps, shape.out_channels, shape.lat, shape.lon}, opts);
    out.push_back(std::move(mb));
  }
  return out;
}

}  // namespace wxtrain::trainer
