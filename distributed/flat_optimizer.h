#pragma once
// The optimizer update on flat float32 buffers: one group's (shard of) parameters, gradients and
// state as single contiguous tensors, so an update is a handful of vectorised ops over millions of
// elements instead of a loop over hundreds of small tensors. Same math as torch.optim:
//   adamw: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
//          p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
//   adam:  g += wd*p (L2), then the same moments and update
//   sgd:   g += wd*p; with momentum > 0: buf = momentum*buf + g, g = buf; p -= lr*g
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace wxtrain::distributed {

struct OptimizerOptions {
  std::string kind = "adamw";  // adamw | adam | sgd
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double momentum = 0.0;       // sgd: 0 = no momentum buffer
};

enum class OptimizerKind { kAdamW, kAdam, kSgd };

// Throws ConfigError naming the bad value and the accepted ones ("Invalid optimizer type: adamx").
OptimizerKind parse_optimizer_kind(const std::string& kind);

// The per-element state the optimizer keeps, in a fixed order (names used in checkpoints):
// adam/adamw: exp_avg, exp_avg_sq; sgd with momentum: momentum_buffer; plain sgd: none.
std::vector<std::string> optimizer_state_names(OptimizerKind kind, const OptimizerOptions& options);

// One update of `params` (float32) from `grads` (float32; may be modified, e.g. by the L2 term).
// `step` is the 1-based count of updates including this one; `state` follows optimizer_state_names.
void flat_update(OptimizerKind kind, const OptimizerOptions& options, int64_t step, double lr,
                 double weight_decay, torch::Tensor params, torch::Tensor grads, std::vector<torch::Tensor>& state);

}  // namespace wxtrain::distributed
