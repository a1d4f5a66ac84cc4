#pragma once
// Memory of the model states (parameters, gradients, optimizer state, fp32 master weights),
// exactly, per rank, for a precision, optimizer and ZeRO stage over a world size — the ZeRO
// paper's accounting (Rajbhandari et al. 2020, sec. 3 and 5): stage 1 shards the optimizer state
// (with the master weights), stage 2 also the gradients, stage 3 also the parameters.
#include <cstdint>
#include <string>

#include "core/config.h"

namespace wxtrain::estimator {

struct ModelStates {
  int64_t num_params = 0;
  double params = 0;     // bytes per rank
  double grads = 0;
  double optimizer = 0;  // moments / momentum buffers, plus fp32 master weights where params are half
  double total() const { return params + grads + optimizer; }
};

struct StateLayout {
  int param_bytes = 4;      // bytes per parameter (and per gradient)
  int optimizer_bytes = 8;  // per parameter: adam(w) 8, sgd+momentum 4, sgd 0, +4 fp32 master for half params
};

// Bytes per parameter that wxtrain's trainer allocates for this precision and optimizer.
StateLayout state_layout(Precision precision, const std::string& optimizer, double momentum);

ModelStates model_states(int64_t num_params, const StateLayout& layout, int64_t zero_stage, int64_t world_size);

}  // namespace wxtrain::estimator
