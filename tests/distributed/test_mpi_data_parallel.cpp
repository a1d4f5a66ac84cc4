// Run under `mpirun -np 2`: ZeroDataParallel on two ranks trains exactly like one process with the
// whole batch (checked against torch::optim), in every ZeRO stage, and shards what it says it does.
#include <gtest/gtest.h>

#include "core/memory_meter.h"
#include "tests/distributed/mpi_test_env.h"
#include "tests/distributed/training_fixture.h"

namespace wxtrain::distributed {
namespace {

using namespace fixture;

constexpr int64_t kBatch = 16;   // global batch: 8 per rank
constexpr double kLr = 1e-2, kDecay = 0.05, kBiasScale = 0.5, kMaxNorm = 0.5;
constexpr double kTinyBuckets = 0.002;  // MiB: ~2 KiB, several buckets for this model

class TwoRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    comm = world_comm();
    if (comm->size() != 2) GTEST_SKIP() << "needs mpirun -np 2";
    rank = comm->rank();
  }
  // Every rank starts from a different initialisation; broadcast_parameters() must fix that.
  torch::nn::Sequential trained(int stage, int micro, int steps, std::unique_ptr<ZeroDataParallel>* keep = nullptr,
                                torch::nn::Sequential* keep_model = nullptr, const OptimizerOptions& o = {}) {
    auto model = make_model(100 + rank);
    auto dp = std::make_unique<ZeroDataParallel>(comm, make_groups(model, kDecay, kBiasScale), o, stage, kTinyBuckets);
    dp->broadcast_parameters();
    for (int step = 0; step < steps; ++step) EXPECT_TRUE(dp_step(model, *dp, step, kBatch, rank, 2, micro, kMaxNorm, kLr));
    if (keep) *keep = std::move(dp);
    if (keep_model) *keep_model = model;
    return model;
  }
  torch::nn::Sequential reference(int steps, const OptimizerOptions& o = {}) {
    auto model = make_model(100);
    auto opt = make_reference(model, o, kLr, kDecay, kBiasScale);
    for (int step = 0; step < steps; ++step) reference_step(model, *opt, step, kBatch, kMaxNorm);
    return model;
  }
  // Both ranks hold the same values.
  void expect_same_on_all_ranks(const torch::Tensor& t) {
    auto root = t.clone();
    comm->broadcast(root, 0);
    EXPECT_TRUE(root.equal(t)) << "rank " << rank << " differs from rank 0";
  }
  std::shared_ptr<Communicator> comm;
  int rank = 0;
};

// AdamW is what the brief asks for; SGD with momentum is there because Adam is blind to a constant
// factor in the gradient, so only SGD would notice a wrong average.
TEST_F(TwoRanks, EveryStageMatchesOneProcessWithTheWholeBatch) {
  OptimizerOptions sgd;
  sgd.kind = "sgd";
  sgd.momentum = 0.9;
  for (const OptimizerOptions& o : {OptimizerOptions{}, sgd}) {
    const torch::Tensor expected = flat_params(reference(10, o));
    torch::Tensor ddp;
    for (int stage : {0, 1, 2}) {
      for (int micro : {1, 2}) {
        SCOPED_TRACE(o.kind + ", zero_stage " + std::to_string(stage) + ", micro-steps " + std::to_string(micro));
        const torch::Tensor got = flat_params(trained(stage, micro, 10, nullptr, nullptr, o));
        EXPECT_LT(max_abs_diff(got, expected), 1e-5);
        expect_same_on_all_ranks(got);
        if (stage == 0 && micro == 1) ddp = got;
        EXPECT_LT(max_abs_diff(got, ddp), 1e-6) << "differs from DDP";
      }
    }
    EXPECT_GT(max_abs_diff(expected, flat_params(make_model(100))), 1e-2);  // the run did move
  }
}

TEST_F(TwoRanks, BucketsAreReducedDuringBackward) {
  for (int stage : {0, 2}) {
    std::unique_ptr<ZeroDataParallel> dp;
    trained(stage, 1, 1, &dp);
    EXPECT_GT(dp->bucket_count(), 2);
    EXPECT_EQ(dp->last_backward().buckets, dp->bucket_count());
    // All but the bucket holding the first layer's weights complete inside backward.
    EXPECT_GE(dp->last_backward().issued_during_backward, dp->bucket_count() - 1);
  }
}

TEST_F(TwoRanks, NoCommunicationWithoutSync) {
  auto model = make_model(3);
  ZeroDataParallel dp(comm, make_groups(model, kDecay), OptimizerOptions{}, 2, kTinyBuckets);
  auto [x, y] = make_batch(0, 8);
  dp.zero_grad();
  const CommStats before = comm->stats();
  dp.prepare_backward(false);
  loss_of(model, x, y).backward();
  dp.prepare_backward(false);
  loss_of(model, x, y).backward();
  EXPECT_EQ(comm->stats().collectives, before.collectives);
  EXPECT_EQ(comm->stats().bytes, before.bytes);
  dp.prepare_backward(true);
  loss_of(model, x, y).backward();
  EXPECT_TRUE(dp.finish_backward(1.0 / 3));
  EXPECT_GE(comm->stats().collectives - before.collectives, dp.bucket_count());
}

TEST_F(TwoRanks, NonFiniteGradientOnOneRankIsSeenByAll) {
  for (int stage : {0, 2}) {
    auto model = make_model(4);
    ZeroDataParallel dp(comm, make_groups(model, 0.0), OptimizerOptions{}, stage, kTinyBuckets);
    auto [x, y] = make_batch(0, 8);
    dp.zero_grad();
    dp.prepare_backward(true);
    const double poison = rank == 1 ? std::numeric_limits<double>::infinity() : 1.0;
    (loss_of(model, x, y) * poison).backward();
    EXPECT_FALSE(dp.finish_backward(1.0)) << "zero_stage " << stage;
  }
}

TEST_F(TwoRanks, ShardingHalvesOptimizerAndGradientMemory) {
  auto& meter = memory_meter(torch::kCPU);
  auto measure = [&](std::shared_ptr<Communicator> c, int stage, int64_t* grown) {
    auto model = make_model(5);
    auto groups = make_groups(model, 0.0);
    const int64_t before = meter.snapshot().allocated;
    auto dp = std::make_unique<ZeroDataParallel>(c, groups, OptimizerOptions{}, stage, 25.0);
    *grown = meter.snapshot().allocated - before;
    return dp;
  };
  int64_t grown_one = 0, grown_zero1 = 0, grown_zero2 = 0;
  auto one = measure(std::make_shared<LocalCommunicator>(), 0, &grown_one);
  auto zero1 = measure(comm, 1, &grown_zero1);
  auto zero2 = measure(comm, 2, &grown_zero2);
  // 1476 parameters in two groups of even size: the halves are exact.
  EXPECT_EQ(one->optimizer_state_bytes(), 2 * 1476 * 4);
  EXPECT_EQ(zero1->optimizer_state_bytes() * 2, one->optimizer_state_bytes());
  EXPECT_EQ(zero2->optimizer_state_bytes() * 2, one->optimizer_state_bytes());
  EXPECT_EQ(zero1->gradient_bytes(), one->gradient_bytes());
  EXPECT_EQ(zero2->gradient_bytes() * 2, one->gradient_bytes());
  // The counting allocator agrees: what each ZeroDataParallel added is its gradients and its state.
  EXPECT_NEAR(double(grown_one), double(one->gradient_bytes() + one->optimizer_state_bytes()), 512.0);
  EXPECT_NEAR(double(grown_zero1), double(zero1->gradient_bytes() + zero1->optimizer_state_bytes()), 512.0);
  EXPECT_NEAR(double(grown_zero2), double(zero2->gradient_bytes() + zero2->optimizer_state_bytes()), 512.0);
  EXPECT_LT(double(grown_zero2), 0.55 * double(grown_one));
}

TEST_F(TwoRanks, StateFromTwoRanksContinuesInOneProcess) {
  for (int stage : {0, 2}) {
    SCOPED_TRACE("saved from zero_stage " + std::to_string(stage));
    std::unique_ptr<ZeroDataParallel> dp;
    torch::nn::Sequential model;
    trained(stage, 1, 5, &dp, &model);
    const torch::Tensor saved_params = flat_params(model);
    const auto state = dp->optimizer_state();
    EXPECT_EQ(state.at("step").item<int64_t>(), 5);
    EXPECT_EQ(state.at("group0.exp_avg").numel(), 1408);
    for (const auto& item : state) expect_same_on_all_ranks(item.second);
    dp_step(model, *dp, 5, kBatch, rank, 2, 1, kMaxNorm, kLr);  // step 6 on two ranks

    auto single = make_model(7);
    set_params(single, saved_params);
    ZeroDataParallel resumed(std::make_shared<LocalCommunicator>(), make_groups(single, kDecay, kBiasScale),
                             OptimizerOptions{}, 0, 25.0);
    resumed.load_optimizer_state(state);
    dp_step(single, resumed, 5, kBatch, 0, 1, 1, kMaxNorm, kLr);  // step 6 in one process
    EXPECT_LT(max_abs_diff(flat_params(single), flat_params(model)), 1e-6);
    EXPECT_LT(max_abs_diff(flat_params(single), flat_params(reference(6))), 1e-5);
  }
}

}  // namespace
}  // namespace wxtrain::distributed
