#pragma once
// The parameter store of data parallelism: each parameter group's tensors copied into one
// contiguous flat buffer (padded to the shard layout) and re-pointed (set_data) to views of it, so
// that a bucket, a shard or the optimizer's update is one range of one tensor. The gradient
// reducer and the sharded optimizer read a group through FlatGroup only: its parameters (the
// autograd leaves), where each lies in the buffer, and the shard layout.
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "distributed/communicator.h"
#include "distributed/shard_layout.h"

namespace wxtrain::distributed {

struct ParamGroup {
  std::vector<std::string> names;    // parameter names, for messages
  std::vector<torch::Tensor> params;  // leaves with requires_grad, all of one dtype and device
  double lr_scale = 1.0;              // this group's lr = step(lr) * lr_scale (0 leaves it unchanged)
  double weight_decay = 0.0;
};

struct FlatGroup {
  ParamGroup spec;                             // the parameters are views of `flat` after construction
  std::vector<int64_t> offsets;                // element offset of each parameter in the flat buffer
  std::vector<int64_t> numels;                 // elements of each parameter
  std::vector<std::vector<int64_t>> shapes;    // sizes of each parameter
  ShardLayout layout;
  torch::Tensor flat;                          // padded, in the parameters' dtype and device
  // ZeRO-3 (sharded_parameters.h): this rank's shard kept apart from `flat`, whose storage is
  // freed while its block is not running. Undefined otherwise: the shard is a range of `flat`.
  torch::Tensor shard;

  // This rank's shard of the parameters (all of them when unsharded).
  torch::Tensor owned() const {
    return shard.defined() ? shard : flat.narrow(0, layout.shard_begin, layout.shard_size);
  }
};

class FlatParameters {
 public:
  // Checks the groups (trainable leaves, one dtype and device per group, no parameter twice; names
  // made up when empty) and moves them into flat buffers laid out for `ranks` shards (1: none).
  FlatParameters(std::vector<ParamGroup> groups, int ranks, int rank);
  FlatParameters(const FlatParameters&) = delete;
  FlatParameters& operator=(const FlatParameters&) = delete;

  std::vector<FlatGroup>& groups() { return groups_; }
  const std::vector<FlatGroup>& groups() const { return groups_; }

  // Rank 0's values to every rank.
  void broadcast(Communicator& comm);
  // Every rank's owned shard into every rank's full buffer (after a sharded update).
  void allgather_shards(Communicator& comm);

 private:
  std::vector<FlatGroup> groups_;
};

}  // namespace wxtrain::distributed
