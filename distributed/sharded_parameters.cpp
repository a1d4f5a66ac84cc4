#include "distributed/sharded_parameters.h"

#include <algorithm>
#include <unordered_map>

#include <torch/autograd.h>

#include "core/error.h"

namespace wxtrain::distributed {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The storage behind a unit's full buffer is dropped and re-allocated in place, so every view of
// it (the parameters, and what autograd saved of them in forward) sees the gathered values again.
void drop_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(c10::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void restore_storage(const torch::Tensor& t, size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

// The owner travels through autograd's saved data as an integer: the nodes live within one step,
// and the store outlives every step (the model holds it as its block runner).
ShardedParameters* owner_of(AutogradContext* ctx) {
  return reinterpret_cast<ShardedParameters*>(ctx->saved_data["owner"].toInt());
}

// Identity on a block's outputs; its backward, which runs before any of the block's backward,
// gathers the block.
class GatherBeforeBackward : public torch::autograd::Function<GatherBeforeBackward> {
 public:
  static variable_list forward(AutogradContext* ctx, int64_t owner, int64_t call, torch::TensorList xs) {
    ctx->saved_data["owner"] = owner;
    ctx->saved_data["call"] = call;
    return variable_list(xs.begin(), xs.end());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    owner_of(ctx)->gather_for_backward(ctx->saved_data["call"].toInt());
    variable_list out{torch::Tensor(), torch::Tensor()};
    out.insert(out.end(), grads.begin(), grads.end());
    return out;
  }
};

// Identity on a block's inputs; its backward, which runs after all of the block's, frees it.
class ReleaseAfterBackward : public torch::autograd::Function<ReleaseAfterBackward> {
 public:
  static variable_list forward(AutogradContext* ctx, int64_t owner, int64_t call, torch::TensorList xs) {
    ctx->saved_data["owner"] = owner;
    ctx->saved_data["call"] = call;
    return variable_list(xs.begin(), xs.end());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    owner_of(ctx)->release_after_backward(ctx->saved_data["call"].toInt());
    variable_list out{torch::Tensor(), torch::Tensor()};
    out.insert(out.end(), grads.begin(), grads.end());
    return out;
  }
};

// Applies F to the tensors of `tensors` that require grad, in place in the list.
template <typename F>
void wrap_requiring_grad(std::vector<torch::Tensor>& tensors, ShardedParameters* owner, int64_t call) {
  std::vector<size_t> where;
  variable_list picked;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].defined() && tensors[i].requires_grad()) {
      where.push_back(i);
      picked.push_back(tensors[i]);
    }
  }
  if (picked.empty()) return;
  // A TensorList, not a vector: autograd's Function takes each tensor of a list as an input.
  variable_list wrapped = F::apply(reinterpret_cast<int64_t>(owner), call, torch::TensorList(picked));
  for (size_t k = 0; k < where.size(); ++k) tensors[where[k]] = wrapped[k];
}

}  // namespace

ShardedParameters::ShardedParameters(std::shared_ptr<Communicator> comm, std::vector<ParamGroup> groups,
                                     const std::vector<std::vector<torch::Tensor>>& blocks)
    : comm_(std::move(comm)) {
  if (!comm_) throw Error("ShardedParameters needs a communicator");
  // Each parameter's block; one that two blocks share stays resident (a block's gather would not
  // cover the other's use of it).
  constexpr int kShared = -2;
  std::unordered_map<const void*, int> block_of;
  for (size_t b = 0; b < blocks.size(); ++b) {
    for (const torch::Tensor& p : blocks[b]) {
      auto [it, fresh] = block_of.emplace(p.unsafeGetTensorImpl(), static_cast<int>(b));
      if (!fresh && it->second != static_cast<int>(b)) it->second = kShared;
    }
  }
  // Units: the resident ones first (their buckets are reduced last, as their gradients, mostly of
  // embeddings run before any block, come last), then block by block, group by group.
  std::vector<ParamGroup> unit_specs;
  const int B = static_cast<int>(blocks.size());
  block_units_.assign(static_cast<size_t>(B), {});
  for (int slot = -1; slot < B; ++slot) {
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      ParamGroup& g = groups[gi];
      if (g.names.empty()) {
        for (size_t i = 0; i < g.params.size(); ++i) g.names.push_back("group" + std::to_string(gi) + ".param" + std::to_string(i));
      }
      if (g.names.size() != g.params.size()) {
        throw Error("parameter group " + std::to_string(gi) + " has " + std::to_string(g.params.size()) +
                    " parameters but " + std::to_string(g.names.size()) + " names");
      }
      ParamGroup unit;
      unit.lr_scale = g.lr_scale;
      unit.weight_decay = g.weight_decay;
      std::vector<int> members;
      for (size_t i = 0; i < g.params.size(); ++i) {
        auto it = g.params[i].defined() ? block_of.find(g.params[i].unsafeGetTensorImpl()) : block_of.end();
        const int block = it == block_of.end() || it->second == kShared ? -1 : it->second;
        if (block != slot) continue;
        unit.names.push_back(g.names[i]);
        unit.params.push_back(g.params[i]);
        members.push_back(static_cast<int>(i));
      }
      if (unit.params.empty()) continue;
      if (slot >= 0) block_units_[static_cast<size_t>(slot)].push_back(static_cast<int>(unit_specs.size()));
      unit_specs.push_back(std::move(unit));
      unit_group_.push_back(static_cast<int>(gi));
      unit_block_.push_back(slot);
      unit_members_.push_back(std::move(members));
    }
  }
  for (const ParamGroup& g : groups) {
    std::vector<int64_t> offsets;
    int64_t numel = 0;
    for (const torch::Tensor& p : g.params) {
      offsets.push_back(numel);
      numel += p.defined() ? p.numel() : 0;
    }
    group_offsets_.push_back(std::move(offsets));
    group_numel_.push_back(numel);
  }
  // FlatParameters checks the parameters (trainable leaves, one dtype and device per unit, none
  // twice) and lays each unit out over all ranks.
  store_ = std::make_unique<FlatParameters>(std::move(unit_specs), comm_->size(), comm_->rank());
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < units().size(); ++u) {
    FlatGroup& g = units()[u];
    // A resident unit stays whole, so its shard is a range of it (the all-gather after the update
    // is in place); a block's is a copy of its own, the one that persists.
    const torch::Tensor range = g.flat.narrow(0, g.layout.shard_begin, g.layout.shard_size);
    g.shard = unit_block_[u] < 0 ? range : range.clone();
    unit_bytes_.push_back(static_cast<int64_t>(g.flat.nbytes()));
  }
  status_.assign(units().size(), Status::kReady);
  work_.assign(units().size(), nullptr);
  next_after_.assign(static_cast<size_t>(B), -1);
  // The blocks start whole (the values the model was built or loaded with), until broadcast() or
  // the first forward frees them.
  for (int b = 0; b < B; ++b) {
    if (block_units_[static_cast<size_t>(b)].empty()) continue;
    gathered_.insert(b);
    for (int u : block_units_[static_cast<size_t>(b)]) gathered_bytes_now_ += unit_bytes_[static_cast<size_t>(u)];
  }
}

void ShardedParameters::broadcast() {
  torch::NoGradGuard no_grad;
  if (comm_->size() > 1) {
    gather_all();  // whatever was freed comes back from the shards first
    std::vector<WorkHandle> works;
    for (FlatGroup& u : units()) {
      if (u.layout.padded > 0) works.push_back(comm_->broadcast_async(u.flat, 0));
    }
    for (WorkHandle& w : works) w->wait();
  }
  for (size_t u = 0; u < units().size(); ++u) {
    FlatGroup& g = units()[u];
    if (unit_block_[u] >= 0) g.shard.copy_(g.flat.narrow(0, g.layout.shard_begin, g.layout.shard_size));
  }
  release_all();
}

void ShardedParameters::start_forward() {
  last_block_ = -1;
  call_block_.clear();
  call_previous_.clear();
}

void ShardedParameters::end_backward() {
  start_forward();
  if (!pinned_) release_blocks();
}

void ShardedParameters::release_blocks() {
  const std::set<int> blocks = gathered_;
  for (int b : blocks) release(b);
}

void ShardedParameters::after_update() {
  std::vector<WorkHandle> works;
  for (size_t u = 0; u < units().size(); ++u) {
    FlatGroup& g = units()[u];
    if (unit_block_[u] < 0 && g.layout.padded > 0) works.push_back(comm_->allgather_async(g.shard, g.flat, {}));
  }
  for (WorkHandle& w : works) w->wait();
}

void ShardedParameters::gather_all() {
  for (size_t b = 0; b < block_units_.size(); ++b) gather(static_cast<int>(b));
  for (size_t b = 0; b < block_units_.size(); ++b) wait(static_cast<int>(b));
  pinned_ = true;
}

void ShardedParameters::release_all() {
  pinned_ = false;
  release_blocks();
}

void ShardedParameters::gather(int block) {
  bool any = false;
  for (int u : block_units_[static_cast<size_t>(block)]) {
    const size_t i = static_cast<size_t>(u);
    if (status_[i] != Status::kFree) continue;
    FlatGroup& g = units()[i];
    restore_storage(g.flat, static_cast<size_t>(unit_bytes_[i]));
    work_[i] = comm_->allgather_async(g.shard, g.flat, {});
    status_[i] = Status::kInFlight;
    gathered_bytes_now_ += unit_bytes_[i];
    ++stats_.gathers;
    stats_.gathered_bytes += unit_bytes_[i];
    any = true;
  }
  if (any) {
    gathered_.insert(block);
    stats_.peak_gathered_bytes = std::max(stats_.peak_gathered_bytes, gathered_bytes_now_);
  }
}

void ShardedParameters::wait(int block) {
  for (int u : block_units_[static_cast<size_t>(block)]) {
    const size_t i = static_cast<size_t>(u);
    if (status_[i] != Status::kInFlight) continue;
    work_[i]->wait();
    work_[i].reset();
    status_[i] = Status::kReady;
  }
}

void ShardedParameters::release(int block) {
  wait(block);  // a gather in flight writes into the buffer
  for (int u : block_units_[static_cast<size_t>(block)]) {
    const size_t i = static_cast<size_t>(u);
    if (status_[i] != Status::kReady) continue;
    drop_storage(units()[i].flat);
    status_[i] = Status::kFree;
    gathered_bytes_now_ -= unit_bytes_[i];
  }
  gathered_.erase(block);
}

void ShardedParameters::keep_only(int a, int b) {
  const std::set<int> blocks = gathered_;
  for (int k : blocks) {
    if (k != a && k != b) release(k);
  }
}

std::vector<torch::Tensor> ShardedParameters::run_block(size_t block, const Fn& run,
                                                        const std::vector<torch::Tensor>& inputs) {
  const int b = static_cast<int>(block);
  if (block >= block_units_.size() || block_units_[block].empty() || pinned_) return run(inputs);
  const int previous = last_block_;
  if (previous >= 0 && previous != b) next_after_[static_cast<size_t>(previous)] = b;
  last_block_ = b;
  const int next = next_after_[block];
  keep_only(b, next);
  gather(b);
  wait(b);
  if (next >= 0 && next != b) gather(next);  // prefetch: overlaps this block's forward

  if (!torch::GradMode::is_enabled()) return run(inputs);
  const int64_t call = static_cast<int64_t>(call_block_.size());
  call_block_.push_back(b);
  call_previous_.push_back(previous);
  std::vector<torch::Tensor> in = inputs;
  wrap_requiring_grad<ReleaseAfterBackward>(in, this, call);
  std::vector<torch::Tensor> out = run(in);
  wrap_requiring_grad<GatherBeforeBackward>(out, this, call);
  return out;
}

void ShardedParameters::gather_for_backward(int64_t call) {
  if (pinned_) return;
  const int b = call_block_.at(static_cast<size_t>(call));
  const int previous = call_previous_.at(static_cast<size_t>(call));  // the block whose backward comes next
  keep_only(b, previous);
  gather(b);
  wait(b);
  if (previous >= 0 && previous != b) gather(previous);
}

void ShardedParameters::release_after_backward(int64_t call) {
  if (pinned_) return;
  const int b = call_block_.at(static_cast<size_t>(call));
  if (call_previous_.at(static_cast<size_t>(call)) == b) return;  // needed again right away
  release(b);
}

std::map<std::string, torch::Tensor> ShardedParameters::to_group_state(
    const std::map<std::string, torch::Tensor>& unit_state) const {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> out;
  const std::vector<FlatGroup>& us = store_->groups();
  for (const auto& [key, value] : unit_state) {
    size_t u = 0, dot = key.find('.');
    if (key.rfind("group", 0) != 0 || dot == std::string::npos ||
        (u = static_cast<size_t>(std::stoll(key.substr(5, dot - 5)))) >= us.size()) {
      out[key] = value;
      continue;
    }
    const size_t gi = static_cast<size_t>(unit_group_[u]);
    const std::string group_key = "group" + std::to_string(gi) + key.substr(dot);
    torch::Tensor& full = out[group_key];
    if (!full.defined()) full = torch::zeros({group_numel_[gi]}, value.options());
    const torch::Tensor flat = value.reshape(-1);
    for (size_t j = 0; j < unit_members_[u].size(); ++j) {
      const int i = unit_members_[u][j];
      full.narrow(0, group_offsets_[gi][static_cast<size_t>(i)], us[u].numels[j])
          .copy_(flat.narrow(0, us[u].offsets[j], us[u].numels[j]));
    }
  }
  return out;
}

std::map<std::string, torch::Tensor> ShardedParameters::to_unit_state(
    const std::map<std::string, torch::Tensor>& group_state) const {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> out;
  const std::vector<FlatGroup>& us = store_->groups();
  for (const auto& [key, value] : group_state) {
    size_t gi = 0, dot = key.find('.');
    if (key.rfind("group", 0) != 0 || dot == std::string::npos ||
        (gi = static_cast<size_t>(std::stoll(key.substr(5, dot - 5)))) >= group_numel_.size()) {
      out[key] = value;  // "step", and groups this run lacks (the optimizer names what it misses)
      continue;
    }
    if (value.numel() != group_numel_[gi]) {
      throw Error("optimizer state '" + key + "' has " + std::to_string(value.numel()) +
                  " elements; this run's group has " + std::to_string(group_numel_[gi]) +
                  " parameter elements (were the parameter groups or the model changed?)");
    }
    const torch::Tensor flat = value.reshape(-1);
    for (size_t u = 0; u < us.size(); ++u) {
      if (static_cast<size_t>(unit_group_[u]) != gi) continue;
      std::vector<torch::Tensor> pieces;
      for (size_t j = 0; j < unit_members_[u].size(); ++j) {
        pieces.push_back(flat.narrow(0, group_offsets_[gi][static_cast<size_t>(unit_members_[u][j])], us[u].numels[j]));
      }
      out["group" + std::to_string(u) + key.substr(dot)] = torch::cat(pieces);
    }
  }
  return out;
}

int64_t ShardedParameters::largest_block_bytes() const {
  int64_t largest = 0;
  for (const std::vector<int>& units : block_units_) {
    int64_t bytes = 0;
    for (int u : units) bytes += unit_bytes_[static_cast<size_t>(u)];
    largest = std::max(largest, bytes);
  }
  return largest;
}

int64_t ShardedParameters::persistent_bytes() const {
  int64_t bytes = 0;
  const std::vector<FlatGroup>& us = store_->groups();
  for (size_t u = 0; u < us.size(); ++u) {
    bytes += static_cast<int64_t>(us[u].shard.nbytes());
    if (unit_block_[u] < 0) bytes += unit_bytes_[u];
  }
  return bytes;
}

}  // namespace wxtrain::distributed
