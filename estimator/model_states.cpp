#include "estimator/model_states.h"

namespace wxtrain::estimator {

StateLayout state_layout(Precision precision, const std::string& optimizer, double momentum) {
  StateLayout l;
  // Only pure bf16 stores half parameters; the autocast modes keep fp32 parameters and cast on
  // the fly (the casts are activations, measured by the trace).
  const bool half_params = precision == Precision::kBf16;
  l.param_bytes = half_params ? 2 : 4;
  if (optimizer == "adam" || optimizer == "adamw") l.optimizer_bytes = 8;
  else l.optimizer_bytes = momentum > 0 ? 4 : 0;
  if (half_params) l.optimizer_bytes += 4;  // fp32 master copy
  return l;
}

ModelStates model_states(int64_t num_params, const StateLayout& layout, int64_t zero_stage, int64_t world_size,
                         const BlockParams& blocks) {
  const double n = static_cast<double>(num_params);
  const double world = static_cast<double>(world_size < 1 ? 1 : world_size);
  ModelStates s;
  s.num_params = num_params;
  s.params = n * layout.param_bytes / (zero_stage >= 3 ? world : 1.0);
  s.grads = n * layout.param_bytes / (zero_stage >= 2 ? world : 1.0);
  s.optimizer = n * layout.optimizer_bytes / (zero_stage >= 1 ? world : 1.0);
  if (zero_stage >= 3 && world > 1) {
    const double outside = static_cast<double>(blocks.outside);
    s.gathered = 2.0 * static_cast<double>(blocks.largest) * layout.param_bytes;
    s.params = (n - outside) * layout.param_bytes / world + outside * layout.param_bytes + s.gathered;
  }
  return s;
}

}  // namespace wxtrain::estimator
