#pragma once
// Data parallelism with ZeRO stage 0, 1, 2 or 3, composed of three pieces that know nothing of each
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
// Stage 3 also shards the parameters: ShardedParameters (sharded_parameters.h) replaces
// FlatParameters, keeps each rank's 1/N of every block's parameters and gathers a block around its
// forward and backward (installed as the model's BlockRunner: block_runner()). The GradientReducer
// runs unchanged in kReduceScatter mode on its units (it reads their layout, never their values,
// and takes gradients from .grad), the ShardedOptimizer unchanged on their shards, and the
// all-gather after the update goes, since the next forward gathers (only the parameters outside
// every block, kept whole, are all-gathered).
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
#include "distributed/sharded_parameters.h"

namespace wxtrain::distributed {

class ZeroDataParallel {
 public:
  // Throws ConfigError for an unknown optimizer, a zero_stage outside 0..3 or bucket_mb <= 0, and
  // Error for a group FlatParameters refuses. `blocks`: each model block's parameters, in block
  // order (stage 3 gathers by them; a parameter of no block stays whole on every rank).
  ZeroDataParallel(std::shared_ptr<Communicator> comm, std::vector<ParamGroup> groups, OptimizerOptions opt,
                   int zero_stage, double bucket_mb, const std::vector<std::vector<torch::Tensor>>& blocks = {});
  ZeroDataParallel(const ZeroDataParallel&) = delete;
  ZeroDataParallel& operator=(const ZeroDataParallel&) = delete;

  // Rank 0's parameter values to every rank (start of training), and the master weights re-read.
  void broadcast_parameters();

  // The step, in order (GradientReducer has the details).
  void zero_grad() { reducer_.zero_grad(); }
  void prepare_backward(bool sync) {
    if (sharded_) sharded_->start_forward();
    reducer_.prepare_backward(sync);
  }
  bool finish_backward(double grad_multiplier) {
    const bool finite = reducer_.finish_backward(grad_multiplier);
    if (sharded_) sharded_->end_backward();
    return finite;
  }
  double clip_grad_norm(double max_norm) { return reducer_.clip_grad_norm(max_norm); }
  // The update with learning rate lr * group.lr_scale (this rank's shard under ZeRO), then the
  // all-gather of the updated parameters. The gradient buffer serves as scratch: gradients are
  // undefined after step() until zero_grad().
  void step(double lr);

  // Checkpoints: ShardedOptimizer::consolidated_state() and load_state() (collective, and
  // independent of world size and stage: stage 3's per-block units are put back in the groups'
  // layout).
  std::map<std::string, torch::Tensor> optimizer_state();
  void load_optimizer_state(const std::map<std::string, torch::Tensor>& state);

  // Stage 3: the model's BlockRunner (null otherwise), and its gathering statistics.
  std::shared_ptr<BlockRunner> block_runner() const { return sharded_; }
  const ShardedParameters* sharded_parameters() const { return sharded_.get(); }
  int stage() const { return stage_; }
  // While the returned guard lives, every parameter holds its full value (stage 3 gathers all
  // blocks; collective. Other stages: nothing to do). For reading the weights (checkpoints) and
  // for validation, whose ranks may run different numbers of batches.
  std::shared_ptr<void> gather_full_parameters();

  int64_t optimizer_state_bytes() const { return optimizer_.state_bytes(); }
  int64_t gradient_bytes() const { return reducer_.gradient_bytes(); }
  int64_t bucket_count() const { return reducer_.bucket_count(); }
  const BackwardStats& last_backward() const { return reducer_.last_backward(); }

 private:
  std::shared_ptr<Communicator> comm_;
  std::vector<FlatGroup>& store_groups();

  int stage_;  // effective stage: 0 on a world of one
  std::unique_ptr<FlatParameters> parameters_;   // stages 0-2
  std::shared_ptr<ShardedParameters> sharded_;   // stage 3
  GradientReducer reducer_;
  ShardedOptimizer optimizer_;
};

}  // namespace wxtrain::distributed
