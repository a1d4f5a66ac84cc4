// Run under `mpirun -np 2`: every collective gives the exact expected values on every rank.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tests/distributed/mpi_test_env.h"

namespace wxtrain::distributed {
namespace {

using fixture::world_comm;

class Collectives : public ::testing::Test {
 protected:
  void SetUp() override {
    comm = world_comm();
    if (comm->size() != 2) GTEST_SKIP() << "needs mpirun -np 2";
    rank = comm->rank();
  }
  std::shared_ptr<Communicator> comm;
  int rank = 0;
};

TEST_F(Collectives, AllreduceSumsEveryDtypeExactly) {
  EXPECT_EQ(comm->backend(), "mpi");
  auto f32 = torch::arange(1000, torch::kFloat) + 1000.0 * rank;
  comm->allreduce(f32);
  EXPECT_TRUE(f32.equal(2 * torch::arange(1000, torch::kFloat) + 1000.0));

  auto f64 = torch::full({7}, 0.25 + rank, torch::kDouble);
  comm->allreduce(f64);
  EXPECT_TRUE(f64.equal(torch::full({7}, 1.5, torch::kDouble)));

  const int64_t big = int64_t{1} << 40;
  auto i64 = torch::full({5}, big + rank, torch::kLong);
  comm->allreduce(i64);
  EXPECT_TRUE(i64.equal(torch::full({5}, 2 * big + 1, torch::kLong)));

  // bf16: 1 + 2^-7 on both ranks; the fp32 sum 2 + 2^-6 is representable, so it comes back exact.
  auto bf16 = torch::full({300}, 1.0 + 1.0 / 128, torch::kBFloat16);
  bf16[0] = rank == 0 ? 3.0 : 1.0;
  bf16[1] = rank == 0 ? -0.5 : 0.25;
  comm->allreduce(bf16);
  EXPECT_EQ(bf16.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(bf16[0].item<float>(), 4.0f);
  EXPECT_EQ(bf16[1].item<float>(), -0.25f);
  EXPECT_TRUE(bf16.narrow(0, 2, 298).equal(torch::full({298}, 2.0 + 1.0 / 64, torch::kBFloat16)));

  comm->allreduce_mean(f64);
  EXPECT_TRUE(f64.equal(torch::full({7}, 1.5, torch::kDouble)));
}

TEST_F(Collectives, ReduceScatterEqualAndUnequalPieces) {
  auto input = torch::arange(4, torch::kFloat) + 10.0 * rank;  // sum: 10, 12, 14, 16
  auto piece = torch::zeros({2}, torch::kFloat);
  comm->reduce_scatter(input, piece);
  EXPECT_TRUE(piece.equal(rank == 0 ? torch::tensor({10.f, 12.f}) : torch::tensor({14.f, 16.f})));

  auto uneven = torch::zeros({rank == 0 ? 3 : 1}, torch::kFloat);
  comm->reduce_scatter(input, uneven, {3, 1});
  EXPECT_TRUE(uneven.equal(rank == 0 ? torch::tensor({10.f, 12.f, 14.f}) : torch::tensor({16.f})));

  auto bf16_in = torch::full({4}, 0.5 + rank, torch::kBFloat16);
  auto bf16_out = torch::zeros({2}, torch::kBFloat16);
  comm->reduce_scatter(bf16_in, bf16_out);
  EXPECT_TRUE(bf16_out.equal(torch::full({2}, 2.0, torch::kBFloat16)));

  auto ints = torch::full({6}, int64_t{3} + rank, torch::kLong);
  auto int_piece = torch::zeros({3}, torch::kLong);
  comm->reduce_scatter(ints, int_piece);
  EXPECT_TRUE(int_piece.equal(torch::full({3}, int64_t{7}, torch::kLong)));
}

TEST_F(Collectives, AllgatherOutOfPlaceInPlaceAndUneven) {
  auto mine = torch::full({3}, rank + 1.0, torch::kFloat);
  auto all = torch::zeros({6}, torch::kFloat);
  comm->allgather(mine, all);
  EXPECT_TRUE(all.equal(torch::tensor({1.f, 1.f, 1.f, 2.f, 2.f, 2.f})));

  auto flat = torch::zeros({6}, torch::kBFloat16);
  flat.narrow(0, 3 * rank, 3).fill_(rank + 5.0);
  comm->allgather(flat.narrow(0, 3 * rank, 3), flat);  // in place
  EXPECT_TRUE(flat.equal(torch::tensor({5.f, 5.f, 5.f, 6.f, 6.f, 6.f}).to(torch::kBFloat16)));

  auto uneven_in = torch::full({rank == 0 ? 1 : 4}, int64_t{rank + 1}, torch::kLong);
  auto uneven_out = torch::zeros({5}, torch::kLong);
  comm->allgather(uneven_in, uneven_out, {1, 4});
  EXPECT_TRUE(uneven_out.equal(torch::tensor({1, 2, 2, 2, 2}, torch::kLong)));
}

TEST_F(Collectives, BroadcastBarrierAndScalarAgreement) {
  auto t = torch::full({4}, 10.0 * rank, torch::kDouble);
  comm->broadcast(t, 1);
  EXPECT_TRUE(t.equal(torch::full({4}, 10.0, torch::kDouble)));
  comm->barrier();
  EXPECT_TRUE(comm->any(rank == 1));
  EXPECT_FALSE(comm->any(false));
  EXPECT_EQ(comm->max(rank * 2.5), 2.5);
  EXPECT_EQ(comm->sum(rank + 1.0), 3.0);
}

TEST_F(Collectives, AsyncHandlesCompleteInAnyWaitOrder) {
  std::vector<torch::Tensor> tensors;
  std::vector<WorkHandle> works;
  for (int i = 0; i < 4; ++i) {
    tensors.push_back(torch::full({1 << 16}, float(i + rank), torch::kFloat));
    works.push_back(comm->allreduce_async(tensors.back()));
  }
  for (int i = 3; i >= 0; --i) works[i]->wait();
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(works[i]->completed());
    EXPECT_TRUE(tensors[i].equal(torch::full({1 << 16}, float(2 * i + 1), torch::kFloat)));
  }
}

TEST_F(Collectives, WrongArgumentsAreErrorsBeforeAnyCommunication) {
  const CommStats before = comm->stats();
  EXPECT_THROW(comm->allreduce(torch::zeros({4, 4}).t()), Error);
  EXPECT_THROW(comm->allreduce(torch::zeros({4}, torch::kBool)), Error);
  EXPECT_THROW(comm->reduce_scatter(torch::zeros({5}), torch::zeros({2})), Error);
  EXPECT_THROW(comm->broadcast(torch::zeros({2}), 2), Error);
  EXPECT_EQ(comm->stats().collectives, before.collectives);
}

}  // namespace
}  // namespace wxtrain::distributed
