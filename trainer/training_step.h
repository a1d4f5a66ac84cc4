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
#include "distributed/data_parallel.h"
#include "models/weather_model.h"
#include "trainer/loss_scaler.h"

namespace wxtrain::trainer {

// One micro-batch: input [B, V*history, lat, lon]; target [B, rollout, V, lat, lon];
// target_mask like target (1 = valid) or undefined when the data has no fill values.
struct MicroBatch {
  torch::Tensor input;
  torch::Tensor target;
  torch::Tensor target_mask;
};

struct StepResult {
  double loss = 0;        // mean latitude-weighted MSE over micro-batches and rollout steps
  double grad_norm = 0;   // global norm before clipping (0 when skipped)
  bool applied = false;   // false: inf/NaN gradients, optimizer step skipped
  double loss_scale = 1;  // the scale used for this step
  // Peaks seen by the meter (when one is attached), above nothing: absolute allocated bytes.
  int64_t peak_forward_backward = 0;
  int64_t peak_optimizer = 0;
};

// Everything a step needs, built once from the run config.
struct TrainingState {
  RunConfig config;
  torch::Device device{torch::kCPU};
  models::WeatherModel model;
  std::shared_ptr<distributed::Communicator> comm;
  std::unique_ptr<distributed::DataParallel> parallel;
  LossScaler scaler{LossScaler::Options{}};
  torch::Tensor lat_weights;  // [lat] cos(latitude) normalised to mean 1, on the device
  std::vector<std::string> frozen;  // names of parameters frozen by train.freeze
};

// Sets the weights of a freshly built model (fine-tuning's init_from, or a resumed checkpoint)
// before the optimizer takes its fp32 copies.
using ModelInit = std::function<void(models::WeatherModelImpl&)>;

// Builds the model (seeded by train.seed), applies `init`, moves it to the device and precision,
// freezes the train.freeze patterns, and creates the parameter groups and the DataParallel
// updater. `latitudes` in degrees (one per grid row); empty means uniform weights.
std::unique_ptr<TrainingState> build_training_state(const RunConfig& config, const models::ModelShape& shape,
                                                     std::shared_ptr<distributed::Communicator> comm,
                                                     torch::Device device, const std::vector<double>& latitudes = {},
                                                     const ModelInit& init = {});

// The autocast state a precision runs under on `device` (on for the *-mixed precisions).
AutocastState autocast_for(Precision precision, const torch::Device& device);

// Latitude-weighted MSE of prediction [B, V, lat, lon] against target (same shape), with an
// optional validity mask; computed in fp32.
torch::Tensor weighted_mse(const torch::Tensor& prediction, const torch::Tensor& target,
                           const torch::Tensor& lat_weights, const torch::Tensor& mask = {});

// Rolls the model forward `steps` times from input [B, V*history, lat, lon]; returns fp32
// [B, steps, V, lat, lon]. Each step predicts newest state + model(window) (the model learns the
// tendency) and the new state replaces the oldest in the input window.
torch::Tensor rollout(models::WeatherModelImpl& model, torch::Tensor input, int64_t steps, int64_t variables);

class TrainingStep {
 public:
  // `meter` (optional) records the peak of the forward/backward and optimizer phases.
  explicit TrainingStep(TrainingState& state, MemoryMeter* meter = nullptr);
  // One optimizer step over `micro_batches` (train.accumulation of them) at learning rate lr.
  StepResult run(const std::vector<MicroBatch>& micro_batches, double lr);

 private:
  TrainingState& state_;
  MemoryMeter* meter_;
};

// Random micro-batches of the configured shape (for estimate, tune-batch and profile probes,
// which need the real step on inputs of the right size, not real data).
std::vector<MicroBatch> synthetic_micro_batches(const RunConfig& config, const models::ModelShape& shape,
                                                int64_t batch_size, int64_t count, torch::Device device);

}  // namespace wxtrain::trainer
