#pragma once
// Model parallelism for the graph models whose message passing crosses between node sets (GraphCast's
// grid -> mesh -> grid, AIFS's data -> hidden -> data; docs/distributed.md, "Model parallelism"): a
// node set split among the ranks of a model-parallel group (NodePartition), and one message-passing
// graph cut to a rank (ShardedGraph): the rank keeps the edges whose receivers it owns, and the
// senders other ranks own (its halo) come in through one exchange of every rank's send rows
// (NodeShard::exchange, distributed::exchange_halo_rows) before the layer reads them. The gnn, whose
// one node set is the grid, does the same in models/gnn.
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "models/weather_model.h"

namespace wxtrain::models {

// Which rank owns each node of one node set. A rank's local rows are its nodes in ascending id.
struct NodePartition {
  int ranks = 1;
  std::vector<int> owner;                    // per node
  std::vector<int64_t> local;                // per node: its row among its owner's nodes
  std::vector<std::vector<int64_t>> owned;   // per rank: its nodes, ascending
  // owner[n] for every node (each in [0, ranks)).
  static NodePartition from_owners(std::vector<int> owner, int ranks);
  // The grid's cells as a NodeShard splits them: rank r owns [bounds[r], bounds[r + 1]).
  static NodePartition from_bounds(const std::vector<int64_t>& bounds);
  int64_t owned_by(int rank) const { return static_cast<int64_t>(owned[static_cast<size_t>(rank)].size()); }
};

// The cell bounds of P bands as the trainer cuts the grid (trainer/training_step.cpp, data::grid_band):
// whole latitude rows of a rectangle, cells of a point set, the first ranks one more where the count
// does not divide; rank r owns cells [bounds[r], bounds[r + 1]). Empty for P <= 1 or a grid with
// fewer rows (cells) than ranks (the trainer refuses that run). The memory formulas partition with it.
std::vector<int64_t> band_bounds(const ModelShape& shape, int64_t P);

// One edge set (senders of one node set, receivers of another, or the same) cut to `rank`.
struct ShardedGraph {
  torch::Tensor edges;      // [E_r] the kept edges' ids in the whole edge set, ascending
  torch::Tensor senders;    // [E_r] rows of the senders' local rows followed by the halo
  torch::Tensor receivers;  // [E_r] the receivers' local rows
  torch::Tensor send_index;  // [S_r] local rows of this rank's senders that other ranks read
  torch::Tensor halo_index;  // [H_r] rows of the exchange's output that are this rank's halo
  std::vector<int64_t> send_rows;  // S of every rank: the exchange's counts
  std::vector<int64_t> halo_ids;   // [H_r] the halo's node ids in the whole node set, ascending
  int64_t owned_senders = 0;
  int64_t halo_nodes() const { return halo_index.defined() ? halo_index.numel() : 0; }
  int64_t exchange_nodes() const;  // every rank's send rows together: what one exchange moves
  // The sender rows this graph reads: x (this rank's sender rows along `dim`) followed by the halo
  // rows from the other ranks, through one exchange (collective: every rank of the group calls it,
  // in the same order). Differentiable: the halo rows' gradients go back to their owners.
  torch::Tensor with_halo(const torch::Tensor& x, int64_t dim, const NodeShard& shard) const;
  // Moves the index tensors (built on the CPU) to `device`.
  void to(torch::Device device);
};

// The halo of `rank` when every rank q reads the nodes needs[q] (sorted, unique ids, none its own)
// of `nodes`: the exchange's counts and indices (edges, senders and receivers left empty).
ShardedGraph halo_of(const std::vector<std::vector<int64_t>>& needs, const NodePartition& nodes, int rank);

// senders/receivers: [E] int64 of the whole edge set (any order; kept edges keep it).
ShardedGraph shard_graph(const torch::Tensor& senders, const torch::Tensor& receivers, const NodePartition& sender_nodes,
                         const NodePartition& receiver_nodes, int rank);

}  // namespace wxtrain::models
