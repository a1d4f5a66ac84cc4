#include "distributed/flat_optimizer.h"

#include <ATen/Parallel.h>

#include <cmath>

#include "core/error.h"
#include "distributed/kernels/optimizer_kernels.h"

namespace wxtrain::distributed {

OptimizerKind parse_optimizer_kind(const std::string& kind) {
  if (kind == "adamw") return OptimizerKind::kAdamW;
  if (kind == "adam") return OptimizerKind::kAdam;
  if (kind == "sgd") return OptimizerKind::kSgd;
  throw ConfigError("Invalid optimizer type: " + kind + " (train.optimizer: expected adamw, adam or sgd)");
}

std::vector<std::string> optimizer_state_names(OptimizerKind kind, const OptimizerOptions& options) {
  switch (kind) {
    case OptimizerKind::kAdamW:
    case OptimizerKind::kAdam:
      return {"exp_avg", "exp_avg_sq"};
    case OptimizerKind::kSgd:
      if (options.momentum > 0) return {"momentum_buffer"};
      return {};
  }
  return {};
}

namespace {

bool fusable_on_cpu(const torch::Tensor& params, const torch::Tensor& grads, const std::vector<torch::Tensor>& state) {
  for (const torch::Tensor* t : {&params, &grads, &state[0], &state[1]}) {
    if (!t->device().is_cpu() || t->scalar_type() != torch::kFloat || !t->is_contiguous() ||
        t->numel() != params.numel()) {
      return false;
    }
  }
  return true;
}

}  // namespace

void flat_update(OptimizerKind kind, const OptimizerOptions& options, int64_t step, double lr,
                 double weight_decay, torch::Tensor params, torch::Tensor grads, std::vector<torch::Tensor>& state) {
  torch::NoGradGuard no_grad;
  if (params.numel() == 0) return;
  switch (kind) {
    case OptimizerKind::kAdamW:
    case OptimizerKind::kAdam: {
      const double bias_correction1 = 1 - std::pow(options.beta1, static_cast<double>(step));
      const double bias_correction2 = 1 - std::pow(options.beta2, static_cast<double>(step));
      if (fusable_on_cpu(params, grads, state)) {  // one pass (kernels/optimizer_kernels.h)
        const bool decoupled = kind == OptimizerKind::kAdamW;
        const kernels::AdamStep s{static_cast<float>(decoupled ? 1 - lr * weight_decay : 1.0),
                                  static_cast<float>(decoupled ? 0.0 : weight_decay),
                                  static_cast<float>(options.beta1),
                                  static_cast<float>(options.beta2),
                                  static_cast<float>(std::sqrt(bias_correction2)),
                                  static_cast<float>(options.eps),
                                  static_cast<float>(lr / bias_correction1)};
        float* p = params.data_ptr<float>();
        const float* g = grads.data_ptr<float>();
        float* m = state[0].data_ptr<float>();
        float* v = state[1].data_ptr<float>();
        at::parallel_for(0, params.numel(), int64_t{1} << 16, [&](int64_t begin, int64_t end) {
          kernels::adam_update(p + begin, g + begin, m + begin, v + begin, end - begin, s);
        });
        return;
      }
      if (kind == OptimizerKind::kAdamW) {
        if (weight_decay != 0) params.mul_(1 - lr * weight_decay);
      } else if (weight_decay != 0) {
        grads.add_(params, weight_decay);
      }
      torch::Tensor& exp_avg = state[0];
      torch::Tensor& exp_avg_sq = state[1];
      exp_avg.mul_(options.beta1).add_(grads, 1 - options.beta1);
      exp_avg_sq.mul_(options.beta2).addcmul_(grads, grads, 1 - options.beta2);
      // The one temporary of the update; the gradient buffer is not needed any more, so it holds it.
      torch::Tensor denom = torch::sqrt_out(grads, exp_avg_sq).div_(std::sqrt(bias_correction2)).add_(options.eps);
      params.addcdiv_(exp_avg, denom, -lr / bias_correction1);
      return;
    }
    case OptimizerKind::kSgd: {
      if (weight_decay != 0) grads.add_(params, weight_decay);
      if (options.momentum > 0) {
        state[0].mul_(options.momentum).add_(grads);
        params.add_(state[0], -lr);
      } else {
        params.add_(grads, -lr);
      }
      return;
    }
  }
}

}  // namespace wxtrain::distributed
