#pragma once
// ZeRO-3's parameter store: parameters sharded across the data-parallel group, block by block.
//
// Each parameter group is split into units, one per model block (the block's parameters of that
// group, in the group's order) plus one "resident" unit per group for the parameters no block owns
// (or that two blocks share). Every unit is a FlatGroup (flat_parameters.h) laid out over all ranks,
// so each rank keeps 1/N of every block's flat parameters in FlatGroup::shard, the only persistent
// copy; the GradientReducer (reduce-scatter mode) and the ShardedOptimizer run on the units
// unchanged. A block unit's full buffer (FlatGroup::flat, of which the parameters are views) has
// its storage freed while the block is not running: the parameters keep their shapes, and the
// views autograd saved in forward see the data again once the block is gathered for backward, as
// PyTorch FSDP does by resizing the unsharded storage to zero.
//
// Installed as the model's BlockRunner (core/block_runner.h), it
//   - before a block's forward: frees every gathered block but this one and the next, waits for
//     (or issues) this block's all-gather, and issues the next block's (prefetch, in the order the
//     blocks ran last time: learned, so rollout's repeats and the models' own orders need nothing);
//   - wraps the block's outputs in a node whose backward gathers the block again (and prefetches
//     the block that ran before it), before any of the block's own backward runs — also before an
//     activation-checkpointed block's replay, which happens inside that backward;
//   - wraps the block's inputs in a node whose backward frees the block: autograd's engine runs a
//     graph in reverse creation order, so by then the block's backward (replay included) is done.
// The resident units stay whole: they are all-gathered after each update, as under ZeRO-1/2.
//
// Checkpoints: the optimizer's state comes per unit; to_group_state()/to_unit_state() convert it
// to and from the groups' layout, so a ZeRO-3 checkpoint is the same file as a ZeRO-0 one.
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/block_runner.h"
#include "distributed/communicator.h"
#include "distributed/flat_parameters.h"

namespace wxtrain::distributed {

struct GatherStats {
  int64_t gathers = 0;            // block all-gathers issued (one per unit)
  int64_t gathered_bytes = 0;     // their payload (the full units)
  int64_t peak_gathered_bytes = 0;  // most full block bytes held at once (since the first gather)
};

class ShardedParameters final : public BlockRunner {
 public:
  // `groups` as FlatParameters takes them; `blocks` each block's parameters, in the model's block
  // order (WeatherModelImpl::block_modules()). Parameters of no group (frozen) are left alone.
  ShardedParameters(std::shared_ptr<Communicator> comm, std::vector<ParamGroup> groups,
                    const std::vector<std::vector<torch::Tensor>>& blocks);
  ShardedParameters(const ShardedParameters&) = delete;
  ShardedParameters& operator=(const ShardedParameters&) = delete;

  // The units the reducer and the optimizer run on.
  std::vector<FlatGroup>& units() { return store_->groups(); }
  const std::vector<FlatGroup>& units() const { return store_->groups(); }

  // Rank 0's values to every rank: the full buffers (still whole after construction) are
  // broadcast, the shards refreshed from them, and the blocks freed.
  void broadcast();
  // Before a micro-batch's forward: a new sequence of calls.
  void start_forward();
  // After the last backward of a step: every gathered block freed.
  void end_backward();
  // Before the update: gathered blocks would hold stale values.
  void release_blocks();
  // After the update: the resident units' full buffers from their updated shards.
  void after_update();
  // Every block gathered and kept (pinned) until release_all(): checkpoint writing, and validation,
  // whose ranks may run different numbers of batches (a block's gather is collective).
  void gather_all();
  void release_all();

  std::map<std::string, torch::Tensor> to_group_state(const std::map<std::string, torch::Tensor>& unit_state) const;
  std::map<std::string, torch::Tensor> to_unit_state(const std::map<std::string, torch::Tensor>& group_state) const;

  std::vector<torch::Tensor> run_block(size_t block, const Fn& run, const std::vector<torch::Tensor>& inputs) override;

  // Called by the autograd nodes run_block adds.
  void gather_for_backward(int64_t call);
  void release_after_backward(int64_t call);

  const GatherStats& stats() const { return stats_; }
  int64_t largest_block_bytes() const;   // one block's full parameters, all groups
  int64_t persistent_bytes() const;      // shards + resident full buffers on this rank

 private:
  enum class Status { kFree, kInFlight, kReady };
  void gather(int block);
  void wait(int block);
  void release(int block);
  void keep_only(int a, int b);  // frees every gathered block other than a and b

  std::shared_ptr<Communicator> comm_;
  std::unique_ptr<FlatParameters> store_;
  std::vector<int> unit_group_;                   // per unit: the group it came from
  std::vector<int> unit_block_;                   // per unit: its block (-1: resident)
  std::vector<std::vector<int>> unit_members_;    // per unit: its parameters' indices in their group
  std::vector<std::vector<int64_t>> group_offsets_;  // per group: ZeRO-0's offset of each parameter
  std::vector<int64_t> group_numel_;
  std::vector<std::vector<int>> block_units_;     // per block: its units
  std::vector<int64_t> unit_bytes_;               // full (padded) bytes of each unit

  std::vector<Status> status_;
  std::vector<WorkHandle> work_;
  std::set<int> gathered_;         // blocks with a unit in flight or ready
  int64_t gathered_bytes_now_ = 0;
  bool pinned_ = false;

  std::vector<int> next_after_;    // per block: the block that ran after it last time (-1 unknown)
  int last_block_ = -1;            // the block that ran last in this sequence
  std::vector<int> call_block_;    // per recorded call (grad mode): its block
  std::vector<int> call_previous_; // and the block that ran before it (-1: none)
  GatherStats stats_;
};

}  // namespace wxtrain::distributed
