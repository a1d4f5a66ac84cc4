#include "distributed/gradient_reducer.h"

#include <chrono>
#include <cmath>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "core/error.h"

namespace wxtrain::distributed {

// Fires after a parameter's gradient accumulator has added this backward's gradient to .grad.
class GradientReducer::ReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(GradientReducer* owner, int slot) : owner_(owner), slot_(slot) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    owner_->on_gradient_ready(slot_);
    return outputs;
  }

 private:
  GradientReducer* owner_;
  int slot_;
};

GradientReducer::GradientReducer(std::shared_ptr<Communicator> comm, std::vector<FlatGroup>& groups, Mode mode,
                                 double bucket_mb)
    : comm_(std::move(comm)), groups_(groups), mode_(mode), sharded_(!groups.empty() && groups[0].layout.sharded()) {
  for (const FlatGroup& g : groups_) {
    grads_.push_back(torch::zeros({scatters() ? g.layout.shard_size : g.layout.padded}, g.flat.options()));
  }
  zero_grad();
  if (comm_->size() > 1) {
    build_buckets(bucket_mb);
    register_hooks();
  }
}

GradientReducer::~GradientReducer() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

torch::Tensor GradientReducer::owned_gradient(int group) {
  const ShardLayout& l = groups_[group].layout;
  return scatters() ? grads_[group] : grads_[group].narrow(0, l.shard_begin, l.shard_size);
}

std::vector<torch::Tensor> GradientReducer::owned_gradients() {
  std::vector<torch::Tensor> owned;
  for (size_t gi = 0; gi < groups_.size(); ++gi) owned.push_back(owned_gradient(static_cast<int>(gi)));
  return owned;
}

torch::Tensor GradientReducer::grad_view(int group, int index) const {
  const FlatGroup& g = groups_[group];
  return grads_[group].narrow(0, g.offsets[index], g.numels[index]).view(g.shapes[index]);
}

// All-reduce mode: makes the parameter's .grad the view of the flat gradient buffer again, keeping
// its value, in case something replaced it (a Module::zero_grad(true), an optimizer from elsewhere).
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

void GradientReducer::build_buckets(double bucket_mb) {
  const double bucket_bytes = bucket_mb * 1024.0 * 1024.0;
  for (int gi = static_cast<int>(groups_.size()) - 1; gi >= 0; --gi) {
    const FlatGroup& g = groups_[gi];
    const double element_bytes = static_cast<double>(g.flat.element_size());
    bool open = false;
    for (int i = static_cast<int>(g.spec.params.size()) - 1; i >= 0; --i) {
      const int64_t begin = g.offsets[i];
      const int64_t end = begin + g.numels[i];
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

void GradientReducer::register_hooks() {
  for (size_t s = 0; s < slots_.size(); ++s) {
    torch::Tensor& p = groups_[slots_[s].group].spec.params[slots_[s].index];
    std::shared_ptr<torch::autograd::Node> accumulator = torch::autograd::impl::grad_accumulator(p);
    hook_keys_.push_back(accumulator->add_post_hook(std::make_unique<ReadyHook>(this, static_cast<int>(s))));
    accumulators_.push_back(std::move(accumulator));  // the parameter only holds it weakly
  }
}

void GradientReducer::on_gradient_ready(int slot) {
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
  if (!scatters()) adopt_gradient(g.spec.params[s.index], grad_view(s.group, s.index));
  if (--buckets_[s.bucket].pending == 0) issue_ready_buckets();
}

void GradientReducer::issue_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) issue(buckets_[next_bucket_++]);
  // Reduce-scatter: a bucket's packed copy is garbage once its collective is done. Releasing it
  // then, rather than in finish_backward(), keeps backward from holding a full-size gradient's
  // worth of staging at its end (what ZeRO-2/3 set out to avoid); wait() still comes in
  // finish_backward(), which rethrows a collective's error.
  if (!scatters()) return;
  for (size_t b = 0; b < next_bucket_; ++b) {
    Bucket& bucket = buckets_[b];
    if (bucket.staging.defined() && bucket.work && bucket.work->completed()) bucket.staging = torch::Tensor();
  }
}

void GradientReducer::issue(Bucket& b) {
  torch::NoGradGuard no_grad;
  FlatGroup& g = groups_[b.group];
  b.issued = true;
  if (!scatters()) {
    b.work = comm_->allreduce_async(grads_[b.group].narrow(0, b.begin, b.end - b.begin));
    return;
  }
  // Pack the bucket, release the parameters' gradients, and send each owner its piece.
  b.staging = torch::empty({b.end - b.begin}, g.flat.options());
  for (int i : b.params) {
    torch::Tensor& grad = g.spec.params[i].mutable_grad();
    torch::Tensor piece = b.staging.narrow(0, g.offsets[i] - b.begin, g.numels[i]);
    if (grad.defined()) {
      piece.copy_(grad.reshape(-1));
      grad = torch::Tensor();
    } else {
      piece.zero_();
    }
  }
  std::vector<int64_t> counts = g.layout.counts_in(b.begin, b.end);
  const torch::Tensor mine =
      grads_[b.group].narrow(0, g.layout.shard_offset_of(b.begin, b.end), counts[static_cast<size_t>(comm_->rank())]);
  b.work = comm_->reduce_scatter_async(b.staging, mine, std::move(counts));
}

void GradientReducer::zero_grad() {
  torch::NoGradGuard no_grad;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    grads_[gi].zero_();
    std::vector<torch::Tensor>& params = groups_[gi].spec.params;
    for (size_t i = 0; i < params.size(); ++i) {
      if (scatters()) {
        params[i].mutable_grad() = torch::Tensor();
      } else {
        adopt_gradient(params[i], grad_view(static_cast<int>(gi), static_cast<int>(i)));
      }
    }
  }
}

void GradientReducer::prepare_backward(bool sync) {
  if (comm_->size() == 1) return;
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

bool GradientReducer::finish_backward(double grad_multiplier) {
  torch::NoGradGuard no_grad;
  const int world = comm_->size();
  if (world == 1) {
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      std::vector<torch::Tensor>& params = groups_[gi].spec.params;
      for (size_t i = 0; i < params.size(); ++i) {
        adopt_gradient(params[i], grad_view(static_cast<int>(gi), static_cast<int>(i)));
      }
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
        if (!scatters()) {
          const int gi = buckets_[b].group;
          for (int i : buckets_[b].params) adopt_gradient(groups_[gi].spec.params[i], grad_view(gi, i));
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
  const double scale = grad_multiplier / world;
  std::vector<torch::Tensor> owned;
  for (torch::Tensor& grads : owned_gradients()) {
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
  return world > 1 ? !comm_->any(!finite) : finite;
}

double GradientReducer::clip_grad_norm(double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> owned = owned_gradients();
  double squares = 0;
  for (const torch::Tensor& grads : owned) {
    if (grads.numel() == 0) continue;
    const double norm = at::linalg_vector_norm(grads, 2, std::nullopt, false, torch::kFloat).item<double>();
    squares += norm * norm;
  }
  if (sharded_) squares = comm_->sum(squares);
  const double norm = std::sqrt(squares);
  if (max_norm > 0 && std::isfinite(norm)) {
    const double coefficient = max_norm / (norm + 1e-6);
    if (coefficient < 1) {
      for (torch::Tensor& grads : owned) grads.mul_(coefficient);
    }
  }
  return norm;
}

int64_t GradientReducer::gradient_bytes() const {
  int64_t bytes = 0;
  for (const torch::Tensor& grads : grads_) bytes += static_cast<int64_t>(grads.nbytes());
  return bytes;
}

}  // namespace wxtrain::distributed
