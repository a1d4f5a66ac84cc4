#include "distributed/sharded_optimizer.h"


#include "core/error.h"

namespace wxtrain::distributed {

ShardedOptimizer::ShardedOptimizer(std::shared_ptr<Communicator> comm, std::vector<FlatGroup>& groups,
                                   OptimizerOptions options)
    : comm_(std::move(comm)),
      groups_(groups),
      options_(std::move(options)),
      kind_(parse_optimizer_kind(options_.kind)),
      state_names_(optimizer_state_names(kind_, options_)) {
  torch::NoGradGuard no_grad;
  for (const FlatGroup& g : groups_) {
    ShardState s;
    if (g.flat.scalar_type() != torch::kFloat) s.master = g.owned().to(torch::kFloat);
    for (size_t i = 0; i < state_names_.size(); ++i) {
      s.state.push_back(torch::zeros({g.layout.shard_size}, g.flat.options().dtype(torch::kFloat)));
    }
    shards_.push_back(std::move(s));
  }
}

void ShardedOptimizer::step(double lr, const std::vector<torch::Tensor>& owned_gradients) {
  torch::NoGradGuard no_grad;
  ++step_;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const FlatGroup& g = groups_[gi];
    ShardState& s = shards_[gi];
    if (g.layout.shard_size == 0) continue;
    torch::Tensor params = s.master.defined() ? s.master : g.owned();
    torch::Tensor grads = owned_gradients[gi];
    if (grads.scalar_type() != torch::kFloat) grads = grads.to(torch::kFloat);
    flat_update(kind_, options_, step_, lr * g.spec.lr_scale, g.spec.weight_decay, params, grads, s.state);
    if (s.master.defined()) g.owned().copy_(s.master);
  }
}

void ShardedOptimizer::sync_master_weights() {
  torch::NoGradGuard no_grad;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    if (shards_[gi].master.defined()) shards_[gi].master.copy_(groups_[gi].owned());
  }
}

torch::Tensor ShardedOptimizer::gather_state(const FlatGroup& g, const torch::Tensor& shard) {
  torch::Tensor full = shard;
  if (g.layout.sharded() && g.layout.padded > 0) {
    full = torch::empty({g.layout.padded}, shard.options());
    comm_->allgather(shard, full);
  }
  return full.narrow(0, 0, g.layout.numel).to(torch::kCPU).clone();
}

std::map<std::string, torch::Tensor> ShardedOptimizer::consolidated_state() {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> state;
  state["step"] = torch::scalar_tensor(step_, torch::kLong);
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ShardState& s = shards_[gi];
    const std::string prefix = "group" + std::to_string(gi) + ".";
    for (size_t i = 0; i < state_names_.size(); ++i) state[prefix + state_names_[i]] = gather_state(groups_[gi], s.state[i]);
    if (s.master.defined()) state[prefix + "master_weights"] = gather_state(groups_[gi], s.master);
  }
  return state;
}

void ShardedOptimizer::load_state(const std::map<std::string, torch::Tensor>& state) {
  torch::NoGradGuard no_grad;
  auto step = state.find("step");
  if (step == state.end()) throw Error("optimizer state has no 'step'");
  // Copies this rank's shard of a full-size tensor, zero in the padding.
  auto load_shard = [](const FlatGroup& g, const std::string& key, const torch::Tensor& full, torch::Tensor& shard) {
    if (full.numel() != g.layout.numel) {
      throw Error("optimizer state '" + key + "' has " + std::to_string(full.numel()) + " elements; this run's group has " +
                  std::to_string(g.layout.numel) +
                  " parameter elements (were the parameter groups or the model changed?)");
    }
    const int64_t length = g.layout.owned_numel();
    shard.zero_();
    if (length > 0) {
      shard.narrow(0, 0, length).copy_(full.reshape(-1).narrow(0, g.layout.shard_begin, length).to(shard.options()));
    }
  };
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const FlatGroup& g = groups_[gi];
    ShardState& s = shards_[gi];
    const std::string prefix = "group" + std::to_string(gi) + ".";
    for (size_t i = 0; i < state_names_.size(); ++i) {
      const std::string key = prefix + state_names_[i];
      auto it = state.find(key);
      if (it == state.end()) {
        throw Error("optimizer state has no '" + key + "' (the " + options_.kind + " optimizer of this run keeps " +
                    state_names_[0] + (state_names_.size() > 1 ? " and " + state_names_[1] : std::string()) + ")");
      }
      load_shard(g, key, it->second, s.state[i]);
    }
    if (s.master.defined()) {
      auto it = state.find(prefix + "master_weights");
      if (it != state.end()) {
        load_shard(g, prefix + "master_weights", it->second, s.master);
      } else {
        s.master.copy_(g.owned());
      }
    }
  }
  step_ = step->second.item<int64_t>();
}

int64_t ShardedOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const ShardState& s : shards_) {
    for (const torch::Tensor& t : s.state) bytes += static_cast<int64_t>(t.nbytes());
    if (s.master.defined()) bytes += static_cast<int64_t>(s.master.nbytes());
  }
  return bytes;
}

}  // namespace wxtrain::distributed
