#pragma once
// The gradient half of data parallelism: it owns the flat gradient buffers and sums the
// gradients over the ranks in buckets while backward runs, then averages, unscales and clips them.
//
// Buffers: all-reduce mode keeps one flat gradient buffer per group, laid out like the group's
// flat parameters, and makes each parameter's .grad a view of it. Reduce-scatter mode (ZeRO-2)
// keeps only this rank's shard: a parameter's .grad is the tensor autograd made, released as soon
// as its bucket is packed, and gradient_bytes() is the shard.
//
// Overlap: buckets are contiguous ranges of a group's flat buffer (no packing for an all-reduce),
// built in reverse parameter order, the order backward produces gradients. A post-hook on each
// parameter's gradient accumulator counts down its bucket; when a bucket is complete, it (and any
// complete buckets after it, in bucket order, so every rank issues the same sequence) is handed to
// the communicator asynchronously while backward continues. finish_backward() issues whatever is
// left (unused parameters, or a backward without prepare_backward(true)) and waits.
//
// With gradient accumulation the non-final micro-batches do not communicate, so under
// reduce-scatter full-size .grad tensors build up locally until the final one: the shard saves
// gradient memory only between steps and with accumulation = 1 (the estimator counts it that way).
// A world of one has no buckets and no hooks.
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <torch/torch.h>

#include "distributed/communicator.h"
#include "distributed/flat_parameters.h"

namespace wxtrain::distributed {

// What the last finish_backward() saw, for tests and the trainer's log.
struct BackwardStats {
  int64_t buckets = 0;                  // buckets reduced
  int64_t issued_during_backward = 0;   // of those, issued by hooks before finish_backward()
  double wait_seconds = 0;              // finish_backward()'s time issuing the rest and waiting for all:
                                        // the communication backward did not hide
};

class GradientReducer {
 public:
  enum class Mode {
    kAllReduce,      // every rank ends with the whole sum (ZeRO stages 0 and 1)
    kReduceScatter,  // every rank ends with the sums of the shard it owns (ZeRO-2)
  };

  // Reads the parameter store's `groups` (which must outlive the reducer) for their leaves, offsets
  // and shard layout, never their values. Buckets close once they reach `bucket_mb` MiB.
  GradientReducer(std::shared_ptr<Communicator> comm, std::vector<FlatGroup>& groups, Mode mode, double bucket_mb);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  void zero_grad();
  // Before each micro-step's backward; sync=false (non-final accumulation micro-steps) keeps the
  // gradients local: no communication at all.
  void prepare_backward(bool sync);
  // Waits for all buckets; the gradients become the world average times grad_multiplier (of the
  // owned gradients only: see owned_gradients()). Returns true iff they are finite on all ranks.
  bool finish_backward(double grad_multiplier);
  // Global L2 norm of the averaged gradient (the owned shards' squares summed over ranks when the
  // layout is sharded); scales the gradients by max_norm / (norm + 1e-6) when that is below 1 and
  // max_norm > 0. Returns the norm before.
  double clip_grad_norm(double max_norm);

  // Per group, the gradients of the parameter shard this rank owns (its whole buffer unsharded), in
  // the parameters' dtype: what the optimizer updates from. They may serve it as scratch.
  std::vector<torch::Tensor> owned_gradients();

  int64_t gradient_bytes() const;  // this rank's persistent gradient storage
  int64_t bucket_count() const { return static_cast<int64_t>(buckets_.size()); }
  const BackwardStats& last_backward() const { return last_backward_; }

 private:
  struct Bucket {
    int group = 0;
    int64_t begin = 0, end = 0;    // element range in the group's flat buffer
    std::vector<int> params;       // parameter indices within the group
    int pending = 0;               // hooks still to fire in this backward
    bool issued = false;
    WorkHandle work;
    torch::Tensor staging;         // reduce-scatter: the packed gradients being sent
  };
  struct Slot {
    int group, index, bucket;
  };
  class ReadyHook;

  bool scatters() const { return mode_ == Mode::kReduceScatter; }
  torch::Tensor owned_gradient(int group);
  torch::Tensor grad_view(int group, int index) const;
  void build_buckets(double bucket_mb);
  void register_hooks();
  void on_gradient_ready(int slot);
  void issue_ready_buckets();  // with mutex_ held
  void issue(Bucket& bucket);

  std::shared_ptr<Communicator> comm_;
  std::vector<FlatGroup>& groups_;  // the parameter store's
  Mode mode_;
  bool sharded_;  // the optimizer owns a shard: the owned gradients are part of the whole
  // Per group: all-reduce: flat like the parameters; reduce-scatter: the owned shard.
  std::vector<torch::Tensor> grads_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;

  std::mutex mutex_;    // bucket state: hooks may run on autograd worker threads
  bool armed_ = false;  // prepare_backward(true) was called and finish_backward() not yet
  std::vector<bool> slot_seen_;
  size_t next_bucket_ = 0;
  BackwardStats last_backward_;
};

}  // namespace wxtrain::distributed
