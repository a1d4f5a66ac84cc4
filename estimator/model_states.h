#pragma once
// Memory of the model states (parameters, gradients, optimizer state, fp32 master weights),
// exactly, per rank, for a precision, optimizer and ZeRO stage over a world size — the ZeRO
// paper's accounting (Rajbhandari et al. 2020, sec. 3 and 5): stage 1 shards the optimizer state
// (with the master weights), stage 2 also the gradients, stage 3 also the parameters.
#include <cstdint>
#include <string>

#include "core/config.h"

namespace wxtrain::estimator {

// How a model's parameters divide into its blocks (models/weather_model.h): what ZeRO-3 gathers
// at once.
struct BlockParams {
  int64_t largest = 0;  // parameters of the largest block
  int64_t outside = 0;  // parameters of no block (ZeRO-3 keeps them whole on every rank)
};

struct ModelStates {
  int64_t num_params = 0;
  double params = 0;     // bytes per rank (under ZeRO-3: the shards, plus `gathered`)
  double gathered = 0;   // ZeRO-3: the full parameters of the blocks held at once, part of `params`
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

// Stage 3 over more than one rank (distributed/sharded_parameters.h): each rank keeps 1/N of every
// block's parameters and the parameters outside the blocks whole, and holds at most two blocks
// whole at once (the running one and the prefetched next): params = (n - outside) / N + outside,
// plus 2 x the largest block. A world of one runs every stage as stage 0.
ModelStates model_states(int64_t num_params, const StateLayout& layout, int64_t zero_stage, int64_t world_size,
                         const BlockParams& blocks = {});

}  // namespace wxtrain::estimator
