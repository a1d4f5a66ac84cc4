// Run under `mpirun -np 2` (trainer.ensemble_group_mpi_np2): the pieces of an ensemble group
// (distributed.ensemble_group) against one process holding every member — the split communicator,
// the differentiable gather of the members, and the afCRPS gradient each rank gets for its own
// members. The end-to-end check (two ranks training the weights of one process) is
// test_ensemble_group_train.cpp.
#include <gtest/gtest.h>

#include "core/error.h"
#include "distributed/autograd_gather.h"
#include "tests/distributed/mpi_test_env.h"
#include "trainer/training_step.h"

namespace wxtrain::trainer {
namespace {

using distributed::fixture::world_comm;

class EnsembleGroup : public ::testing::Test {
 protected:
  void SetUp() override {
    comm = world_comm();
    if (comm->size() != 2) GTEST_SKIP() << "needs mpirun -np 2";
    rank = comm->rank();
  }
  std::shared_ptr<distributed::Communicator> comm;
  int rank = 0;
};

TEST_F(EnsembleGroup, SplitGivesTheGroupsOfConsecutiveRanks) {
  // One group of both ranks, ordered by key.
  auto both = comm->split(0, rank);
  EXPECT_EQ(both->size(), 2);
  EXPECT_EQ(both->rank(), rank);
  auto x = torch::full({3}, static_cast<float>(rank + 1));
  both->allreduce(x);
  EXPECT_TRUE(x.equal(torch::full({3}, 3.0f)));
  // Two groups of one: collectives stay within each.
  auto alone = comm->split(rank, 0);
  EXPECT_EQ(alone->size(), 1);
  EXPECT_EQ(alone->rank(), 0);
  auto y = torch::full({3}, static_cast<float>(rank + 1));
  alone->allreduce(y);
  EXPECT_TRUE(y.equal(torch::full({3}, static_cast<float>(rank + 1))));
  // The world of one splits into itself.
  EXPECT_EQ(distributed::LocalCommunicator().split(5, 0)->size(), 1);
}

TEST_F(EnsembleGroup, AllgatherRowsBackwardGivesEachRankItsOwnRows) {
  auto group = comm->split(0, rank);
  auto x = (torch::arange(6, torch::kDouble).view({3, 2}) + 10.0 * rank).requires_grad_();
  auto gathered = distributed::allgather_rows(group, x);
  ASSERT_EQ(gathered.sizes(), (std::vector<int64_t>{6, 2}));
  EXPECT_TRUE(gathered.detach().narrow(0, 3 * rank, 3).equal(x.detach()));
  // Every rank computes the same function of the gathered rows; its own rows' gradient comes back.
  auto weights = torch::arange(12, torch::kDouble).view({6, 2});
  (gathered * weights).sum().backward();
  EXPECT_TRUE(x.grad().equal(weights.narrow(0, 3 * rank, 3)));
}

// A TrainingState with what training_loss and gather_members read (no model, no optimizer).
std::unique_ptr<TrainingState> loss_state(int64_t members, int64_t group, int group_rank,
                                          std::shared_ptr<distributed::Communicator> group_comm, int64_t lat) {
  auto state = std::make_unique<TrainingState>();
  state->ensemble.members = members;
  state->ensemble.crps_alpha = 0.95;
  state->ensemble.group = group;
  state->ensemble.group_rank = group_rank;
  state->group_comm = std::move(group_comm);
  state->lat_weights = torch::linspace(0.5, 1.5, lat, torch::kFloat32);
  return state;
}

TEST_F(EnsembleGroup, GatheredAfcrpsGradientOfEachRanksMembersIsTheSingleProcessSlice) {
  // B = 3 samples of M = 4 members, 2 rollout steps of 3 channels on a 4 x 5 grid. Both ranks build
  // the same full ensemble (same seed); rank r holds members 2r, 2r + 1 of each sample.
  constexpr int64_t B = 3, M = 4, G = 2, m = M / G, S = 2, C = 3, H = 4, W = 5;
  torch::manual_seed(11);
  const torch::Tensor full = torch::randn({B * M, S, C, H, W});  // sample-major: row b * M + j
  const torch::Tensor target = torch::randn({B, S, C, H, W});
  const torch::Tensor scale = torch::tensor(1.7f);  // a "parameter" every member depends on

  // One process holding all four members.
  auto single = loss_state(M, 1, 0, nullptr, H);
  torch::Tensor full_leaf = full.clone().requires_grad_();
  torch::Tensor w_single = scale.clone().requires_grad_();
  torch::Tensor loss_single = training_loss(*single, full_leaf * w_single, target);
  loss_single.backward();

  // This rank's two members of each sample, gathered over the group of both ranks.
  auto group_comm = comm->split(0, rank);
  auto grouped = loss_state(M, G, rank, group_comm, H);
  torch::Tensor mine = full.view({B, G, m, S, C, H, W}).select(1, rank).reshape({B * m, S, C, H, W});
  torch::Tensor mine_leaf = mine.clone().requires_grad_();
  torch::Tensor w_rank = scale.clone().requires_grad_();
  const torch::Tensor gathered = gather_members(*grouped, mine_leaf * w_rank);
  ASSERT_EQ(gathered.sizes(), full.sizes());
  EXPECT_TRUE(gathered.detach().equal((full * scale).detach())) << "members out of place after the gather";
  torch::Tensor loss_rank = training_loss(*grouped, gathered, target);
  EXPECT_EQ(loss_rank.item<float>(), loss_single.item<float>());  // the same values, the same sum
  loss_rank.backward();

  // Each rank's members get exactly the single process's gradient of those members.
  const torch::Tensor expected =
      full_leaf.grad().view({B, G, m, S, C, H, W}).select(1, rank).reshape({B * m, S, C, H, W});
  EXPECT_TRUE(mine_leaf.grad().equal(expected)) << "max difference "
                                                << (mine_leaf.grad() - expected).abs().max().item<float>();
  // A parameter's gradient on one rank is its members' part only: summed over the group it is the
  // single process's (fp32 sums in another order: round-off only).
  torch::Tensor w_grad = w_rank.grad().clone().view({1});
  EXPECT_GT(std::abs(w_grad.item<float>() - w_single.grad().item<float>()), 1e-4)
      << "one rank's part already equals the whole: the test cannot tell a sum from a copy";
  group_comm->allreduce(w_grad);
  EXPECT_NEAR(w_grad.item<float>(), w_single.grad().item<float>(), 1e-5 * std::abs(w_single.grad().item<float>()) + 1e-6);
}

TEST_F(EnsembleGroup, WithoutAGroupTheMembersAreReturnedAsTheyAre) {
  auto state = loss_state(4, 1, 0, nullptr, 4);
  const torch::Tensor x = torch::randn({8, 2, 3, 4, 5});
  EXPECT_TRUE(gather_members(*state, x).is_same(x));
}

TEST_F(EnsembleGroup, LayoutOfGroupsAndTheIndivisibleWorld) {
  const EnsembleLayout l = ensemble_layout(3, 4, 2);
  EXPECT_EQ(l.group, 1);
  EXPECT_EQ(l.groups, 2);
  EXPECT_EQ(l.group_rank, 1);
  EXPECT_EQ(ensemble_layout(1, 2, 1).group, 1);
  try {
    ensemble_layout(0, 2, 4);
    ADD_FAILURE() << "a group of 4 on 2 ranks was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("distributed.ensemble_group = 4 does not divide the world of 2"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace wxtrain::trainer
