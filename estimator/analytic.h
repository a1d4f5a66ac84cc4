#pragma once
// `estimate --analytic`: model states and activations by formula, for models too large to trace
// on this machine (billions of parameters). Parameter counts follow the zoo's architectures
// exactly; activation bytes are per-block formulas (what autograd saves for backward in each
// layer, plus the transient peak of the largest block), documented in docs/estimator.md and tested
// against the traced figures on small models (tests/estimator).
#include "core/config.h"
#include "estimator/activation_trace.h"
#include "models/weather_model.h"

namespace wxtrain::estimator {

// Parameters of the zoo model `config.model` for `shape`, by formula (no tensors allocated).
int64_t analytic_param_count(const ModelConfig& config, const models::ModelShape& shape);

// The rows of the model's batch per sample: train.ensemble_members (1 for a deterministic run).
int64_t members_per_sample(const RunConfig& config);

// The grid points one rank's micro-batch holds: the whole grid, or under distributed.model_parallel
// = P > 1 (a model that shards its grid) rank 0's band, the widest, as each rank reads only its band
// (data::grid_band; docs/data.md "Bands").
double batch_grid_points(const RunConfig& config, const models::ModelShape& shape);

// Bytes per sample of the step's micro-batch tensors (fp32 input less an ensemble's noise channels,
// forcings of every rollout step, target) over batch_grid_points, all micro-batches of the step: not
// tiled by the members.
double batch_tensor_bytes(const RunConfig& config, const models::ModelShape& shape);

// Activation lines by formula, in the same form the trace produces. An ensemble (ensemble_members M
// > 1) runs the model on batch x M rows: its per-sample terms are the model's per-row terms x M,
// plus the afCRPS's (the members' differences and sort indices), plus the batch tensors (per sample).
// Inference forecasts one member.
ActivationFit analytic_activations(const RunConfig& config, const models::ModelShape& shape, Mode mode);

}  // namespace wxtrain::estimator
