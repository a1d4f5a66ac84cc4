#pragma once
// Data parallelism with ZeRO stage 0, 1 or 2, composed of three pieces that know nothing of each
// other's insides:
//   FlatParameters   (flat_parameters.h)    each group's parameters as views of one flat buffer,
//                                            padded to the ShardLayout (shard_layout.h)
//   GradientReducer  (gradient_reducer.h)   gradient buffers, buckets reduced during backward
//                                            (all-reduce, or reduce-scatter under ZeRO-2), averaging,
//                                            unscaling, the inf/NaN verdict and clipping
//   ShardedOptimizer (sharded_optimizer.h)  optimizer state and master weights of the owned shard,
//                                            the flat update (flat_optimizer.h), checkpoint state
// This class builds them from the run's settings and runs them in a step's order: the update of
// the owned shard, then (sharded) the all-gather of the parameters.
//
// Stages: 0 replicates everything; 1 shards the optimizer state (the gradients are all-reduced
// whole, each rank updates its shard and all-gathers the parameters); 2 also reduce-scatters the
// gradients, so each rank keeps only its shard of them. A world of one runs every stage as stage
// 0: a plain optimizer with no hooks and no communication.
//
// Where ZeRO-3 goes: a parameter-sharding piece in place of FlatParameters that keeps only each
// group's owned shard persistently (described by the same FlatGroup: offsets, numels, shapes,
// ShardLayout, with owned() naming that shard instead of a slice of a full buffer), all-gathers a
// block's parameters into a temporary buffer before the block's forward and its backward (the
// model's blocks, or checkpoint replays, give the hook points), re-points the leaves at it, and
// frees it after. The GradientReducer runs unchanged in kReduceScatter mode: it reads the groups'
// layout, never their values, and takes gradients from .grad. The ShardedOptimizer runs unchanged
// on FlatGroup::owned(); this class skips the all-gather after the update, since the next forward
// gathers.
// Model-parallel groups change only which communicator each piece is given: the reducer and the
// optimizer take the data-parallel group's.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "distributed/communicator.h"
#include "distributed/flat_optimizer.h"
#include "distributed/flat_parameters.h"
#include "distributed/gradient_reducer.h"
#include "distributed/sharded_optimizer.h"

namespace wxtrain::distributed {

class ZeroDataParallel {
 public:
  // Throws ConfigError for an unknown optimizer, a zero_stage outside 0..2 or bucket_mb <= 0, and
  // Error for a group FlatParameters refuses.
  ZeroDataParallel(std::shared_ptr<Communicator> comm, std::vector<ParamGroup> groups, OptimizerOptions opt,
                   int zero_stage, double bucket_mb);
  ZeroDataParallel(const ZeroDataParallel&) = delete;
  ZeroDataParallel& operator=(const ZeroDataParallel&) = delete;

  // Rank 0's parameter values to every rank (start of training), and the master weights re-read.
  void broadcast_parameters();

  // The step, in order (GradientReducer has the details).
  void zero_grad() { reducer_.zero_grad(); }
  void prepare_backward(bool sync) { reducer_.prepare_backward(sync); }
  bool finish_backward(double grad_multiplier) { return reducer_.finish_backward(grad_multiplier); }
  double clip_grad_norm(double max_norm) { return reducer_.clip_grad_norm(max_norm); }
  // The update with learning rate lr * group.lr_scale (this rank's shard under ZeRO), then the
  // all-gather of the updated parameters. The gradient buffer serves as scratch: gradients are
  // undefined after step() until zero_grad().
  void step(double lr);

  // Checkpoints: ShardedOptimizer::consolidated_state() and load_state() (collective, and
  // independent of world size and stage).
  std::map<std::string, torch::Tensor> optimizer_state() { return optimizer_.consolidated_state(); }
  void load_optimizer_state(const std::map<std::string, torch::Tensor>& state) { optimizer_.load_state(state); }

  int64_t optimizer_state_bytes() const { return optimizer_.state_bytes(); }
  int64_t gradient_bytes() const { return reducer_.gradient_bytes(); }
  int64_t bucket_count() const { return reducer_.bucket_count(); }
  const BackwardStats& last_backward() const { return reducer_.last_backward(); }

 private:
  std::shared_ptr<Communicator> comm_;
  int stage_;  // effective stage: 0 on a world of one
  FlatParameters parameters_;
  GradientReducer reducer_;
  ShardedOptimizer optimizer_;
};

}  // namespace wxtrain::distributed
