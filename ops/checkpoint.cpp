#include "ops/checkpoint.h"

#include <ATen/core/ivalue.h>

#include "core/autocast.h"

namespace wxtrain::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs besides tensors: the block itself and the state to replay it in.
struct ReplayState : torch::CustomClassHolder {
  BlockFn fn;
  size_t num_inputs = 0;
  std::vector<bool> input_requires_grad;
  AutocastState autocast;
  torch::Tensor cpu_rng_state;
  std::vector<std::pair<c10::Device, torch::Tensor>> cuda_rng_states;
};

torch::Tensor rng_state(const c10::Device& device) {
  auto gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(const c10::Device& device, const torch::Tensor& state) {
  auto gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// Autocast caches the low-precision copy of each fp32 weight for its scope. The checkpointed
// forward runs without grad mode, so a copy cached there has no history: a recompute (or any later
// use in the same autocast scope, e.g. a backward inside it) that picked it up would give the
// weight no gradient. Both the forward and the recompute therefore run with the cache off.
class AutocastCacheOff {
 public:
  AutocastCacheOff() : previous_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(previous_); }
  AutocastCacheOff(const AutocastCacheOff&) = delete;
  AutocastCacheOff& operator=(const AutocastCacheOff&) = delete;

 private:
  bool previous_;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<ReplayState> state,
                               torch::TensorList inputs, torch::TensorList params) {
    state->num_inputs = inputs.size();
    for (const auto& t : inputs) state->input_requires_grad.push_back(t.requires_grad());
    state->autocast = AutocastState::current();
    state->cpu_rng_state = rng_state(c10::Device(c10::DeviceType::CPU));
    for (const auto& t : inputs) {
      if (t.is_cuda() && state->cuda_rng_states.empty())
        state->cuda_rng_states.emplace_back(t.device(), rng_state(t.device()));
    }
    std::vector<torch::Tensor> saved(inputs.begin(), inputs.end());
    saved.insert(saved.end(), params.begin(), params.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    AutocastCacheOff no_cache;
    return state->fn(std::vector<torch::Tensor>(inputs.begin(), inputs.end()));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<ReplayState>(ctx->saved_data["state"].toCapsule());
    variable_list saved = ctx->get_saved_variables();
    const size_t n_in = state->num_inputs;

    std::vector<torch::Tensor> inputs;
    for (size_t i = 0; i < n_in; ++i) {
      torch::Tensor t = saved[i].detach();
      if (state->input_requires_grad[i]) t.requires_grad_(true);
      inputs.push_back(t);
    }

    // Replay the forward's random stream, then put the current one back.
    const torch::Tensor cpu_now = rng_state(c10::Device(c10::DeviceType::CPU));
    std::vector<std::pair<c10::Device, torch::Tensor>> cuda_now;
    for (const auto& [dev, s] : state->cuda_rng_states) cuda_now.emplace_back(dev, rng_state(dev));
    set_rng_state(c10::Device(c10::DeviceType::CPU), state->cpu_rng_state);
    for (const auto& [dev, s] : state->cuda_rng_states) set_rng_state(dev, s);

    std::vector<torch::Tensor> outputs;
    {
      torch::AutoGradMode grad_on(true);
      AutocastGuard autocast(state->autocast);
      AutocastCacheOff no_cache;
      outputs = state->fn(inputs);
    }
    set_rng_state(c10::Device(c10::DeviceType::CPU), cpu_now);
    for (const auto& [dev, s] : cuda_now) set_rng_state(dev, s);

    variable_list roots, root_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grad_outputs[i].defined()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grad_outputs[i]);
      }
    }
    // Differentiate with respect to the inputs that need it and the parameters themselves.
    variable_list targets;
    std::vector<size_t> target_slot;  // position in the result list
    for (size_t i = 0; i < n_in; ++i) {
      if (state->input_requires_grad[i]) {
        targets.push_back(inputs[i]);
        target_slot.push_back(1 + i);
      }
    }
    for (size_t j = n_in; j < saved.size(); ++j) {
      if (saved[j].requires_grad()) {
        targets.push_back(saved[j]);
        target_slot.push_back(1 + j);
      }
    }
    variable_list result(1 + saved.size());  // slot 0: the ReplayState argument
    if (roots.empty() || targets.empty()) return result;
    variable_list grads = torch::autograd::grad(roots, targets, root_grads, /*retain_graph=*/false,
                                                /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t k = 0; k < grads.size(); ++k) result[target_slot[k]] = grads[k];
    return result;
  }
};

}  // namespace

std::vector<torch::Tensor> checkpoint(const BlockFn& fn, const std::vector<torch::Tensor>& inputs,
                                      const std::vector<torch::Tensor>& params) {
  auto state = c10::make_intrusive<ReplayState>();
  state->fn = fn;
  return CheckpointFunction::apply(state, torch::TensorList(inputs), torch::TensorList(params));
}

}  // namespace wxtrain::ops
