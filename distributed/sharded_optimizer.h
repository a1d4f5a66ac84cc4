#pragma once
// The optimizer of data parallelism over this rank's shard of each flat parameter group (ZeRO-1/2;
// the whole group when unsharded): the fp32 optimizer state and, for bf16/fp16 parameters, fp32
// master weights exist for the owned range only, and step() runs the flat update
// (flat_optimizer.h) on it. Making the other ranks' shards whole again is not its business: the
// parameter store all-gathers them (or, under parameter sharding, gathers them when a block needs
// them). consolidated_state() gathers the shards into full-size tensors, so a checkpoint written
// on N ranks in any stage resumes on M.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "distributed/communicator.h"
#include "distributed/flat_optimizer.h"
#include "distributed/flat_parameters.h"

namespace wxtrain::distributed {

class ShardedOptimizer {
 public:
  // Updates the owned shards of the parameter store's `groups` (which must outlive it) with their
  // lr_scale and weight_decay. Throws ConfigError for an unknown options.kind.
  ShardedOptimizer(std::shared_ptr<Communicator> comm, std::vector<FlatGroup>& groups, OptimizerOptions options);
  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;

  // One update with learning rate lr * group.lr_scale from `owned_gradients` (one per group, the
  // gradients of the owned shard, GradientReducer::owned_gradients()), which may serve as scratch.
  void step(double lr, const std::vector<torch::Tensor>& owned_gradients);
  // Re-reads the fp32 master weights of bf16/fp16 parameters after their values were changed
  // outside step() (broadcast from rank 0, loaded from a checkpoint).
  void sync_master_weights();

  // Collective. Full-size, unpadded fp32 state: "step" (int64 scalar) and "group<i>.<name>" for
  // each state name (exp_avg, exp_avg_sq | momentum_buffer) plus "group<i>.master_weights" for
  // bf16/fp16 groups; CPU tensors. Identical on every rank, independent of world size and zero stage.
  std::map<std::string, torch::Tensor> consolidated_state();
  // Accepts what consolidated_state() returned in any world size and stage; throws Error naming
  // the key when a tensor is missing or has the wrong size.
  void load_state(const std::map<std::string, torch::Tensor>& state);

  int64_t state_bytes() const;  // this rank's optimizer state + fp32 master weights

 private:
  struct ShardState {
    torch::Tensor master;              // fp32 owned shard when the parameters are not fp32
    std::vector<torch::Tensor> state;  // fp32 owned shards, optimizer_state_names() order
  };
  torch::Tensor gather_state(const FlatGroup& g, const torch::Tensor& shard);

  std::shared_ptr<Communicator> comm_;
  std::vector<FlatGroup>& groups_;  // the parameter store's
  OptimizerOptions options_;
  OptimizerKind kind_;
  std::vector<std::string> state_names_;
  std::vector<ShardState> shards_;  // per group
  int64_t step_ = 0;
};

}  // namespace wxtrain::distributed
