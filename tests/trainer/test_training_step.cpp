#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "distributed/communicator.h"
#include "storm_run.h"
#include "trainer/loss_scaler.h"
#include "trainer/training_step.h"

using namespace wxtrain;
using namespace wxtrain::trainer;

namespace {

std::unique_ptr<TrainingState> make_state(const RunConfig& config) {
  auto comm = distributed::make_communicator(distributed::World{}, config.distributed, torch::kCPU);
  return build_training_state(config, models::model_shape(config), comm, torch::kCPU);
}

std::vector<torch::Tensor> params_of(TrainingState& s) {
  std::vector<torch::Tensor> out;
  for (const auto& p : s.model->parameters()) out.push_back(p.detach().clone());
  return out;
}

double max_abs_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, (a[i] - b[i]).abs().max().item<double>());
  return m;
}

RunConfig small_config(const std::string& extra = "") {
  return testing_support::storm_run(::testing::TempDir() + "/step", extra);
}

}  // namespace

TEST(LossScaler, BacksOffOnInfAndGrowsAfterInterval) {
  LossScaler s({true, 1024.0, 2.0, 0.5, 3});
  EXPECT_DOUBLE_EQ(s.scale(), 1024.0);
  EXPECT_FALSE(s.update(false));  // inf: skip and halve
  EXPECT_DOUBLE_EQ(s.scale(), 512.0);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_DOUBLE_EQ(s.scale(), 512.0);
  EXPECT_TRUE(s.update(true));  // third finite step in a row: grow
  EXPECT_DOUBLE_EQ(s.scale(), 1024.0);
  LossScaler restored({true, 1.0, 2.0, 0.5, 3});
  restored.load_state(s.state());
  EXPECT_DOUBLE_EQ(restored.scale(), 1024.0);
  EXPECT_EQ(restored.skipped_steps(), 1);
  LossScaler off({false, 1024.0, 2.0, 0.5, 3});
  EXPECT_DOUBLE_EQ(off.scale(), 1.0);
}

TEST(TrainingStep, InfInTheBatchSkipsTheStepAndHalvesTheScale) {
  RunConfig config = small_config();
  auto state = make_state(config);
  state->scaler = LossScaler({true, 4096.0, 2.0, 0.5, 2000});
  auto batches = synthetic_micro_batches(config, models::model_shape(config), 4, 1, torch::kCPU);
  TrainingStep step(*state);
  auto before = params_of(*state);
  batches[0].input[0][0][5][5] = std::numeric_limits<float>::infinity();
  StepResult r = step.run(batches, 1e-3);
  EXPECT_FALSE(r.applied);
  EXPECT_DOUBLE_EQ(state->scaler.scale(), 2048.0);
  EXPECT_EQ(max_abs_diff(before, params_of(*state)), 0.0) << "a skipped step must leave the weights alone";
  // The next finite batch trains normally at the reduced scale.
  auto clean = synthetic_micro_batches(config, models::model_shape(config), 4, 1, torch::kCPU);
  StepResult r2 = step.run(clean, 1e-3);
  EXPECT_TRUE(r2.applied);
  EXPECT_DOUBLE_EQ(r2.loss_scale, 2048.0);
  EXPECT_GT(max_abs_diff(before, params_of(*state)), 0.0);
}

TEST(TrainingStep, ScaledAndUnscaledStepsAgree) {
  // Loss scaling must be invisible to the update: unscaling happens before clipping and the step.
  RunConfig config = small_config();
  auto plain = make_state(config);
  auto scaled = make_state(config);
  scaled->scaler = LossScaler({true, 1024.0, 2.0, 0.5, 2000});
  auto batches = synthetic_micro_batches(config, models::model_shape(config), 4, 1, torch::kCPU);
  TrainingStep(*plain).run(batches, 1e-3);
  TrainingStep(*scaled).run(batches, 1e-3);
  EXPECT_LT(max_abs_diff(params_of(*plain), params_of(*scaled)), 1e-6);
}

TEST(TrainingStep, CheckpointedStepEqualsPlainStep) {
  for (const char* model : {"unet", "vit", "gnn"}) {
    std::string m = std::string("name = \"") + model + "\"\nchannels = [8, 16]\ngroups = 4\nembed_dim = 32\n"
                    "depth = 2\nheads = 2\npatch_size = 3\nlatent = 16\nprocessor_layers = 2\n";
    RunConfig config = parse_config(testing_support::storm_run_text(::testing::TempDir(), "", m), "t.toml");
    config.data.lat = 33;
    config.data.lon = 36;
    RunConfig ckpt = config;
    ckpt.train.checkpointing = true;
    auto a = make_state(config);
    auto b = make_state(ckpt);
    auto batches = synthetic_micro_batches(config, models::model_shape(config), 2, 1, torch::kCPU);
    StepResult ra = TrainingStep(*a).run(batches, 1e-3);
    StepResult rb = TrainingStep(*b).run(batches, 1e-3);
    EXPECT_NEAR(ra.grad_norm, rb.grad_norm, 1e-5 * ra.grad_norm) << model;
    EXPECT_LT(max_abs_diff(params_of(*a), params_of(*b)), 1e-6) << model;
  }
}

TEST(TrainingStep, RolloutCheckpointedStepEqualsPlainStep) {
  // train.rollout_checkpointing replays each rollout step in backward, alone or around the blocks'
  // own checkpoints (nested replays): the update must be the plain step's, for a model whose
  // blocks take one tensor (unet) and one whose blocks carry several (graphcast: grid and mesh).
  for (const char* model : {"unet", "graphcast"}) {
    std::string m = std::string("name = \"") + model + "\"\nchannels = [8, 16]\ngroups = 4\n"
                    "latent = 16\nprocessor_layers = 2\nmesh_refinement = 2\n";
    RunConfig config = parse_config(testing_support::storm_run_text(::testing::TempDir(), "", m), "t.toml");
    config.data.lat = 33;
    config.data.lon = 36;
    config.data.rollout_steps = 3;
    auto batches = synthetic_micro_batches(config, models::model_shape(config), 2, 1, torch::kCPU);
    auto plain = make_state(config);
    const StepResult rp = TrainingStep(*plain).run(batches, 1e-3);
    for (const bool blocks : {false, true}) {
      RunConfig c = config;
      c.train.checkpointing = blocks;
      c.train.rollout_checkpointing = true;
      auto s = make_state(c);
      const StepResult r = TrainingStep(*s).run(batches, 1e-3);
      EXPECT_NEAR(r.loss, rp.loss, 1e-6 * rp.loss) << model << " blocks " << blocks;
      EXPECT_NEAR(r.grad_norm, rp.grad_norm, 1e-5 * rp.grad_norm) << model << " blocks " << blocks;
      EXPECT_LT(max_abs_diff(params_of(*plain), params_of(*s)), 1e-6) << model << " blocks " << blocks;
    }
  }
}

TEST(TrainingStep, AccumulatingTwoBatchesOfFourEqualsOneBatchOfEight) {
  // SGD with momentum: its update is linear in the gradient. Adam divides by sqrt(v), which turns
  // float rounding (two half-batch sums vs one) in near-zero gradients into visible differences.
  RunConfig one = small_config("optimizer = \"sgd\"\nmomentum = 0.9\n");
  RunConfig two = one;
  two.train.accumulation = 2;
  auto shape = models::model_shape(one);
  auto big = synthetic_micro_batches(one, shape, 8, 1, torch::kCPU);
  std::vector<MicroBatch> halves = {
      {big[0].input.narrow(0, 0, 4), big[0].forcings.narrow(0, 0, 4), big[0].target.narrow(0, 0, 4), {}},
      {big[0].input.narrow(0, 4, 4), big[0].forcings.narrow(0, 4, 4), big[0].target.narrow(0, 4, 4), {}}};
  auto a = make_state(one);
  auto b = make_state(two);
  TrainingStep sa(*a), sb(*b);
  for (int i = 0; i < 3; ++i) {
    StepResult ra = sa.run(big, 1e-2);
    StepResult rb = sb.run(halves, 1e-2);
    EXPECT_NEAR(ra.loss, rb.loss, 1e-5 * std::abs(ra.loss));
  }
  EXPECT_LT(max_abs_diff(params_of(*a), params_of(*b)), 1e-5);
}

TEST(TrainingStep, RolloutLossTrainsTheAutoregressiveChain) {
  RunConfig config = small_config();
  config.data.rollout_steps = 3;
  auto state = make_state(config);
  auto batches = synthetic_micro_batches(config, models::model_shape(config), 2, 1, torch::kCPU);
  EXPECT_EQ(batches[0].target.size(1), 3);
  torch::NoGradGuard no_grad;
  torch::Tensor out = rollout(*state->model, batches[0].input, batches[0].forcings, 3, state->rollout);
  EXPECT_EQ(out.sizes(), batches[0].target.sizes());
  // Step 2 of the rollout is step 1's state plus the model applied to [newest input state, step 1].
  const int64_t V = config.num_variables();
  torch::Tensor second_input = torch::cat({batches[0].input.narrow(1, V, V), out.select(1, 0)}, 1);
  EXPECT_TRUE(torch::allclose(out.select(1, 0) + state->model->forward(second_input), out.select(1, 1), 1e-5, 1e-5));
}

TEST(TrainingStep, PredictingTheStateFeedsTheModelsOutputBackAsTheNextState) {
  // train.prediction = "state" (FourCastNet, PhysicsNeMo's AFNO): each rollout state is the model's
  // output itself, not the newest state plus it.
  RunConfig config = small_config();
  config.data.rollout_steps = 2;
  config.train.prediction = "state";
  auto state = make_state(config);
  EXPECT_TRUE(state->rollout.predicts_state);
  auto batches = synthetic_micro_batches(config, models::model_shape(config), 2, 1, torch::kCPU);
  torch::NoGradGuard no_grad;
  torch::Tensor out = rollout(*state->model, batches[0].input, batches[0].forcings, 2, state->rollout);
  const int64_t V = config.num_variables();
  EXPECT_TRUE(torch::allclose(state->model->forward(batches[0].input), out.select(1, 0), 1e-5, 1e-5));
  torch::Tensor second_input = torch::cat({batches[0].input.narrow(1, V, V), out.select(1, 0)}, 1);
  EXPECT_TRUE(torch::allclose(state->model->forward(second_input), out.select(1, 1), 1e-5, 1e-5));
}

TEST(TrainingStep, Bf16MixedAndPureBf16Train) {
  for (const char* precision : {"bf16-mixed", "bf16"}) {
    RunConfig config = small_config();
    config.train.precision = parse_precision(precision);
    auto state = make_state(config);
    auto batches = synthetic_micro_batches(config, models::model_shape(config), 4, 1, torch::kCPU);
    TrainingStep step(*state);
    StepResult first = step.run(batches, 3e-3);
    StepResult last;
    for (int i = 0; i < 15; ++i) last = step.run(batches, 3e-3);
    EXPECT_TRUE(last.applied) << precision;
    EXPECT_LT(last.loss, first.loss) << precision << ": the loss on a repeated batch must fall";
  }
}

TEST(TrainingStep, Fp16MixedOnCpuIsAClearError) {
  RunConfig config = small_config();
  config.train.precision = Precision::kFp16Mixed;
  try {
    make_state(config);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bf16-mixed"), std::string::npos) << e.what();
  }
}

TEST(TrainingStep, FreezePatternsKeepWeightsFixed) {
  RunConfig config = small_config("freeze = [\"encoder0.*\"]\n");
  auto state = make_state(config);
  EXPECT_FALSE(state->frozen.empty());
  std::map<std::string, torch::Tensor> before;
  for (const auto& p : state->model->named_parameters()) before[p.key()] = p.value().detach().clone();
  auto batches = synthetic_micro_batches(config, models::model_shape(config), 4, 1, torch::kCPU);
  TrainingStep(*state).run(batches, 1e-2);
  for (const auto& p : state->model->named_parameters()) {
    const bool frozen = p.key().rfind("encoder0.", 0) == 0;
    const bool same = torch::equal(before[p.key()], p.value());
    EXPECT_EQ(same, frozen) << p.key();
  }
  RunConfig bad = small_config("freeze = [\"nothing.*\"]\n");
  EXPECT_THROW(make_state(bad), ConfigError);
}

// A point set (a 1-degree patch stored as a list of cells): the loss weighs each cell by its area
// ([1, cells], mean 1, so a row at 55N weighs cos 55 / cos 20 of one at 20N), and data.boundary is
// the band of cells within (boundary - 1/2) grid spacings of data.region's edge, by great-circle
// distance: two rows at the northern edge, and at 40N the two columns by the western edge (a
// degree of longitude there is 0.77 degrees of arc).
TEST(PointSetStep, AreaWeightsAndTheBoundaryBandOfCells) {
  RunConfig c = parse_config(
      "[model]\nname = \"graphcast\"\nlatent = 8\nprocessor_layers = 1\nmlp_layers = 1\nmesh_refinement = 2\n"
      "[data]\nvariables = [\"a\"]\ngrid = [1, 2556]\nhistory = 1\nregion = { lat = [20, 55], lon = [230, 300] }\n"
      "boundary = 2\n[train]\nbatch_size = 1\n",
      "cells.toml");
  for (int i = 55; i >= 20; --i)
    for (int j = 230; j <= 300; ++j) c.data.lat_coords.push_back(i), c.data.lon_coords.push_back(j);
  ASSERT_EQ(c.data.lat_coords.size(), 2556u);
  auto state = make_state(c);
  const torch::Tensor w = state->lat_weights;
  ASSERT_EQ(w.sizes(), (std::vector<int64_t>{1, 2556}));
  EXPECT_NEAR(w.mean().item<double>(), 1.0, 1e-6);
  EXPECT_NEAR(w[0][0].item<double>() / w[0][2555].item<double>(), std::cos(55 * M_PI / 180) / std::cos(20 * M_PI / 180),
              2e-4);
  auto cell = [](int lat, int lon) { return static_cast<int64_t>((55 - lat) * 71 + (lon - 230)); };
  const torch::Tensor interior = state->interior;
  ASSERT_EQ(interior.sizes(), (std::vector<int64_t>{1, 2556}));
  EXPECT_EQ(interior[0][cell(55, 260)].item<float>(), 0.0f);
  EXPECT_EQ(interior[0][cell(54, 260)].item<float>(), 0.0f);
  EXPECT_EQ(interior[0][cell(53, 260)].item<float>(), 1.0f);
  EXPECT_EQ(interior[0][cell(40, 230)].item<float>(), 0.0f);
  EXPECT_EQ(interior[0][cell(40, 231)].item<float>(), 0.0f);
  EXPECT_EQ(interior[0][cell(40, 232)].item<float>(), 1.0f);
  EXPECT_EQ(interior[0][cell(20, 260)].item<float>(), 0.0f);
  // The weighted loss of an error only on the frame is 0: the frame is kept out of the loss.
  torch::Tensor error = torch::zeros({1, 1, 1, 2556});
  error.index_put_({0, 0, 0, cell(55, 260)}, 5.0f);
  EXPECT_EQ(weighted_mean(error, state->lat_weights, {}, {}, state->interior).item<float>(), 0.0f);
  error.index_put_({0, 0, 0, cell(40, 260)}, 5.0f);
  EXPECT_GT(weighted_mean(error, state->lat_weights, {}, {}, state->interior).item<float>(), 0.0f);
}
