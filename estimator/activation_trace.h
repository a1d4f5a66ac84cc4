#pragma once
// Activations measured, not guessed: the real training step (trainer::TrainingStep) runs on the
// CPU under the counting allocator at batch 1, 2 and 4. The peak of each phase (forward + backward,
// optimizer update) is piecewise linear in the batch size: a kernel may take another path at batch
// 1, and the moment of the peak can move as the batch grows, which only ever makes the curve bend
// upwards past the trace points. So each phase gets two lines (through batches 1-2 and 2-4) and
// the prediction is the highest of the four: exact at the traced batches, never below a bend. Precision, checkpointing, accumulation and rollout are those of the
// config because the step is the trainer's own.
#include <cstdint>
#include <vector>

#include "core/config.h"
#include "estimator/model_states.h"
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
  BlockParams blocks;
};

enum class Mode { kTrain, kInference };

// Runs `steps` real training steps (or forward passes in inference mode) at `batch` on the CPU
// under the counting allocator and returns the highest phase peaks seen.
// How the instantiated model's trainable and frozen parameters divide into its blocks (what ZeRO-3
// gathers at once); a parameter two blocks share counts as outside, as ZeRO-3 keeps it.
BlockParams block_params(const models::WeatherModelImpl& model);

StepMemory measure_step(const RunConfig& config, const models::ModelShape& shape, int64_t batch, Mode mode,
                        int64_t steps = 2);

struct ActivationFit {
  // Peak bytes minus the states of the forward/backward and the optimizer phase, through the two
  // largest traced batches: how memory grows from there on.
  Line forward_backward;
  Line optimizer;
  // Lines through the smaller traced batches, which bound the curve below its bend (empty for the
  // analytic estimate).
  std::vector<Line> small_batch;
  int64_t traced_states = 0;
  int64_t num_params = 0;
  BlockParams blocks;  // for ZeRO-3's gathered blocks (model_states)
  // The model-parallel ranks these activations are one rank's of: a traced run with
  // distributed.model_parallel = P runs rank 0 of P; the formulas say (models::ModelMemory::ranks).
  int64_t ranks = 1;
  double at(double batch) const;  // activation bytes (incl. workspaces and inputs) at `batch`

  double per_sample() const;    // the steepest slope: bytes each extra sample costs
};

// Traces at each of `batches` (ascending, at least two) and fits a line per consecutive pair.
ActivationFit trace_activations(const RunConfig& config, const models::ModelShape& shape, Mode mode,
                                const std::vector<int64_t>& batches = {1, 2, 4});

// The configuration the CPU trace actually runs for `config`: fp16-mixed (CUDA only) traces as
// bf16-mixed (same width), accumulation beyond 2 traces as 2 (memory is periodic after that),
// one rank without ZeRO (states of other stages are exact formulas, activations do not depend on it).
RunConfig trace_config(const RunConfig& config);

// Whether the run `config` describes uses wxtrain's fused CPU kernels (ops/group_norm_silu.h):
// only when train.device is "cpu". An estimate is otherwise for a GPU ("auto" included: the catalog
// is of GPUs), so the trace turns the fusions off and the analytic formulas follow the unfused path.
bool uses_cpu_fusion(const RunConfig& config);

}  // namespace wxtrain::estimator
