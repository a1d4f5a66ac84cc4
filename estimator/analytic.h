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

// Activation lines by formula, in the same form the trace produces.
ActivationFit analytic_activations(const RunConfig& config, const models::ModelShape& shape, Mode mode);

}  // namespace wxtrain::estimator
