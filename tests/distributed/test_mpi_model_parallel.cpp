// Model parallelism's pieces under mpirun -np 2 (distributed.model_parallel; docs/distributed.md,
// "Model parallelism"): the differentiable halo exchange, and the gnn, GraphCast and AIFS sharded by
// latitude band against the same model run whole on every rank — the bands' outputs are the whole
// output's rows and the ranks' summed gradients are the whole model's, with and without activation
// checkpointing.
#include <gtest/gtest.h>

#include <algorithm>

#include "distributed/halo_exchange.h"
#include "models/aifs/aifs.h"
#include "models/gnn/gnn.h"
#include "models/graphcast/graphcast.h"
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

// This rank's part of a NodeShard that splits the cells at `bounds` over the world's ranks, its
// exchange the real halo exchange.
models::NodeShard shard_over(const std::shared_ptr<Communicator>& comm, std::vector<int64_t> bounds) {
  models::NodeShard shard;
  shard.rank = comm->rank();
  shard.bounds = std::move(bounds);
  shard.exchange = [comm](const torch::Tensor& send, const std::vector<int64_t>& rows) {
    return exchange_halo_rows(comm, send, rows);
  };
  return shard;
}

// The bands' outputs against the whole model's rows, and the ranks' gradients summed against the
// whole model's: `banded` holds a copy of `whole`'s weights and was cut to this rank's rows
// [start, start + rows) of x (along dim 2, latitude rows; dim 3 on a point set, cells).
void expect_bands_match(const std::shared_ptr<Communicator>& comm, models::WeatherModelImpl& whole,
                        models::WeatherModelImpl& banded, const torch::Tensor& x, const torch::Tensor& w, int64_t start,
                        int64_t rows, int64_t dim = 2) {
  const torch::Tensor full = whole.forward(x);
  (full * w).sum().backward();
  const torch::Tensor band = banded.forward(x.narrow(dim, start, rows));
  ASSERT_EQ(band.sizes(), full.narrow(dim, start, rows).sizes());
  const double out_scale = full.abs().max().item<double>();
  EXPECT_LE((band - full.narrow(dim, start, rows)).abs().max().item<double>(), 1e-5 * std::max(out_scale, 1.0));
  (band * w.narrow(dim, start, rows)).sum().backward();
  auto reference = whole.named_parameters();
  // A gradient that is zero in exact arithmetic (attention's key bias: the softmax ignores a shift
  // common to all of a receiver's scores) is round-off in both runs: it is compared against the
  // model's gradient scale, not its own.
  double largest = 0;
  for (auto& p : reference) largest = std::max(largest, p.value().grad().abs().max().item<double>());
  for (auto& p : banded.named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key() << " has no gradient on rank " << comm->rank();
    torch::Tensor g = p.value().grad().clone();
    comm->allreduce(g);
    const torch::Tensor ref = reference[p.key()].grad();
    const double scale = std::max(ref.abs().max().item<double>(), 1e-3 * largest);
    EXPECT_LE((g - ref).abs().max().item<double>() / scale, 1e-5) << p.key();
  }
}

void copy_weights(const models::WeatherModelImpl& from, models::WeatherModelImpl& to) {
  torch::NoGradGuard no_grad;
  auto source = from.named_parameters();
  for (auto& p : to.named_parameters()) p.value().copy_(source[p.key()]);
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
  copy_weights(*whole, *banded);
  whole->set_checkpointing(checkpointing);
  banded->set_checkpointing(checkpointing);
  const torch::Tensor x = torch::randn({2, 3, 9, 8}), w = torch::randn({2, 2, 9, 8});

  // Rows 0-4 on rank 0, 5-8 on rank 1.
  const int64_t start = rank == 0 ? 0 : 5, rows = rank == 0 ? 5 : 4;
  const models::NodeShard shard = shard_over(comm, {0, 5 * 8, 9 * 8});
  banded->set_node_shard(shard);
  // Radius r: each band reads r rows of the other.
  EXPECT_EQ(banded->halo_exchange_nodes(), 2 * neighbourhood * 8);
  EXPECT_EQ(banded->halo_nodes(), neighbourhood * 8);

  expect_bands_match(comm, *whole, *banded, x, w, start, rows);
}

TEST(ModelParallelGnn, BandsMatchTheWholeModelRadius1) { expect_sharded_gnn_matches_whole(1, false); }
TEST(ModelParallelGnn, BandsMatchTheWholeModelRadius2Checkpointed) { expect_sharded_gnn_matches_whole(2, true); }

// GraphCast on a regular global grid of 12 x 16 cut into bands of 7 and 5 rows: the mesh (M2, 162
// nodes) split by the bands, each of the three graphs keeping its receivers' edges.
void expect_sharded_graphcast_matches_whole(bool checkpointing, int64_t edge_block) {
  auto comm = fixture::world_comm();
  const int rank = comm->rank();
  models::ModelShape shape;
  shape.in_channels = 3;
  shape.out_channels = 2;
  shape.lat = 12;
  shape.lon = 16;
  models::GraphCastOptions o;
  o.latent = 8;
  o.processor_layers = 2;
  o.mlp_layers = 2;
  o.mesh_refinement = 2;
  o.edge_block = edge_block;
  torch::manual_seed(12);  // the same weights and data on both ranks
  auto whole = std::make_shared<models::GraphCastImpl>(o, shape);
  auto banded = std::make_shared<models::GraphCastImpl>(o, shape);
  copy_weights(*whole, *banded);
  whole->set_checkpointing(checkpointing);
  banded->set_checkpointing(checkpointing);
  const torch::Tensor x = torch::randn({2, 3, 12, 16}), w = torch::randn({2, 2, 12, 16});
  const int64_t start = rank == 0 ? 0 : 7, rows = rank == 0 ? 7 : 5;
  const models::NodeShard shard = shard_over(comm, {0, 7 * 16, 12 * 16});
  banded->set_node_shard(shard);
  // Every mesh node has one owner, and both ranks own some of the mesh and read a halo of it.
  const auto owners = banded->mesh_owners(shard.bounds);
  const auto mine = static_cast<int64_t>(std::count(owners.begin(), owners.end(), rank));
  EXPECT_EQ(static_cast<int64_t>(banded->owned_mesh_nodes().size()), mine);
  EXPECT_GT(mine, 0);
  EXPECT_LT(mine, whole->graph().mesh_nodes);
  EXPECT_GT(banded->halo_exchange_nodes(), 0);
  EXPECT_GT(banded->encoder_exchange_nodes(), 0);
  EXPECT_GT(banded->decoder_exchange_nodes(), 0);
  EXPECT_EQ(banded->halo_node_width(), 8);
  // Four exchanges per forward: grid2mesh, two processor layers, mesh2grid (and four backward);
  // checkpointing replays each block's forward, fetching its halo again.
  const HaloStats before = halo_stats();
  expect_bands_match(comm, *whole, *banded, x, w, start, rows);
  const HaloStats after = halo_stats();
  EXPECT_EQ(after.exchanges - before.exchanges, checkpointing ? 8 : 4);
  EXPECT_EQ(after.backward_exchanges - before.backward_exchanges, 4);
}

TEST(ModelParallelGraphCast, BandsMatchTheWholeModel) { expect_sharded_graphcast_matches_whole(false, 0); }
TEST(ModelParallelGraphCast, BandsMatchTheWholeModelCheckpointedInEdgeBlocks) {
  expect_sharded_graphcast_matches_whole(true, 50);
}

// AIFS on a regular global grid of 16 x 24 (rows 12 degrees apart) cut into bands of 9 and 7 rows,
// hidden grid O4 (208 nodes) split by latitude, a processor window of 24 nodes (a partial window:
// each rank fetches 24 keys on the side of its neighbour), mapper chunks over the local edges.
void expect_sharded_aifs_matches_whole(bool checkpointing) {
  auto comm = fixture::world_comm();
  const int rank = comm->rank();
  models::ModelShape shape;
  shape.in_channels = 3;
  shape.out_channels = 2;
  shape.lat = 16;
  shape.lon = 24;
  models::AifsOptions o;
  o.num_channels = 16;
  o.num_heads = 2;
  o.mapper_num_heads = 2;
  o.mlp_hidden_ratio = 2;
  o.processor_layers = 2;
  o.hidden_grid = "o4";
  o.window_size = 24;
  o.cutoff_factor = 1.0;
  o.data_trainable = o.hidden_trainable = o.edge_trainable = 2;
  o.encoder_chunks = o.decoder_chunks = 2;
  torch::manual_seed(13);
  auto whole = std::make_shared<models::AifsImpl>(o, shape);
  auto banded = std::make_shared<models::AifsImpl>(o, shape);
  {
    // The learned features start at zero (anemoi's): make them count.
    torch::NoGradGuard no_grad;
    for (auto& p : whole->named_parameters())
      if (p.key().find("trainable") != std::string::npos) p.value().normal_();
  }
  copy_weights(*whole, *banded);
  whole->set_checkpointing(checkpointing);
  banded->set_checkpointing(checkpointing);
  const torch::Tensor x = torch::randn({2, 3, 16, 24}), w = torch::randn({2, 2, 16, 24});
  const int64_t start = rank == 0 ? 0 : 9, rows = rank == 0 ? 9 : 7;
  const models::NodeShard shard = shard_over(comm, {0, 9 * 24, 16 * 24});
  // The hidden nodes run north to south, as the bands: rank 0 the northern range. The sequence is
  // cut in half: O4's 4 northern rows (20 + 24 + 28 + 32 nodes) are rank 0's, while rank 0's band
  // reaches -6 degrees: its cells there decode from rank 1's hidden nodes at -10.6 degrees, which
  // encode from them: both mappers have halos.
  const auto owners = banded->hidden_owners(shard.bounds);
  EXPECT_EQ(std::count(owners.begin(), owners.end(), 0), 104);
  EXPECT_TRUE(std::is_sorted(owners.begin(), owners.end()));
  banded->set_node_shard(shard);
  // The window's exchange: 24 nodes each way.
  EXPECT_EQ(banded->halo_exchange_nodes(), 48);
  EXPECT_EQ(banded->halo_node_width(), 16);
  EXPECT_GT(banded->encoder_exchange_nodes(), 0);
  EXPECT_GT(banded->decoder_exchange_nodes(), 0);
  // Four exchanges forward (encoder, two layers, decoder); a checkpointed processor replays its
  // layers' two; the mappers fetch their halos before their checkpoints, which keep them. Three
  // backward: the encoder's exchanges the input, which needs no gradient here (it does in a
  // rollout's later steps).
  const HaloStats before = halo_stats();
  expect_bands_match(comm, *whole, *banded, x, w, start, rows);
  const HaloStats after = halo_stats();
  EXPECT_EQ(after.exchanges - before.exchanges, checkpointing ? 6 : 4);
  EXPECT_EQ(after.backward_exchanges - before.backward_exchanges, 3);
}

TEST(ModelParallelAifs, BandsMatchTheWholeModel) { expect_sharded_aifs_matches_whole(false); }
TEST(ModelParallelAifs, BandsMatchTheWholeModelCheckpointed) { expect_sharded_aifs_matches_whole(true); }

// On a point set the bands are ranges of cells, not whole rows: the 12 x 16 global grid's cells as a
// list (GraphCast) and the 16 x 24 grid's (AIFS), cut inside a row (cells [0, 100) and [100, 192);
// [0, 221) and [221, 384)).
models::ModelShape point_set_of(int64_t lat, int64_t lon) {
  models::ModelShape shape;
  shape.in_channels = 3;
  shape.out_channels = 2;
  shape.lat = 1;
  shape.lon = lat * lon;
  shape.point_set = true;
  const auto lats = models::global_latitudes(lat), lons = models::global_longitudes(lon);
  for (int64_t i = 0; i < lat; ++i)
    for (int64_t j = 0; j < lon; ++j) {
      shape.latitudes.push_back(lats[static_cast<size_t>(i)]);
      shape.longitudes.push_back(lons[static_cast<size_t>(j)]);
    }
  return shape;
}

template <typename Model, typename Options>
void expect_point_set_bands_match(const Options& o, const models::ModelShape& shape, int64_t cut, int seed) {
  auto comm = fixture::world_comm();
  const int rank = comm->rank();
  torch::manual_seed(seed);
  auto whole = std::make_shared<Model>(o, shape);
  auto banded = std::make_shared<Model>(o, shape);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : whole->named_parameters())
      if (p.key().find("trainable") != std::string::npos) p.value().normal_();
  }
  copy_weights(*whole, *banded);
  const int64_t cells = shape.lon;
  const torch::Tensor x = torch::randn({2, 3, 1, cells}), w = torch::randn({2, 2, 1, cells});
  const models::NodeShard shard = shard_over(comm, {0, cut, cells});
  banded->set_node_shard(shard);
  EXPECT_GT(banded->halo_exchange_nodes(), 0);
  expect_bands_match(comm, *whole, *banded, x, w, rank == 0 ? 0 : cut, rank == 0 ? cut : cells - cut, 3);
}

TEST(ModelParallelPointSet, GraphCastBandsOfCellsMatchTheWholeModel) {
  models::GraphCastOptions o;
  o.latent = 8;
  o.processor_layers = 2;
  o.mlp_layers = 2;
  o.mesh_refinement = 2;
  expect_point_set_bands_match<models::GraphCastImpl>(o, point_set_of(12, 16), 100, 14);
}

TEST(ModelParallelPointSet, AifsBandsOfCellsMatchTheWholeModel) {
  models::AifsOptions o;
  o.num_channels = 16;
  o.num_heads = o.mapper_num_heads = 2;
  o.mlp_hidden_ratio = 2;
  o.processor_layers = 2;
  o.hidden_grid = "o4";
  o.window_size = 24;
  o.cutoff_factor = 1.0;
  o.data_trainable = o.hidden_trainable = o.edge_trainable = 2;
  expect_point_set_bands_match<models::AifsImpl>(o, point_set_of(16, 24), 221, 15);
}

}  // namespace
