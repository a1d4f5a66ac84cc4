#pragma once
// Data parallelism and the optimizer in one object: DDP gradient averaging, ZeRO-1/2 sharding and
// the update itself, all on flat buffers.
//
// Layout: the parameters of each group are copied into one contiguous flat buffer and re-pointed
// (set_data) to views of it; under stages 0 and 1 their .grad tensors are views of a second flat
// buffer. A bucket is a contiguous range of a group's flat buffer, so bucket traffic needs no
// packing, and the optimizer updates a whole group (or this rank's shard of it) with a few big ops.
//
// Overlap: buckets are built in reverse parameter order (the order backward produces gradients).
// A post-hook on each parameter's gradient accumulator counts down its bucket; when a bucket is
// complete, it (and any complete buckets after it, in bucket order, so every rank issues the same
// sequence) is handed to the communicator asynchronously while backward continues.
// finish_backward() issues whatever is left (unused parameters, or a backward without
// prepare_backward(true)) and waits.
//
// Sharding (zero_stage >= 1, world > 1): each group's flat buffer is padded to a multiple of the
// world size and rank r owns elements [r*S, (r+1)*S). The optimizer state (and fp32 master weights
// of bf16 parameters) exists for the owned shard only; after the update the shards are all-gathered
// back into the parameters. Stage 1 all-reduces the gradients; stage 2 reduce-scatters each bucket
// so every rank receives only the sums of the elements it owns, and keeps only those: parameters'
// .grad tensors are released as soon as their bucket is packed, and gradient_bytes() is the shard.
// With gradient accumulation the non-final micro-batches do not communicate, so full-size .grad
// tensors build up locally until the final one: stage 2 saves gradient memory only between steps
// and with accumulation = 1 (the estimator counts it that way).
// A world of one runs every stage as stage 0: a plain optimizer with no hooks and no communication.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "distributed/communicator.h"
#include "distributed/flat_optimizer.h"

namespace wxtrain::distributed {

struct ParamGroup {
  std::vector<std::string> names;    // parameter names, for messages
  std::vector<torch::Tensor> params;  // leaves with requires_grad, all of one dtype and device
  double lr_scale = 1.0;              // this group's lr = step(lr) * lr_scale (0 leaves it unchanged)
  double weight_decay = 0.0;
};

// What the last finish_backward() saw, for tests and the trainer's log.
struct BackwardStats {
  int64_t buckets = 0;                  // buckets reduced
  int64_t issued_during_backward = 0;   // of those, issued by hooks before finish_backward()
  double wait_seconds = 0;              // finish_backward()'s time issuing the rest and waiting for all:
                                        // the communication backward did not hide
};

class DataParallel {
 public:
  DataParallel(std::shared_ptr<Communicator> comm, std::vector<ParamGroup> groups, OptimizerOptions opt,
               int zero_stage, double bucket_mb);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Rank 0's parameter values to every rank (start of training).
  void broadcast_parameters();
  // Re-reads the fp32 master weights of bf16 parameters after their values were changed outside
  // step() (weights loaded from a checkpoint); broadcast_parameters() does it itself.
  void sync_master_weights();

  void zero_grad();
  // Before each micro-step's backward; sync=false (non-final accumulation micro-steps) keeps the
  // gradients local: no communication at all.
  void prepare_backward(bool sync);
  // Waits for all buckets; the gradients become the world average times grad_multiplier (under
  // ZeRO only this rank's shard is meaningful). Returns true iff they are finite on all ranks.
  bool finish_backward(double grad_multiplier);
  // Global L2 norm of the averaged gradient (summed over shards under ZeRO-2); scales the gradients
  // by max_norm / (norm + 1e-6) when that is below 1 and max_norm > 0. Returns the norm before.
  double clip_grad_norm(double max_norm);
  // The update with learning rate lr * group.lr_scale (this rank's shard under ZeRO), then the
  // all-gather of the updated parameters. The gradient buffer serves as scratch: gradients are
  // undefined after step() until zero_grad().
  void step(double lr);

  // Collective. Full-size, unpadded fp32 state: "step" (int64 scalar) and "group<i>.<name>" for
  // each state name (exp_avg, exp_avg_sq | momentum_buffer) plus "group<i>.master_weights" for
  // bf16/fp16 groups; CPU tensors. Identical on every rank, independent of world size and zero stage.
  std::map<std::string, torch::Tensor> optimizer_state();
  // Accepts what optimizer_state() returned in any world size and stage; throws Error naming the
  // key when a tensor is missing or has the wrong size.
  void load_optimizer_state(const std::map<std::string, torch::Tensor>& state);

  int64_t optimizer_state_bytes() const;  // this rank's optimizer state + fp32 master weights
  int64_t gradient_bytes() const;         // this rank's persistent gradient storage
  int64_t step_count() const { return step_; }
  int zero_stage() const { return stage_; }
  int64_t bucket_count() const { return static_cast<int64_t>(buckets_.size()); }
  const BackwardStats& last_backward() const { return last_backward_; }

 private:
  struct FlatGroup {
    ParamGroup spec;
    std::vector<int64_t> offsets;  // element offset of each parameter in the flat buffer
    int64_t numel = 0;             // real elements
    int64_t padded = 0;            // numel rounded up to a multiple of the world size (sharded)
    int64_t shard_begin = 0;       // owned range [shard_begin, shard_begin + shard_size)
    int64_t shard_size = 0;
    torch::Tensor params;          // flat, padded, in the parameters' dtype and device
    torch::Tensor grads;           // stage 0/1: flat like params; stage 2: the owned shard only
    torch::Tensor master;          // fp32 owned shard when params are not fp32
    std::vector<torch::Tensor> state;  // fp32 owned shards, optimizer_state_names() order
  };
  struct Bucket {
    int group = 0;
    int64_t begin = 0, end = 0;    // element range in the group's flat buffer
    std::vector<int> params;       // parameter indices within the group
    int pending = 0;               // hooks still to fire in this backward
    bool issued = false;
    WorkHandle work;
    torch::Tensor staging;         // stage 2: the packed gradients being reduce-scattered
  };
  struct Slot {
    int group, index, bucket;
  };
  class ReadyHook;

  bool sharded() const { return stage_ >= 1; }
  torch::Tensor owned_params(FlatGroup& g) const;
  torch::Tensor owned_grads(FlatGroup& g) const;
  torch::Tensor grad_view(FlatGroup& g, int index) const;
  void build_buckets(double bucket_mb);
  void register_hooks();
  void on_gradient_ready(int slot);
  void issue_ready_buckets();  // with mutex_ held
  void issue(Bucket& bucket);
  torch::Tensor gather_state(FlatGroup& g, const torch::Tensor& shard);

  std::shared_ptr<Communicator> comm_;
  OptimizerOptions options_;
  OptimizerKind kind_;
  std::vector<std::string> state_names_;
  int stage_;           // effective stage: 0 on a world of one
  int world_;
  int rank_;
  int64_t step_ = 0;
  std::vector<FlatGroup> groups_;
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
