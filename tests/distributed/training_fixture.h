#pragma once
// A small model, seeded data and a torch::optim reference, shared by the single-process and the
// mpirun tests: ZeroDataParallel must train the model exactly as torch.optim does on the full batch.
#include <memory>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "distributed/zero_data_parallel.h"

namespace wxtrain::distributed::fixture {

constexpr int64_t kIn = 8, kHidden = 32, kOut = 4;

inline torch::nn::Sequential make_model(uint64_t seed, torch::Dtype dtype = torch::kFloat) {
  torch::manual_seed(seed);
  torch::nn::Sequential model(torch::nn::Linear(kIn, kHidden), torch::nn::Tanh(), torch::nn::Linear(kHidden, kHidden),
                              torch::nn::Tanh(), torch::nn::Linear(kHidden, kOut));
  model->to(dtype);
  return model;
}

// Two groups as a trainer builds them: weights with decay, biases without (and their own lr scale).
inline std::vector<ParamGroup> make_groups(torch::nn::Sequential& model, double weight_decay, double bias_lr_scale = 1.0) {
  ParamGroup weights, biases;
  weights.weight_decay = weight_decay;
  biases.lr_scale = bias_lr_scale;
  for (auto& item : model->named_parameters()) {
    ParamGroup& g = item.value().dim() >= 2 ? weights : biases;
    g.names.push_back(item.key());
    g.params.push_back(item.value());
  }
  return {weights, biases};
}

inline std::pair<torch::Tensor, torch::Tensor> make_batch(int step, int64_t n, torch::Dtype dtype = torch::kFloat) {
  torch::manual_seed(1000 + step);
  return {torch::randn({n, kIn}).to(dtype), torch::randn({n, kOut}).to(dtype)};
}

inline torch::Tensor loss_of(torch::nn::Sequential& model, const torch::Tensor& x, const torch::Tensor& y) {
  return (model->forward(x) - y).pow(2).mean();  // mse_loss has no CPU bf16 kernel in LibTorch 1.13
}

inline torch::Tensor flat_params(const torch::nn::Sequential& model) {
  std::vector<torch::Tensor> parts;
  for (auto& p : model->parameters()) parts.push_back(p.detach().reshape(-1).to(torch::kFloat));
  return torch::cat(parts).clone();
}

inline void set_params(torch::nn::Sequential& model, const torch::Tensor& flat) {
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (auto& p : model->parameters()) {
    p.copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
}

// torch::optim with the same groups as make_groups().
inline std::unique_ptr<torch::optim::Optimizer> make_reference(torch::nn::Sequential& model, const OptimizerOptions& o,
                                                               double lr, double weight_decay, double bias_lr_scale = 1.0) {
  std::vector<torch::Tensor> weights, biases;
  for (auto& p : model->parameters()) (p.dim() >= 2 ? weights : biases).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto add = [&](std::vector<torch::Tensor> params, double group_lr, double wd) {
    if (o.kind == "adamw") {
      groups.emplace_back(params, std::make_unique<torch::optim::AdamWOptions>(
                                      torch::optim::AdamWOptions(group_lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(wd)));
    } else if (o.kind == "adam") {
      groups.emplace_back(params, std::make_unique<torch::optim::AdamOptions>(
                                      torch::optim::AdamOptions(group_lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(wd)));
    } else {
      groups.emplace_back(params, std::make_unique<torch::optim::SGDOptions>(
                                      torch::optim::SGDOptions(group_lr).momentum(o.momentum).weight_decay(wd)));
    }
  };
  add(weights, lr, weight_decay);
  add(biases, lr * bias_lr_scale, 0.0);
  if (o.kind == "adamw") return std::make_unique<torch::optim::AdamW>(std::move(groups), torch::optim::AdamWOptions(lr));
  if (o.kind == "adam") return std::make_unique<torch::optim::Adam>(std::move(groups), torch::optim::AdamOptions(lr));
  return std::make_unique<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(lr));
}

// One full-batch step of the reference.
inline void reference_step(torch::nn::Sequential& model, torch::optim::Optimizer& opt, int step, int64_t batch,
                           double max_norm) {
  opt.zero_grad();
  auto [x, y] = make_batch(step, batch);
  loss_of(model, x, y).backward();
  if (max_norm > 0) torch::nn::utils::clip_grad_norm_(model->parameters(), max_norm);
  opt.step();
}

// One ZeroDataParallel step: this rank's share of the global batch, in `micro` accumulation micro-steps
// (only the last synchronised). Returns finish_backward's verdict.
inline bool dp_step(torch::nn::Sequential& model, ZeroDataParallel& dp, int step, int64_t global_batch, int rank, int world,
                    int micro, double max_norm, double lr, torch::Dtype dtype = torch::kFloat) {
  dp.zero_grad();
  auto [x, y] = make_batch(step, global_batch, dtype);
  const int64_t per_rank = global_batch / world, per_micro = per_rank / micro;
  for (int k = 0; k < micro; ++k) {
    dp.prepare_backward(k == micro - 1);
    const int64_t begin = rank * per_rank + k * per_micro;
    loss_of(model, x.narrow(0, begin, per_micro), y.narrow(0, begin, per_micro)).backward();
  }
  const bool finite = dp.finish_backward(1.0 / micro);
  dp.clip_grad_norm(max_norm);
  dp.step(lr);
  return finite;
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

}  // namespace wxtrain::distributed::fixture
