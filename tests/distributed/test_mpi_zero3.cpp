// Run under `mpirun -np 2`: ZeRO-3 (ZeroDataParallel at stage 3, distributed/sharded_parameters.h)
// on the fixture's model with each Linear layer as a block run through the block runner, as a
// zoo model's run_block does: it trains exactly like one process with the whole batch (torch::optim)
// and like ZeRO-0, keeps only a shard of each block between uses, gathers what it says it does,
// and its checkpoint state is ZeRO-0's.
#include <gtest/gtest.h>

#include <limits>
#include <memory>

#include "tests/distributed/mpi_test_env.h"
#include "tests/distributed/training_fixture.h"

namespace wxtrain::distributed {
namespace {

using namespace fixture;

constexpr int64_t kBatch = 16;
constexpr double kLr = 1e-2, kDecay = 0.05, kBiasScale = 0.5, kMaxNorm = 0.5, kTinyBuckets = 0.002;

std::vector<std::shared_ptr<torch::nn::LinearImpl>> linears(torch::nn::Sequential& model) {
  std::vector<std::shared_ptr<torch::nn::LinearImpl>> out;
  for (size_t i = 0; i < model->size(); ++i) {
    if (auto l = std::dynamic_pointer_cast<torch::nn::LinearImpl>(model->ptr(i))) out.push_back(l);
  }
  return out;
}

std::vector<std::vector<torch::Tensor>> blocks_of(torch::nn::Sequential& model) {
  std::vector<std::vector<torch::Tensor>> blocks;
  for (auto& l : linears(model)) blocks.push_back(l->parameters());
  return blocks;
}

// The fixture's forward (Linear, Tanh, Linear, Tanh, Linear) with each Linear run as a block.
torch::Tensor forward(torch::nn::Sequential& model, BlockRunner& runner, torch::Tensor x) {
  auto layers = linears(model);
  for (size_t b = 0; b < layers.size(); ++b) {
    auto layer = layers[b];
    x = runner.run_block(b, [layer](const std::vector<torch::Tensor>& in) { return std::vector<torch::Tensor>{layer->forward(in[0])}; },
                         {x})[0];
    if (b + 1 < layers.size()) x = torch::tanh(x);
  }
  return x;
}

bool zero3_step(torch::nn::Sequential& model, ZeroDataParallel& dp, int step, int rank, int micro) {
  dp.zero_grad();
  auto [x, y] = make_batch(step, kBatch);
  const int64_t per_rank = kBatch / 2, per_micro = per_rank / micro;
  for (int k = 0; k < micro; ++k) {
    dp.prepare_backward(k == micro - 1);
    const int64_t begin = rank * per_rank + k * per_micro;
    (forward(model, *dp.block_runner(), x.narrow(0, begin, per_micro)) - y.narrow(0, begin, per_micro))
        .pow(2)
        .mean()
        .backward();
  }
  const bool finite = dp.finish_backward(1.0 / micro);
  dp.clip_grad_norm(kMaxNorm);
  dp.step(kLr);
  return finite;
}

class Zero3 : public ::testing::Test {
 protected:
  void SetUp() override {
    comm = world_comm();
    if (comm->size() != 2) GTEST_SKIP() << "needs mpirun -np 2";
    rank = comm->rank();
  }
  // Every rank starts from another initialisation; broadcast_parameters() must fix that.
  std::unique_ptr<ZeroDataParallel> trained(torch::nn::Sequential& model, int stage, int micro, int steps,
                                            const OptimizerOptions& o = {}) {
    model = make_model(100 + rank);
    auto dp = std::make_unique<ZeroDataParallel>(comm, make_groups(model, kDecay, kBiasScale), o, stage, kTinyBuckets,
                                                 blocks_of(model));
    dp->broadcast_parameters();
    for (int step = 0; step < steps; ++step) {
      if (stage == 3) {
        EXPECT_TRUE(zero3_step(model, *dp, step, rank, micro));
      } else {
        EXPECT_TRUE(dp_step(model, *dp, step, kBatch, rank, 2, micro, kMaxNorm, kLr));
      }
    }
    return dp;
  }
  // The parameters' values: under ZeRO-3 gathered whole for the reading.
  torch::Tensor values(torch::nn::Sequential& model, ZeroDataParallel& dp) {
    auto whole = dp.gather_full_parameters();
    return flat_params(model);
  }
  std::shared_ptr<Communicator> comm;
  int rank = 0;
};

TEST_F(Zero3, TrainsLikeOneProcessWithTheWholeBatchAndLikeZero0) {
  OptimizerOptions sgd;
  sgd.kind = "sgd";
  sgd.momentum = 0.9;
  for (const OptimizerOptions& o : {OptimizerOptions{}, sgd}) {
    auto ref = make_model(100);
    auto opt = make_reference(ref, o, kLr, kDecay, kBiasScale);
    for (int step = 0; step < 10; ++step) reference_step(ref, *opt, step, kBatch, kMaxNorm);
    torch::nn::Sequential zero0_model;
    auto zero0 = trained(zero0_model, 0, 1, 10, o);
    for (int micro : {1, 2}) {
      SCOPED_TRACE(o.kind + ", micro-steps " + std::to_string(micro));
      torch::nn::Sequential model;
      auto dp = trained(model, 3, micro, 10, o);
      EXPECT_EQ(dp->stage(), 3);
      const torch::Tensor got = values(model, *dp);
      EXPECT_LT(max_abs_diff(got, flat_params(ref)), 1e-5);
      EXPECT_LT(max_abs_diff(got, values(zero0_model, *zero0)), 1e-6) << "differs from ZeRO-0";
      auto root = got.clone();
      comm->broadcast(root, 0);
      EXPECT_TRUE(root.equal(got)) << "rank " << rank << " differs from rank 0";
    }
    EXPECT_GT(max_abs_diff(flat_params(ref), flat_params(make_model(100))), 1e-2);  // the run did move
  }
}

TEST_F(Zero3, KeepsAShardOfEachBlockAndGathersEachBlockOncePerPass) {
  torch::nn::Sequential model;
  auto dp = trained(model, 3, 1, 2);
  const ShardedParameters& store = *dp->sharded_parameters();
  // Between steps no block is whole: the parameters keep their shapes, their storage is gone.
  for (const auto& p : model->parameters()) {
    EXPECT_EQ(p.storage().nbytes(), 0u) << p.sizes();
    EXPECT_GT(p.numel(), 0);
  }
  // 1476 parameters: each rank keeps half of each block's (a unit of weights and one of biases
  // per block, all of even sizes, so no padding).
  int64_t shard_elements = 0, block_bytes = 0;
  for (const FlatGroup& u : store.units()) {
    EXPECT_EQ(u.shard.numel() * 2, u.layout.padded);
    shard_elements += u.shard.numel();
    block_bytes += static_cast<int64_t>(u.layout.padded) * 4;
  }
  EXPECT_EQ(shard_elements, 1476 / 2);
  // A step gathers every block for its forward and again for its backward, except the last, still
  // whole when backward starts: 2 x all blocks - the last block (Linear(32, 4): 132 parameters).
  const GatherStats before = store.stats();
  const CommStats comm_before = comm->stats();
  EXPECT_TRUE(zero3_step(model, *dp, 2, rank, 1));
  const int64_t gathered = store.stats().gathered_bytes - before.gathered_bytes;
  EXPECT_EQ(gathered, 2 * block_bytes - 132 * 4);
  // ... and that is all the communicator all-gathered (no parameter lies outside the blocks);
  // what it reduce-scattered is the gradients once: every block's, whole.
  EXPECT_EQ(comm->stats().allgather_bytes - comm_before.allgather_bytes, gathered);
  EXPECT_EQ(comm->stats().reduce_scatter_bytes - comm_before.reduce_scatter_bytes, 1476 * 4);
  // Prefetching holds the running block and the next one, never more: the two largest blocks
  // (Linear(32, 32): 1056 and Linear(8, 32): 288 parameters) at most, and more than one block.
  EXPECT_LE(store.stats().peak_gathered_bytes, (1056 + 288) * 4);
  EXPECT_GT(store.stats().peak_gathered_bytes, 1056 * 4);
  EXPECT_EQ(store.largest_block_bytes(), 1056 * 4);
}

TEST_F(Zero3, NonFiniteGradientOnOneRankIsSeenByAll) {
  // The loss scaler's verdict comes from the sharded gradients: each rank checks its own shards,
  // and an inf that only rank 1's half of the batch produced must still skip the step on both.
  auto model = make_model(4);
  ZeroDataParallel dp(comm, make_groups(model, 0.0), OptimizerOptions{}, 3, kTinyBuckets, blocks_of(model));
  dp.broadcast_parameters();
  auto [x, y] = make_batch(0, 8);
  dp.zero_grad();
  dp.prepare_backward(true);
  const double poison = rank == 1 ? std::numeric_limits<double>::infinity() : 1.0;
  ((forward(model, *dp.block_runner(), x) - y).pow(2).mean() * poison).backward();
  EXPECT_FALSE(dp.finish_backward(1.0));
}

TEST_F(Zero3, CheckpointStateIsZero0sAndContinuesInOneProcess) {
  torch::nn::Sequential model3, model0;
  auto dp3 = trained(model3, 3, 1, 5);
  auto dp0 = trained(model0, 0, 1, 5);
  const auto state3 = dp3->optimizer_state(), state0 = dp0->optimizer_state();
  ASSERT_EQ(state3.size(), state0.size());
  for (const auto& [key, t] : state0) {
    ASSERT_TRUE(state3.count(key)) << key;
    EXPECT_EQ(state3.at(key).sizes(), t.sizes()) << key;
    EXPECT_LT(max_abs_diff(state3.at(key), t), 1e-6) << key;
  }
  const torch::Tensor saved = values(model3, *dp3);
  // ZeRO-3 resumes from ZeRO-0's state: step 6 on both sides agrees.
  torch::nn::Sequential resumed_model = make_model(7 + rank);
  set_params(resumed_model, saved);
  ZeroDataParallel resumed(comm, make_groups(resumed_model, kDecay, kBiasScale), OptimizerOptions{}, 3, kTinyBuckets,
                           blocks_of(resumed_model));
  resumed.load_optimizer_state(state0);
  EXPECT_TRUE(zero3_step(resumed_model, resumed, 5, rank, 1));
  EXPECT_TRUE(dp_step(model0, *dp0, 5, kBatch, rank, 2, 1, kMaxNorm, kLr));
  EXPECT_LT(max_abs_diff(values(resumed_model, resumed), flat_params(model0)), 1e-6);
  // A wrong-sized state names its key.
  auto broken = state0;
  broken["group0.exp_avg"] = torch::zeros({7});
  try {
    resumed.load_optimizer_state(broken);
    ADD_FAILURE() << "a state of the wrong size was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("group0.exp_avg"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wxtrain::distributed
