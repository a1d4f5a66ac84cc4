#include "models/graph_shard.h"

#include <algorithm>
#include <numeric>

namespace wxtrain::models {

NodePartition NodePartition::from_owners(std::vector<int> owner, int ranks) {
  TORCH_CHECK(ranks >= 1, "node partition: ", ranks, " ranks");
  NodePartition p;
  p.ranks = ranks;
  p.owner = std::move(owner);
  p.local.resize(p.owner.size());
  p.owned.assign(static_cast<size_t>(ranks), {});
  for (size_t n = 0; n < p.owner.size(); ++n) {
    const int r = p.owner[n];
    TORCH_CHECK(r >= 0 && r < ranks, "node partition: node ", n, " owned by rank ", r, " of ", ranks);
    auto& mine = p.owned[static_cast<size_t>(r)];
    p.local[n] = static_cast<int64_t>(mine.size());
    mine.push_back(static_cast<int64_t>(n));
  }
  return p;
}

NodePartition NodePartition::from_bounds(const std::vector<int64_t>& bounds) {
  TORCH_CHECK(bounds.size() >= 2 && bounds.front() == 0 && std::is_sorted(bounds.begin(), bounds.end()),
              "node partition: bounds must rise from 0, one range per rank");
  std::vector<int> owner(static_cast<size_t>(bounds.back()));
  for (size_t r = 0; r + 1 < bounds.size(); ++r)
    std::fill(owner.begin() + bounds[r], owner.begin() + bounds[r + 1], static_cast<int>(r));
  return from_owners(std::move(owner), static_cast<int>(bounds.size()) - 1);
}

int64_t ShardedGraph::exchange_nodes() const {
  return std::accumulate(send_rows.begin(), send_rows.end(), int64_t{0});
}

torch::Tensor ShardedGraph::with_halo(const torch::Tensor& x, int64_t dim, const NodeShard& shard) const {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  TORCH_CHECK(x.size(d) == owned_senders, "graph shard: expected this rank's ", owned_senders, " sender rows along dim ",
              d, ", got ", x.sizes());
  // [.., S, ..] rows to send, moved to the front -> every rank's -> this rank's halo, moved back.
  const torch::Tensor sent = shard.exchange(x.index_select(d, send_index).movedim(d, 0), send_rows);
  return torch::cat({x, sent.index_select(0, halo_index).movedim(0, d)}, d);
}

void ShardedGraph::to(torch::Device device) {
  for (torch::Tensor* t : {&edges, &senders, &receivers, &send_index, &halo_index}) *t = t->to(device);
}

ShardedGraph halo_of(const std::vector<std::vector<int64_t>>& needs, const NodePartition& nodes, int rank) {
  const int P = nodes.ranks;
  TORCH_CHECK(static_cast<int>(needs.size()) == P && rank >= 0 && rank < P, "graph shard: ", needs.size(),
              " ranks' needs for ", P, " ranks");
  // What each rank sends: the union of its nodes that any other rank reads, ascending.
  std::vector<std::vector<int64_t>> sends(static_cast<size_t>(P));
  for (const auto& need : needs)
    for (int64_t g : need) sends[static_cast<size_t>(nodes.owner[static_cast<size_t>(g)])].push_back(g);
  for (auto& s : sends) {
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
  }
  ShardedGraph out;
  out.owned_senders = nodes.owned_by(rank);
  std::vector<int64_t> offset(static_cast<size_t>(P) + 1, 0);
  for (int q = 0; q < P; ++q) {
    out.send_rows.push_back(static_cast<int64_t>(sends[static_cast<size_t>(q)].size()));
    offset[static_cast<size_t>(q) + 1] = offset[static_cast<size_t>(q)] + out.send_rows.back();
  }
  std::vector<int64_t> halo, send_local;
  for (int64_t g : needs[static_cast<size_t>(rank)]) {
    const int o = nodes.owner[static_cast<size_t>(g)];
    TORCH_CHECK(o != rank, "graph shard: rank ", rank, " reads its own node ", g, " as halo");
    const auto& from = sends[static_cast<size_t>(o)];
    halo.push_back(offset[static_cast<size_t>(o)] + (std::lower_bound(from.begin(), from.end(), g) - from.begin()));
  }
  for (int64_t g : sends[static_cast<size_t>(rank)]) send_local.push_back(nodes.local[static_cast<size_t>(g)]);
  out.halo_ids = needs[static_cast<size_t>(rank)];
  out.send_index = torch::tensor(send_local, torch::kLong);
  out.halo_index = torch::tensor(halo, torch::kLong);
  out.edges = out.senders = out.receivers = torch::empty({0}, torch::kLong);
  return out;
}

ShardedGraph shard_graph(const torch::Tensor& senders_t, const torch::Tensor& receivers_t,
                         const NodePartition& sender_nodes, const NodePartition& receiver_nodes, int rank) {
  const int P = sender_nodes.ranks;
  TORCH_CHECK(receiver_nodes.ranks == P && rank >= 0 && rank < P, "graph shard: rank ", rank, " of ", P, " and ",
              receiver_nodes.ranks);
  const torch::Tensor s_t = senders_t.cpu().to(torch::kLong).contiguous(), r_t = receivers_t.cpu().to(torch::kLong).contiguous();
  TORCH_CHECK(s_t.numel() == r_t.numel(), "graph shard: ", s_t.numel(), " senders, ", r_t.numel(), " receivers");
  const int64_t* snd = s_t.data_ptr<int64_t>();
  const int64_t* rcv = r_t.data_ptr<int64_t>();
  const int64_t E = s_t.numel();
  // What each rank reads from the others (sorted, unique, global ids).
  std::vector<std::vector<int64_t>> needs(static_cast<size_t>(P));
  for (int64_t k = 0; k < E; ++k) {
    const int q = receiver_nodes.owner[static_cast<size_t>(rcv[k])];
    if (sender_nodes.owner[static_cast<size_t>(snd[k])] != q) needs[static_cast<size_t>(q)].push_back(snd[k]);
  }
  for (auto& need : needs) {
    std::sort(need.begin(), need.end());
    need.erase(std::unique(need.begin(), need.end()), need.end());
  }
  ShardedGraph out = halo_of(needs, sender_nodes, rank);
  const auto& need = needs[static_cast<size_t>(rank)];
  std::vector<int64_t> kept, local_s, local_r;
  for (int64_t k = 0; k < E; ++k) {
    if (receiver_nodes.owner[static_cast<size_t>(rcv[k])] != rank) continue;
    kept.push_back(k);
    const int64_t g = snd[k];
    local_s.push_back(sender_nodes.owner[static_cast<size_t>(g)] == rank
                          ? sender_nodes.local[static_cast<size_t>(g)]
                          : out.owned_senders + (std::lower_bound(need.begin(), need.end(), g) - need.begin()));
    local_r.push_back(receiver_nodes.local[static_cast<size_t>(rcv[k])]);
  }
  out.edges = torch::tensor(kept, torch::kLong);
  out.senders = torch::tensor(local_s, torch::kLong);
  out.receivers = torch::tensor(local_r, torch::kLong);
  return out;
}

std::vector<int64_t> band_bounds(const ModelShape& shape, int64_t P) {
  const int64_t extent = shape.point_set ? shape.lon : shape.lat, per_cell = shape.point_set ? 1 : shape.lon;
  if (P <= 1 || extent < P) return {};
  std::vector<int64_t> bounds{0};
  for (int64_t r = 0; r < P; ++r) bounds.push_back(bounds.back() + (extent / P + (r < extent % P ? 1 : 0)) * per_cell);
  return bounds;
}

}  // namespace wxtrain::models
