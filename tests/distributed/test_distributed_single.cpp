// The world of one: what `wxtrain train` does without mpirun. ZeroDataParallel must be exactly a
// torch.optim optimizer here, and the factories must explain a backend this build lacks.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/memory_meter.h"
#include "distributed/communicator.h"
#include "distributed/zero_data_parallel.h"
#include "distributed/nccl/nccl_communicator.h"
#include "distributed/shard_layout.h"
#include "distributed/world.h"
#include "tests/distributed/training_fixture.h"

namespace wxtrain::distributed {
namespace {

using namespace fixture;

std::shared_ptr<Communicator> local() { return std::make_shared<LocalCommunicator>(); }

TEST(World, WithoutLauncherIsAWorldOfOne) {
  const World world = init_world();
  EXPECT_EQ(world.size, 1);
  EXPECT_EQ(world.rank, 0);
  EXPECT_FALSE(world.mpi);
  EXPECT_EQ(make_communicator(world, DistributedConfig{}, torch::kCPU)->backend(), "local");
}

TEST(World, CudaWithoutNcclBuildSaysSo) {
  DistributedConfig config;
  if (nccl_available()) {
    // A CUDA build: a world of one needs no collectives, whatever the device.
    EXPECT_EQ(make_communicator(init_world(), config, torch::Device(torch::kCUDA, 0))->backend(), "local");
  } else {
    try {
      make_communicator(init_world(), config, torch::Device(torch::kCUDA, 0));
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("LibTorch without CUDA, so without NCCL"), std::string::npos) << e.what();
    }
  }
  config.backend = "gloo";
  try {
    make_communicator(init_world(), config, torch::kCPU);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("\"gloo\": expected auto, mpi or nccl"), std::string::npos) << e.what();
  }
}

TEST(LocalCommunicator, CollectivesAreIdentities) {
  LocalCommunicator comm;
  auto t = torch::arange(6, torch::kFloat);
  comm.allreduce(t);
  EXPECT_TRUE(t.equal(torch::arange(6, torch::kFloat)));
  auto out = torch::zeros({6}, torch::kFloat);
  comm.allgather(t, out);
  EXPECT_TRUE(out.equal(t));
  auto piece = torch::zeros({6}, torch::kFloat);
  comm.reduce_scatter(t, piece);
  EXPECT_TRUE(piece.equal(t));
  EXPECT_TRUE(comm.any(true));
  EXPECT_FALSE(comm.any(false));
  EXPECT_EQ(comm.max(2.5), 2.5);
  EXPECT_THROW(comm.allreduce(torch::zeros({4, 4}).t()), Error);  // not contiguous
  EXPECT_EQ(comm.stats().collectives, 0);
}

struct OptimizerCase {
  const char* kind;
  double momentum;
  double weight_decay;
  double max_norm;
};

class MatchesTorchOptim : public ::testing::TestWithParam<OptimizerCase> {};

TEST_P(MatchesTorchOptim, TenSteps) {
  const OptimizerCase c = GetParam();
  OptimizerOptions o;
  o.kind = c.kind;
  o.momentum = c.momentum;
  const double lr = 1e-2, bias_scale = 0.5;
  auto reference = make_model(7);
  auto opt = make_reference(reference, o, lr, c.weight_decay, bias_scale);
  auto model = make_model(7);
  ZeroDataParallel dp(local(), make_groups(model, c.weight_decay, bias_scale), o, /*zero_stage=*/0, 25.0);
  for (int step = 0; step < 10; ++step) {
    reference_step(reference, *opt, step, 16, c.max_norm);
    EXPECT_TRUE(dp_step(model, dp, step, 16, 0, 1, 1, c.max_norm, lr));
  }
  EXPECT_LT(max_abs_diff(flat_params(model), flat_params(reference)), 1e-5);
  EXPECT_GT(max_abs_diff(flat_params(model), flat_params(make_model(7))), 1e-3);  // it did train
}

INSTANTIATE_TEST_SUITE_P(Optimizers, MatchesTorchOptim,
                         ::testing::Values(OptimizerCase{"adamw", 0, 0.1, 0.5}, OptimizerCase{"adam", 0, 0.01, 0},
                                           OptimizerCase{"sgd", 0.9, 0.01, 0.5}, OptimizerCase{"sgd", 0, 0, 0}),
                         [](const ::testing::TestParamInfo<OptimizerCase>& info) {
                           return std::string(info.param.kind) + (info.param.momentum > 0 ? "_momentum" : "") +
                                  (info.param.max_norm > 0 ? "_clipped" : "");
                         });

TEST(ZeroDataParallel, ParametersAndGradientsAreViewsOfFlatBuffers) {
  auto model = make_model(1);
  ZeroDataParallel dp(local(), make_groups(model, 0.0), OptimizerOptions{}, 0, 25.0);
  auto params = model->parameters();
  // Weights of the first group sit back to back in one buffer.
  const auto* w0 = static_cast<const char*>(params[0].data_ptr());
  const auto* w1 = static_cast<const char*>(params[2].data_ptr());
  EXPECT_EQ(w1 - w0, params[0].nbytes());
  const void* grad_before = params[0].grad().data_ptr();
  dp_step(model, dp, 0, 8, 0, 1, 2, 0, 1e-3);
  EXPECT_EQ(params[0].grad().data_ptr(), grad_before);  // accumulated in place, two micro-steps
}

TEST(ZeroDataParallel, GroupWithZeroLrScaleStaysPut) {
  auto model = make_model(2);
  const torch::Tensor bias_before = model->parameters()[1].detach().clone();
  ZeroDataParallel dp(local(), make_groups(model, 0.1, /*bias_lr_scale=*/0.0), OptimizerOptions{}, 0, 25.0);
  for (int step = 0; step < 3; ++step) dp_step(model, dp, step, 8, 0, 1, 1, 1.0, 1e-2);
  EXPECT_TRUE(model->parameters()[1].equal(bias_before));
  EXPECT_FALSE(model->parameters()[0].equal(make_model(2)->parameters()[0]));
}

TEST(ZeroDataParallel, Bf16ParametersKeepFp32MasterWeights) {
  auto model = make_model(3, torch::kBFloat16);
  auto groups = make_groups(model, 0.01);
  int64_t numel = 0;
  for (auto& g : groups) for (auto& p : g.params) numel += p.numel();
  ZeroDataParallel dp(local(), groups, OptimizerOptions{}, 0, 25.0);
  EXPECT_EQ(dp.optimizer_state_bytes(), 3 * numel * 4);  // exp_avg, exp_avg_sq, master
  EXPECT_EQ(dp.gradient_bytes(), numel * 2);
  for (int step = 0; step < 3; ++step) EXPECT_TRUE(dp_step(model, dp, step, 8, 0, 1, 1, 1.0, 1e-3, torch::kBFloat16));
  auto state = dp.optimizer_state();
  ASSERT_EQ(state.count("group0.master_weights"), 1u);
  const torch::Tensor master = state.at("group0.master_weights");
  EXPECT_EQ(master.scalar_type(), torch::kFloat);
  // The parameters are the master weights rounded to bf16, and the master saw updates bf16 lost.
  std::vector<torch::Tensor> weights;
  for (auto& p : model->parameters()) if (p.dim() >= 2) weights.push_back(p.detach().reshape(-1));
  const torch::Tensor params = torch::cat(weights);
  EXPECT_TRUE(params.equal(master.to(torch::kBFloat16)));
  EXPECT_GT(max_abs_diff(master, params), 0.0);
  EXPECT_EQ(state.at("step").item<int64_t>(), 3);
}

TEST(ZeroDataParallel, NonFiniteGradientsAreReported) {
  auto model = make_model(4);
  ZeroDataParallel dp(local(), make_groups(model, 0.0), OptimizerOptions{}, 0, 25.0);
  dp.zero_grad();
  dp.prepare_backward(true);
  auto [x, y] = make_batch(0, 4);
  (loss_of(model, x, y) * std::numeric_limits<float>::infinity()).backward();
  EXPECT_FALSE(dp.finish_backward(1.0));
}

TEST(ZeroDataParallel, StateRoundTripsAndWrongStateIsNamed) {
  auto a = make_model(5);
  ZeroDataParallel dpa(local(), make_groups(a, 0.01), OptimizerOptions{}, 0, 25.0);
  for (int step = 0; step < 3; ++step) dp_step(a, dpa, step, 8, 0, 1, 1, 0, 1e-2);
  auto state = dpa.optimizer_state();
  auto b = make_model(6);
  set_params(b, flat_params(a));
  ZeroDataParallel dpb(local(), make_groups(b, 0.01), OptimizerOptions{}, 0, 25.0);
  dpb.load_optimizer_state(state);
  dp_step(a, dpa, 3, 8, 0, 1, 1, 0, 1e-2);
  dp_step(b, dpb, 3, 8, 0, 1, 1, 0, 1e-2);
  EXPECT_TRUE(flat_params(a).equal(flat_params(b)));

  auto wrong = state;
  wrong["group1.exp_avg"] = torch::zeros({3});
  try {
    dpb.load_optimizer_state(wrong);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'group1.exp_avg' has 3 elements"), std::string::npos) << e.what();
  }
  OptimizerOptions sgd;
  sgd.kind = "sgd";
  sgd.momentum = 0.9;
  auto c = make_model(6);
  ZeroDataParallel dpc(local(), make_groups(c, 0.0), sgd, 0, 25.0);
  try {
    dpc.load_optimizer_state(state);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no 'group0.momentum_buffer'"), std::string::npos) << e.what();
  }
}

TEST(ZeroDataParallel, BadOptionsAreConfigErrors) {
  auto model = make_model(8);
  OptimizerOptions bad;
  bad.kind = "adamx";
  try {
    ZeroDataParallel dp(local(), make_groups(model, 0.0), bad, 0, 25.0);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("Invalid optimizer type: adamx"), std::string::npos) << e.what();
  }
  try {  // stage 3 trains (distributed/sharded_parameters.h); 4 is no stage
    ZeroDataParallel dp(local(), make_groups(model, 0.0), OptimizerOptions{}, 4, 25.0);
    FAIL() << "zero_stage 4 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("distributed.zero_stage = 4: expected 0, 1, 2 or 3"), std::string::npos) << e.what();
  }
  auto frozen = make_model(8);
  auto groups = make_groups(frozen, 0.0);
  groups[0].params[0].set_requires_grad(false);
  try {
    ZeroDataParallel dp(local(), groups, OptimizerOptions{}, 0, 25.0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'0.weight'"), std::string::npos) << e.what();
  }
}

TEST(ZeroDataParallel, MemoryMeterSeesGradientAndOptimizerBytes) {
  auto& meter = memory_meter(torch::kCPU);
  auto model = make_model(9);
  auto groups = make_groups(model, 0.0);
  const int64_t before = meter.snapshot().allocated;
  ZeroDataParallel dp(local(), groups, OptimizerOptions{}, 0, 25.0);
  const int64_t grown = meter.snapshot().allocated - before;
  EXPECT_EQ(dp.gradient_bytes(), 1476 * 4);
  EXPECT_EQ(dp.optimizer_state_bytes(), 2 * 1476 * 4);
  // The parameters moved into the flat buffer (old storage freed): growth is gradients + state.
  EXPECT_NEAR(static_cast<double>(grown), static_cast<double>(dp.gradient_bytes() + dp.optimizer_state_bytes()), 1024.0);
}

TEST(ShardLayout, PadsToTheRanksAndSplitsARangeByOwner) {
  const ShardLayout second = ShardLayout::of(5, 2, 1);  // 5 elements over 2 ranks: [0, 3) and [3, 6)
  EXPECT_EQ(second.padded, 6);
  EXPECT_EQ(second.shard_begin, 3);
  EXPECT_EQ(second.shard_size, 3);
  EXPECT_EQ(second.owned_numel(), 2);  // the last element is padding
  EXPECT_EQ(second.counts_in(2, 5), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(second.shard_offset_of(2, 5), 0);
  EXPECT_EQ(ShardLayout::of(5, 2, 0).shard_offset_of(2, 5), 2);
  EXPECT_EQ(ShardLayout::of(5, 2, 0).shard_offset_of(3, 5), 0);  // owns none of it
  const ShardLayout whole = ShardLayout::of(5, 1, 0);
  EXPECT_FALSE(whole.sharded());
  EXPECT_EQ(whole.padded, 5);
  EXPECT_EQ(whole.shard_size, 5);
}

// The pieces work without the composition: a trainer (or a ZeRO-3 composition) can put them
// together itself and gets the same step, bit for bit.
TEST(DataParallelPieces, ComposedByHandStepLikeZeroDataParallel) {
  auto composed = make_model(11);
  ZeroDataParallel dp(local(), make_groups(composed, 0.01), OptimizerOptions{}, 0, 25.0);
  auto by_hand = make_model(11);
  FlatParameters parameters(make_groups(by_hand, 0.01), 1, 0);
  GradientReducer reducer(local(), parameters.groups(), GradientReducer::Mode::kAllReduce, 25.0);
  ShardedOptimizer optimizer(local(), parameters.groups(), OptimizerOptions{});
  for (int step = 0; step < 3; ++step) {
    dp_step(composed, dp, step, 8, 0, 1, 1, 0.5, 1e-2);
    reducer.zero_grad();
    reducer.prepare_backward(true);
    auto [x, y] = make_batch(step, 8);
    loss_of(by_hand, x, y).backward();
    EXPECT_TRUE(reducer.finish_backward(1.0));
    reducer.clip_grad_norm(0.5);
    optimizer.step(1e-2, reducer.owned_gradients());
  }
  EXPECT_TRUE(flat_params(by_hand).equal(flat_params(composed)));
  EXPECT_TRUE(optimizer.consolidated_state().at("group0.exp_avg_sq").equal(dp.optimizer_state().at("group0.exp_avg_sq")));
}

}  // namespace
}  // namespace wxtrain::distributed
