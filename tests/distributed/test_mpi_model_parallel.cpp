// Model parallelism's pieces under mpirun -np 2 (distributed.model_parallel; docs/distributed.md,
// "Model parallelism"): the differentiable halo exchange, and the gnn sharded by latitude band
// against the same gnn run whole on every rank — the bands' outputs are the whole output's rows and
// the ranks' summed gradients are the whole model's, with and without activation checkpointing.
#include <gtest/gtest.h>

#include "distributed/halo_exchange.h"
#include "models/gnn/gnn.h"
#include "tests/distributed/mpi_test_env.h"

using namespace wxtrain;
using namespace wxtrain::distributed;

namespace {

TEST(HaloExchange, GathersEveryRanksRowsAndHandsGradientsBackToTheirOwner) {
  auto comm = fixture::world_comm();
  ASSERT_EQ(comm->size(), 2);
  const int rank = comm->rank();
  // Rank 0 sends 1 row, rank 1 two, of 3 values each.
  const std::vector<int64_t> rows{1, 2};
  torch::Tensor send = torch::full({rows[static_cast<size_t>(rank)], 3}, static_cast<float>(rank + 1)).requires_grad_();
  const HaloStats before = halo_stats();
  torch::Tensor got = exchange_halo_rows(comm, send, rows);
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{3, 3}));
  EXPECT_TRUE(torch::equal(got.detach(), torch::tensor({1.f, 2.f, 2.f}).view({3, 1}).expand({3, 3})));
  // Rank r weighs the gathered rows by r + 1: each owner's gradient is the sum, 1 + 2 = 3.
  (got * static_cast<float>(rank + 1)).sum().backward();
  EXPECT_TRUE(torch::allclose(send.grad(), torch::full_like(send, 3.f)));
  const HaloStats after = halo_stats();
  EXPECT_EQ(after.exchanges - before.exchanges, 1);
  EXPECT_EQ(after.forward_bytes - before.forward_bytes, 3 * 3 * 4);  // the gathered [3, 3] fp32
  EXPECT_EQ(after.backward_bytes - before.backward_bytes, 3 * 3 * 4);
}

// The whole gnn and a copy sharded into two latitude bands of a 9 x 8 grid.
void expect_sharded_gnn_matches_whole(int64_t neighbourhood, bool checkpointing) {
  auto comm = fixture::world_comm();
  const int rank = comm->rank();
  models::ModelShape shape;
  shape.in_channels = 3;
  shape.out_channels = 2;
  shape.lat = 9;
  shape.lon = 8;
  models::GraphNetOptions o;
  o.latent = 8;
  o.processor_layers = 3;
  o.mlp_layers = 2;
  o.neighbourhood = neighbourhood;
  torch::manual_seed(11);  // the same weights and data on both ranks
  auto whole = std::make_shared<models::GraphNetImpl>(o, shape);
  auto banded = std::make_shared<models::GraphNetImpl>(o, shape);
  {
    torch::NoGradGuard no_grad;
    auto from = whole->named_parameters();
    for (auto& p : banded->named_parameters()) p.value().copy_(from[p.key()]);
  }
  whole->set_checkpointing(checkpointing);
  banded->set_checkpointing(checkpointing);
  const torch::Tensor x = torch::randn({2, 3, 9, 8}), w = torch::randn({2, 2, 9, 8});

  // Rows 0-4 on rank 0, 5-8 on rank 1.
  const int64_t start = rank == 0 ? 0 : 5, rows = rank == 0 ? 5 : 4;
  models::NodeShard shard;
  shard.rank = rank;
  shard.bounds = {0, 5 * 8, 9 * 8};
  shard.exchange = [comm](const torch::Tensor& send, const std::vector<int64_t>& r) {
    return exchange_halo_rows(comm, send, r);
  };
  banded->set_node_shard(shard);
  // Radius r: each band reads r rows of the other.
  EXPECT_EQ(banded->halo_exchange_nodes(), 2 * neighbourhood * 8);
  EXPECT_EQ(banded->halo_nodes(), neighbourhood * 8);

  const torch::Tensor full = whole->forward(x);
  (full * w).sum().backward();
  const torch::Tensor band = banded->forward(x.narrow(2, start, rows));
  ASSERT_EQ(band.sizes(), (std::vector<int64_t>{2, 2, rows, 8}));
  EXPECT_LE((band - full.narrow(2, start, rows)).abs().max().item<double>(), 1e-5);
  (band * w.narrow(2, start, rows)).sum().backward();
  // The bands' gradients sum to the whole model's (the halo's come back to its owner).
  auto reference = whole->named_parameters();
  for (auto& p : banded->named_parameters()) {
    torch::Tensor g = p.value().grad().clone();
    comm->allreduce(g);
    const torch::Tensor ref = reference[p.key()].grad();
    const double scale = std::max(ref.abs().max().item<double>(), 1e-6);
    EXPECT_LE((g - ref).abs().max().item<double>() / scale, 1e-5) << p.key();
  }
}

TEST(ModelParallelGnn, BandsMatchTheWholeModelRadius1) { expect_sharded_gnn_matches_whole(1, false); }
TEST(ModelParallelGnn, BandsMatchTheWholeModelRadius2Checkpointed) { expect_sharded_gnn_matches_whole(2, true); }

}  // namespace
