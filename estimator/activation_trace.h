#pragma once
// Activations measured, not guessed: the real training step (trainer::TrainingStep) runs on the
// CPU under the counting allocator at two small batch sizes; the peak of each phase (forward +
// backward, optimizer update) is a straight line in the batch size, and the run's peak is the
// higher of the two lines. Precision, checkpointing, accumulation and rollout are those of the
// config because the step is the trainer's own.
#include <cstdint>

#include "core/config.h"
#include "models/weather_model.h"

namespace wxtrain::estimator {

struct Line {
  double fixed = 0;
  double per_sample = 0;
  double at(double batch) const { return fixed + per_sample * batch; }
};

// One traced or measured step at one batch size (bytes above the allocator's level before the
// model was built).
struct StepMemory {
  int64_t batch = 0;
  int64_t states = 0;           // allocated after building model, optimizer state and buffers
  int64_t peak_forward_backward = 0;
  int64_t peak_optimizer = 0;
  int64_t peak() const { return peak_forward_backward > peak_optimizer ? peak_forward_backward : peak_optimizer; }
  int64_t num_params = 0;
};

enum class Mode { kTrain, kInference };

// Runs `steps` real training steps (or forward passes in inference mode) at `batch` on the CPU
// under the counting allocator and returns the highest phase peaks seen.
StepMemory measure_step(const RunConfig& config, const models::ModelShape& shape, int64_t batch, Mode mode,
                        int64_t steps = 2);

struct ActivationFit {
  Line forward_backward;  // peak bytes of the forward/backward phase minus the states
  Line optimizer;         // peak bytes of the optimizer phase minus the states
  int64_t traced_states = 0;
  int64_t num_params = 0;
  double at(double batch) const;  // activation bytes (incl. workspaces and inputs) at `batch`
};

// Traces at batches b1 < b2 and fits the two lines.
ActivationFit trace_activations(const RunConfig& config, const models::ModelShape& shape, Mode mode,
                                int64_t b1 = 1, int64_t b2 = 2);

// The configuration the CPU trace actually runs for `config`: fp16-mixed (CUDA only) traces as
// bf16-mixed (same width), accumulation beyond 2 traces as 2 (memory is periodic after that),
// one rank without ZeRO (states of other stages are exact formulas, activations do not depend on it).
RunConfig trace_config(const RunConfig& config);

}  // namespace wxtrain::estimator
