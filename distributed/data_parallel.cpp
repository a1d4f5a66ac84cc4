#include "distributed/data_parallel.h"

#include <algorithm>

#include <chrono>
#include <cmath>
#include <set>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "core/error.h"

namespace wxtrain::distributed {

// Fires after a parameter's gradient accumulator has added this backward's gradient to .grad.
class DataParallel::ReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(DataParallel* owner, int slot) : owner_(owner), slot_(slot) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    owner_->on_gradient_ready(slot_);
    return outputs;
  }

 private:
  DataParallel* owner_;
  int slot_;
};

DataParallel::DataParallel(std::shared_ptr<Communicator> comm, std::vector<ParamGroup> groups, OptimizerOptions opt,
                           int zero_stage, double bucket_mb)
    : comm_(std::move(comm)), options_(std::move(opt)), kind_(parse_optimizer_kind(options_.kind)) {
  if (!comm_) throw Error("DataParallel needs a communicator (make_communicator)");
  if (zero_stage < 0 || zero_stage > 2) {
    throw ConfigError("distributed.zero_stage = " + std::to_string(zero_stage) +
                      ": expected 0, 1 or 2 (stage 3 is for `wxtrain estimate` only)");
  }
  if (!(bucket_mb > 0)) throw ConfigError("distributed.bucket_mb = " + std::to_string(bucket_mb) + ": must be > 0");
  state_names_ = optimizer_state_names(kind_, options_);
  world_ = comm_->size();
  rank_ = comm_->rank();
  stage_ = world_ > 1 ? zero_stage : 0;

  torch::NoGradGuard no_grad;
  std::set<const void*> seen;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    FlatGroup g;
    g.spec = std::move(groups[gi]);
    auto& params = g.spec.params;
    auto& names = g.spec.names;
    if (names.empty()) {
      for (size_t i = 0; i < params.size(); ++i) names.push_back("group" + std::to_string(gi) + ".param" + std::to_string(i));
    }
    if (names.size() != params.size()) {
      throw Error("parameter group " + std::to_string(gi) + " has " + std::to_string(params.size()) +
                  " parameters but " + std::to_string(names.size()) + " names");
    }
    torch::TensorOptions options = torch::TensorOptions().dtype(torch::kFloat);
    for (size_t i = 0; i < params.size(); ++i) {
      const torch::Tensor& p = params[i];
      const std::string where = "parameter '" + names[i] + "' (group " + std::to_string(gi) + ")";
      if (!p.defined()) throw Error(where + " is undefined");
      if (!p.requires_grad() || !p.is_leaf()) {
        throw Error(where + " is not a trainable leaf tensor; frozen parameters belong in no group");
      }
      if (!seen.insert(p.unsafeGetTensorImpl()).second) throw Error(where + " appears twice");
      if (i == 0) {
        options = p.options();
      } else if (p.scalar_type() != params[0].scalar_type() || p.device() != params[0].device()) {
        throw Error(where + " is " + std::string(c10::toString(p.scalar_type())) + " on " + p.device().str() +
                    "; the group's first parameter is " + c10::toString(params[0].scalar_type()) + " on " +
                    params[0].device().str() + " (one dtype and device per group)");
      }
      g.offsets.push_back(g.numel);
      g.numel += p.numel();
    }
    g.padded = sharded() ? (g.numel + world_ - 1) / world_ * world_ : g.numel;
    g.shard_size = sharded() ? g.padded / world_ : g.padded;
    g.shard_begin = sharded() ? rank_ * g.shard_size : 0;
    g.params = torch::zeros({g.padded}, options);
    for (size_t i = 0; i < params.size(); ++i) {
      torch::Tensor view = g.params.narrow(0, g.offsets[i], params[i].numel()).view(params[i].sizes());
      view.copy_(params[i]);
      params[i].set_data(view);
    }
    g.grads = torch::zeros({stage_ == 2 ? g.shard_size : g.padded}, options);
    if (options.dtype() != torch::kFloat) g.master = owned_params(g).to(torch::kFloat);
    for (size_t s = 0; s < state_names_.size(); ++s) {
      g.state.push_back(torch::zeros({g.shard_size}, options.dtype(torch::kFloat)));
    }
    groups_.push_back(std::move(g));
  }
  zero_grad();
  if (world_ > 1) {
    build_buckets(bucket_mb);
    register_hooks();
  }
}

DataParallel::~DataParallel() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

torch::Tensor DataParallel::owned_params(FlatGroup& g) const { return g.params.narrow(0, g.shard_begin, g.shard_size); }

torch::Tensor DataParallel::owned_grads(FlatGroup& g) const {
  return stage_ == 2 ? g.grads : g.grads.narrow(0, g.shard_begin, g.shard_size);
}

torch::Tensor DataParallel::grad_view(FlatGroup& g, int index) const {
  const torch::Tensor& p = g.spec.params[index];
  return g.grads.narrow(0, g.offsets[index], p.numel()).view(p.sizes());
}

// Stages 0/1: makes the parameter's .grad the view of the flat gradient buffer again, keeping its
// value, in case something replaced it (a Module::zero_grad(true), an optimizer from elsewhere).
static void adopt_gradient(torch::Tensor& param, const torch::Tensor& view) {
  torch::Tensor& grad = param.mutable_grad();
  if (grad.defined() && grad.data_ptr() == view.data_ptr()) return;
  torch::NoGradGuard no_grad;
  if (grad.defined()) {
    view.copy_(grad);
  } else {
    view.zero_();
  }
  grad = view;
}

void DataParallel::build_buckets(double bucket_mb) {
  const double bucket_bytes = bucket_mb * 1024.0 * 1024.0;
  for (int gi = static_cast<int>(groups_.size()) - 1; gi >= 0; --gi) {
    FlatGroup& g = groups_[gi];
    const double element_bytes = static_cast<double>(g.params.element_size());
    bool open = false;
    for (int i = static_cast<int>(g.spec.params.size()) - 1; i >= 0; --i) {
      const int64_t begin = g.offsets[i];
      const int64_t end = begin + g.spec.params[i].numel();
      if (!open) {
        buckets_.push_back(Bucket{});
        buckets_.back().group = gi;
        buckets_.back().end = end;
        open = true;
      }
      Bucket& b = buckets_.back();
      b.begin = begin;
      b.params.push_back(i);
      slots_.push_back(Slot{gi, i, static_cast<int>(buckets_.size()) - 1});
      if (static_cast<double>(b.end - b.begin) * element_bytes >= bucket_bytes) open = false;
    }
  }
  slot_seen_.assign(slots_.size(), false);
}

void DataParallel::register_hooks() {
  for (size_t s = 0; s < slots_.size(); ++s) {
    torch::Tensor& p = groups_[slots_[s].group].spec.params[slots_[s].index];
    std::shared_ptr<torch::autograd::Node> accumulator = torch::autograd::impl::grad_accumulator(p);
    hook_keys_.push_back(accumulator->add_post_hook(std::make_unique<ReadyHook>(this, static_cast<int>(s))));
    accumulators_.push_back(std::move(accumulator));  // the parameter only holds it weakly
  }
}

void DataParallel::on_gradient_ready(int slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;
  const Slot& s = slots_[slot];
  FlatGroup& g = groups_[s.group];
  if (slot_seen_[slot]) {
    // A second accumulation (a parameter shared by two checkpointed blocks) is harmless until its
    // bucket has been sent; after that the sent sum would miss it.
    if (!buckets_[s.bucket].issued) return;
    throw Error("parameter '" + g.spec.names[s.index] +
                "' received another gradient after its bucket was all-reduced; run backward once per "
                "prepare_backward(true), and do not share parameters between checkpointed blocks");
  }
  slot_seen_[slot] = true;
  if (stage_ < 2) adopt_gradient(g.spec.params[s.index], grad_view(g, s.index));
  if (--buckets_[s.bucket].pending == 0) issue_ready_buckets();
}

void DataParallel::issue_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) issue(buckets_[next_bucket_++]);
}

void DataParallel::issue(Bucket& b) {
  torch::NoGradGuard no_grad;
  FlatGroup& g = groups_[b.group];
  b.issued = true;
  if (stage_ < 2) {
    b.work = comm_->allreduce_async(g.grads.narrow(0, b.begin, b.end - b.begin));
    return;
  }
  // ZeRO-2: pack the bucket, release the parameters' gradients, and send each owner its piece.
  b.staging = torch::empty({b.end - b.begin}, g.params.options());
  for (int i : b.params) {
    torch::Tensor& grad = g.spec.params[i].mutable_grad();
    torch::Tensor piece = b.staging.narrow(0, g.offsets[i] - b.begin, g.spec.params[i].numel());
    if (grad.defined()) {
      piece.copy_(grad.reshape(-1));
      grad = torch::Tensor();
    } else {
      piece.zero_();
    }
  }
  std::vector<int64_t> counts(world_);
  for (int r = 0; r < world_; ++r) {
    const int64_t lo = std::max(b.begin, r * g.shard_size);
    const int64_t hi = std::min(b.end, (r + 1) * g.shard_size);
    counts[r] = std::max<int64_t>(0, hi - lo);
  }
  const int64_t out_begin = counts[rank_] > 0 ? std::max(b.begin, g.shard_begin) - g.shard_begin : 0;
  b.work = comm_->reduce_scatter_async(b.staging, g.grads.narrow(0, out_begin, counts[rank_]), counts);
}

void DataParallel::zero_grad() {
  torch::NoGradGuard no_grad;
  for (FlatGroup& g : groups_) {
    g.grads.zero_();
    for (size_t i = 0; i < g.spec.params.size(); ++i) {
      if (stage_ < 2) {
        adopt_gradient(g.spec.params[i], grad_view(g, static_cast<int>(i)));
      } else {
        g.spec.params[i].mutable_grad() = torch::Tensor();
      }
    }
  }
}

void DataParallel::prepare_backward(bool sync) {
  if (world_ == 1) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (armed_) throw Error("prepare_backward() called again before finish_backward() of a synchronised backward");
  armed_ = sync;
  if (!sync) return;
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int>(b.params.size());
    b.issued = false;
  }
  slot_seen_.assign(slots_.size(), false);
  next_bucket_ = 0;
}

bool DataParallel::finish_backward(double grad_multiplier) {
  torch::NoGradGuard no_grad;
  if (world_ == 1) {
    for (FlatGroup& g : groups_) {
      for (size_t i = 0; i < g.spec.params.size(); ++i) adopt_gradient(g.spec.params[i], grad_view(g, static_cast<int>(i)));
    }
  } else {
    const auto wait_start = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!armed_) next_bucket_ = 0;  // no hooks counted: everything goes now
      int64_t during_backward = 0;
      for (size_t b = 0; b < buckets_.size(); ++b) {
        if (b < next_bucket_) {
          ++during_backward;
          continue;
        }
        buckets_[b].pending = 0;
        if (stage_ < 2) {
          FlatGroup& g = groups_[buckets_[b].group];
          for (int i : buckets_[b].params) adopt_gradient(g.spec.params[i], grad_view(g, i));
        }
      }
      issue_ready_buckets();
      armed_ = false;
      last_backward_ = BackwardStats{static_cast<int64_t>(buckets_.size()), during_backward};
    }
    for (Bucket& b : buckets_) {
      b.work->wait();
      b.work.reset();
      b.staging = torch::Tensor();
    }
    last_backward_.wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  }
  const double scale = grad_multiplier / world_;
  std::vector<torch::Tensor> owned;
  for (FlatGroup& g : groups_) {
    torch::Tensor grads = owned_grads(g);
    if (grads.numel() > 0) owned.push_back(grads);
  }
  bool finite = true;
  if (!owned.empty()) {
    // PyTorch's fused unscale-and-check (as GradScaler uses it), on CUDA and, since LibTorch 2.3,
    // on the CPU: one pass over the gradients and one sync instead of a scale and a sum per group.
    torch::Tensor found_inf = torch::zeros({1}, owned.front().options().dtype(torch::kFloat32));
    torch::Tensor inv_scale = torch::full({1}, scale, found_inf.options());
    at::_amp_foreach_non_finite_check_and_unscale_(owned, found_inf, inv_scale);
    finite = found_inf.item<float>() == 0.0f;
  }
  return world_ > 1 ? !comm_->any(!finite) : finite;
}

double DataParallel::clip_grad_norm(double max_norm) {
  torch::NoGradGuard no_grad;
  double squares = 0;
  for (FlatGroup& g : groups_) {
    torch::Tensor grads = owned_grads(g);
    if (grads.numel() == 0) continue;
    const double norm = at::linalg_vector_norm(grads, 2, std::nullopt, false, torch::kFloat).item<double>();
    squares += norm * norm;
  }
  if (sharded()) squares = comm_->sum(squares);
  const double norm = std::sqrt(squares);
  if (max_norm > 0 && std::isfinite(norm)) {
    const double coefficient = max_norm / (norm + 1e-6);
    if (coefficient < 1) {
      for (FlatGroup& g : groups_) owned_grads(g).mul_(coefficient);
    }
  }
  return norm;
}

void DataParallel::step(double lr) {
  torch::NoGradGuard no_grad;
  ++step_;
  for (FlatGroup& g : groups_) {
    if (g.shard_size == 0) continue;
    torch::Tensor params = g.master.defined() ? g.master : owned_params(g);
    torch::Tensor grads = owned_grads(g);
    if (grads.scalar_type() != torch::kFloat) grads = grads.to(torch::kFloat);
    flat_update(kind_, options_, step_, lr * g.spec.lr_scale, g.spec.weight_decay, params, grads, g.state);
    if (g.master.defined()) owned_params(g).copy_(g.master);
  }
  if (sharded()) {
    std::vector<WorkHandle> works;
    for (FlatGroup& g : groups_) {
      if (g.padded > 0) works.push_back(comm_->allgather_async(owned_params(g), g.params, {}));
    }
    for (WorkHandle& w : works) w->wait();
  }
}

void DataParallel::broadcast_parameters() {
  if (world_ > 1) {
    std::vector<WorkHandle> works;
    for (FlatGroup& g : groups_) {
      if (g.padded > 0) works.push_back(comm_->broadcast_async(g.params, 0));
    }
    for (WorkHandle& w : works) w->wait();
  }
  sync_master_weights();
}

void DataParallel::sync_master_weights() {
  torch::NoGradGuard no_grad;
  for (FlatGroup& g : groups_) {
    if (g.master.defined()) g.master.copy_(owned_params(g));
  }
}

torch::Tensor DataParallel::gather_state(FlatGroup& g, const torch::Tensor& shard) {
  torch::Tensor full = shard;
  if (sharded() && g.padded > 0) {
    full = torch::empty({g.padded}, shard.options());
    comm_->allgather(shard, full);
  }
  return full.narrow(0, 0, g.numel).to(torch::kCPU).clone();
}

std::map<std::string, torch::Tensor> DataParallel::optimizer_state() {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> state;
  state["step"] = torch::scalar_tensor(step_, torch::kLong);
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    FlatGroup& g = groups_[gi];
    const std::string prefix = "group" + std::to_string(gi) + ".";
    for (size_t s = 0; s < state_names_.size(); ++s) state[prefix + state_names_[s]] = gather_state(g, g.state[s]);
    if (g.master.defined()) state[prefix + "master_weights"] = gather_state(g, g.master);
  }
  return state;
}

void DataParallel::load_optimizer_state(const std::map<std::string, torch::Tensor>& state) {
  torch::NoGradGuard no_grad;
  auto step = state.find("step");
  if (step == state.end()) throw Error("optimizer state has no 'step'");
  // Copies this rank's shard of a full-size tensor, zero in the padding.
  auto load_shard = [](FlatGroup& g, const std::string& key, const torch::Tensor& full, torch::Tensor& shard) {
    if (full.numel() != g.numel) {
      throw Error("optimizer state '" + key + "' has " + std::to_string(full.numel()) + " elements; this run's group has " +
                  std::to_string(g.numel) + " parameter elements (were the parameter groups or the model changed?)");
    }
    const int64_t length = std::max<int64_t>(0, std::min(g.shard_size, g.numel - g.shard_begin));
    shard.zero_();
    if (length > 0) {
      shard.narrow(0, 0, length).copy_(full.reshape(-1).narrow(0, g.shard_begin, length).to(shard.options()));
    }
  };
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    FlatGroup& g = groups_[gi];
    const std::string prefix = "group" + std::to_string(gi) + ".";
    for (size_t s = 0; s < state_names_.size(); ++s) {
      const std::string key = prefix + state_names_[s];
      auto it = state.find(key);
      if (it == state.end()) {
        throw Error("optimizer state has no '" + key + "' (the " + options_.kind + " optimizer of this run keeps " +
                    state_names_[0] + (state_names_.size() > 1 ? " and " + state_names_[1] : std::string()) + ")");
      }
      load_shard(g, key, it->second, g.state[s]);
    }
    if (g.master.defined()) {
      auto it = state.find(prefix + "master_weights");
      if (it != state.end()) {
        load_shard(g, prefix + "master_weights", it->second, g.master);
      } else {
        g.master.copy_(owned_params(g));
      }
    }
  }
  step_ = step->second.item<int64_t>();
}

int64_t DataParallel::optimizer_state_bytes() const {
  int64_t bytes = 0;
  for (const FlatGroup& g : groups_) {
    for (const torch::Tensor& s : g.state) bytes += static_cast<int64_t>(s.nbytes());
    if (g.master.defined()) bytes += static_cast<int64_t>(g.master.nbytes());
  }
  return bytes;
}

int64_t DataParallel::gradient_bytes() const {
  int64_t bytes = 0;
  for (const FlatGroup& g : groups_) bytes += static_cast<int64_t>(g.grads.nbytes());
  return bytes;
}

}  // namespace wxtrain::distributed
