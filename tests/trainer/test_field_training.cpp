// Training the way the field does: loss weights by channel and pressure level, the rollout
// curriculum, forcings fed at each rollout step's own valid time, diagnostics predicted but not
// fed back, and the boundary frame of a limited-area run.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "distributed/communicator.h"
#include "storm_run.h"
#include "trainer/training_step.h"

using namespace wxtrain;
using namespace wxtrain::trainer;

namespace {

// A run file without data files: channels by name and role, levels through the names' sources.
RunConfig levelled(const std::string& train_extra) {
  return parse_config(
      "[data]\ngrid = [8, 16]\n"
      "[[data.sources]]\nfile = \"f.nc\"\nvariable = \"t\"\nlevels = [250, 500, 1000]\n"
      "[[data.sources]]\nfile = \"f.nc\"\nvariable = \"t2m\"\n"
      "[[data.sources]]\nfile = \"f.nc\"\nvariable = \"tp\"\nrole = \"diagnostic\"\n"
      "[[data.sources]]\nfile = \"f.nc\"\nvariable = \"sst\"\nrole = \"forcing\"\n"
      "[train]\n" + train_extra,
      "levelled.toml");
}

// Records every input it is given and answers with a constant: what the rollout feeds the model.
class RecordingModel : public models::WeatherModelImpl {
 public:
  explicit RecordingModel(const models::ModelShape& shape) : WeatherModelImpl(shape) {}
  torch::Tensor forward(torch::Tensor x) override {
    inputs.push_back(x.clone());
    return torch::full({x.size(0), shape().out_channels, x.size(2), x.size(3)}, 0.5f);
  }
  std::vector<models::ChannelAxis> channel_axes() const override { return {}; }
  std::vector<torch::Tensor> inputs;
};

}  // namespace

TEST(LossWeights, LinearLevelWeightsAreProportionalToPressure) {
  const RunConfig config = levelled("level_weighting = \"linear\"\n");
  const ChannelLayout layout = config.channels();
  ASSERT_EQ(layout.output_names(), (std::vector<std::string>{"t_250", "t_500", "t_1000", "t2m", "tp"}));
  const std::vector<double> w = loss_channel_weights(config);
  ASSERT_EQ(w.size(), 5u);
  EXPECT_NEAR(w[1] / w[0], 2.0, 1e-12) << "500 hPa weighs twice 250 hPa";
  EXPECT_NEAR(w[2] / w[0], 4.0, 1e-12) << "1000 hPa weighs four times 250 hPa";
  EXPECT_NEAR(w[3], w[4], 1e-12) << "surface channels share one weight";
  EXPECT_NEAR((w[0] + w[1] + w[2]) / 3, w[3], 1e-12) << "levels average what a surface channel weighs";
  double mean = 0;
  for (double v : w) mean += v / 5;
  EXPECT_NEAR(mean, 1.0, 1e-12);
}

TEST(LossWeights, LevelWeightsTableNeedsLevelWeightingTable) {
  try {
    levelled("[train.level_weights]\n\"500\" = 3.0\n");
    FAIL() << "level_weights without level_weighting = \"table\" was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("set it to \"table\""), std::string::npos) << e.what();
  }
}

TEST(LossWeights, TableAndGlobWeightsCombine) {
  const RunConfig config = levelled(
      "level_weighting = \"table\"\n[train.loss_weights]\nt2m = 2.0\n\"t_*\" = 0.5\n\"t*\" = 9.0\n"
      "[train.level_weights]\n\"500\" = 3.0\n");
  const std::vector<double> w = loss_channel_weights(config);
  // Raw: t_250 0.5, t_500 0.5 x 3, t_1000 0.5, t2m 2 (not 9: its own pattern comes first), tp 9.
  const std::vector<double> raw = {0.5, 1.5, 0.5, 2.0, 9.0};
  const double scale = 5.0 / (0.5 + 1.5 + 0.5 + 2.0 + 9.0);
  for (size_t i = 0; i < raw.size(); ++i) EXPECT_NEAR(w[i], raw[i] * scale, 1e-12) << i;
  EXPECT_NE(describe_loss_weights(config).find("t_500 "), std::string::npos);
  try {
    loss_channel_weights(levelled("[train.loss_weights]\n\"q_*\" = 1.0\n"));
    FAIL() << "a pattern matching nothing was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'q_*' matches no predicted channel"), std::string::npos) << e.what();
  }
}

TEST(LossWeights, TheLossWeighsChannelsAndIgnoresTheBoundaryFrame) {
  const torch::Tensor lat = torch::ones({4});
  torch::Tensor prediction = torch::zeros({1, 2, 4, 5}), target = torch::zeros({1, 2, 4, 5});
  target[0][0].fill_(1.0);  // channel 0 off by 1 everywhere, channel 1 exact
  const torch::Tensor weights = torch::tensor({3.0f, 1.0f});
  EXPECT_NEAR(weighted_mse(prediction, target, lat, {}, weights).item<double>(), 3.0 / 4.0, 1e-6);
  // An error only on the frame does not count when the interior is given.
  torch::Tensor frame_error = torch::zeros({1, 2, 4, 5});
  frame_error.select(2, 0).fill_(10.0);
  const torch::Tensor interior = 1 - boundary_frame(4, 5, 1);
  EXPECT_EQ(interior.sum().item<float>(), 6.0f);
  EXPECT_NEAR(weighted_mse(frame_error, torch::zeros_like(frame_error), lat, {}, {}, interior).item<double>(), 0.0, 1e-9);
  EXPECT_GT(weighted_mse(frame_error, torch::zeros_like(frame_error), lat).item<double>(), 1.0);
}

TEST(Curriculum, RolloutLengthSwitchesAtTheConfiguredSteps) {
  const RunConfig config = testing_support::storm_run(::testing::TempDir() + "/curriculum",
                                                      "rollout_schedule = [[0, 1], [5, 2], [9, 4]]\n");
  EXPECT_EQ(config.rollout_at(0), 1);
  EXPECT_EQ(config.rollout_at(4), 1);
  EXPECT_EQ(config.rollout_at(5), 2);
  EXPECT_EQ(config.rollout_at(8), 2);
  EXPECT_EQ(config.rollout_at(9), 4);
  EXPECT_EQ(config.rollout_at(1000), 4);
  EXPECT_EQ(config.max_rollout(), 4) << "samples, estimate and tune-batch size for the longest";
  auto bad = [](const std::string& schedule) {
    try {
      testing_support::storm_run(::testing::TempDir() + "/bad", "rollout_schedule = " + schedule + "\n");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(bad("[[1, 1]]").find("must start at step 0"), std::string::npos);
  EXPECT_NE(bad("[[0, 1], [5, 2], [5, 3]]").find("steps must increase"), std::string::npos);
  EXPECT_NE(bad("[[0, 0]]").find("out of range"), std::string::npos);
}

TEST(Rollout, EachStepSeesTheForcingsOfItsOwnValidTimeAndDiagnosticsAreNotFedBack) {
  // P = 2 prognostic, D = 1 diagnostic, F + S = 2 forcings, history 2, on 3 x 4.
  models::ModelShape shape{2 * 2 + 2, 3, 3, 4};
  auto model = std::make_shared<RecordingModel>(shape);
  RolloutSetup setup;
  setup.prognostic = 2;
  setup.diagnostic = 1;
  setup.residual_scale = torch::tensor({2.0f, 4.0f});
  const torch::Tensor input = torch::arange(4 * 12, torch::kFloat32).view({1, 4, 3, 4});
  torch::Tensor forcings = torch::empty({1, 3, 2, 3, 4});
  for (int64_t k = 0; k < 3; ++k) forcings[0][k].fill_(100.0f * (k + 1));  // step k's forcings: 100 (k + 1)
  torch::NoGradGuard no_grad;
  const torch::Tensor out = rollout(*model, input, forcings, 3, setup);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{1, 3, 3, 3, 4}));
  ASSERT_EQ(model->inputs.size(), 3u);
  for (int64_t k = 0; k < 3; ++k) {
    const torch::Tensor x = model->inputs[static_cast<size_t>(k)];
    ASSERT_EQ(x.size(1), 6);
    EXPECT_TRUE(torch::all(x.narrow(1, 4, 2) == 100.0f * (k + 1)).item<bool>()) << "step " << k << " got other forcings";
  }
  // Prognostic: newest + scale x 0.5 per step; the diagnostic is the model's output, 0.5.
  const torch::Tensor newest = input.narrow(1, 2, 2);
  EXPECT_TRUE(torch::allclose(out[0][0].narrow(0, 0, 2), newest[0] + torch::tensor({1.0f, 2.0f}).view({2, 1, 1})));
  EXPECT_TRUE(torch::allclose(out[0][2].narrow(0, 0, 2), newest[0] + torch::tensor({3.0f, 6.0f}).view({2, 1, 1})));
  EXPECT_TRUE(torch::all(out.select(2, 2) == 0.5f).item<bool>());
  // The window fed back holds the prognostic channels only: step 2's input is [step 0, step 1].
  EXPECT_TRUE(torch::allclose(model->inputs[2].narrow(1, 0, 2), out[0][0].narrow(0, 0, 2).unsqueeze(0)));
  EXPECT_TRUE(torch::allclose(model->inputs[2].narrow(1, 2, 2), out[0][1].narrow(0, 0, 2).unsqueeze(0)));
}

TEST(Rollout, TheBoundaryFrameTakesTheTrueStateBeforeItIsFedBack) {
  models::ModelShape shape{2, 1, 5, 6};
  auto model = std::make_shared<RecordingModel>(shape);
  RolloutSetup setup;
  setup.prognostic = 1;
  setup.boundary = boundary_frame(5, 6, 1);
  const torch::Tensor input = torch::zeros({1, 2, 5, 6});
  const torch::Tensor truth = torch::full({1, 2, 1, 5, 6}, -7.0f);
  torch::NoGradGuard no_grad;
  const torch::Tensor out = rollout(*model, input, {}, 2, setup, truth);
  // Frame: the truth; interior: the model's 0 + 0.5, then 1.0.
  EXPECT_EQ(out[0][0][0][0][0].item<float>(), -7.0f);
  EXPECT_EQ(out[0][0][0][4][5].item<float>(), -7.0f);
  EXPECT_EQ(out[0][0][0][2][3].item<float>(), 0.5f);
  EXPECT_EQ(out[0][1][0][2][3].item<float>(), 1.0f);
  EXPECT_EQ(model->inputs[1][0][1][0][0].item<float>(), -7.0f) << "the next step starts from the forced frame";
}

TEST(TrainingStep, TrainsWithForcingsDiagnosticsAndACurriculum) {
  RunConfig config = testing_support::storm_run(::testing::TempDir() + "/field",
                                                "rollout_schedule = [[0, 1], [1, 3]]\nlevel_weighting = \"uniform\"\n");
  config.data.sources[5].role = "diagnostic";  // v500 predicted only
  config.data.sources[4].role = "forcing";     // u500 given
  config.data.forcings = {"cos_latitude", "sin_longitude"};
  const models::ModelShape shape = models::model_shape(config);
  EXPECT_EQ(shape.in_channels, 4 * 2 + 1 + 2);
  EXPECT_EQ(shape.out_channels, 5);
  auto comm = distributed::make_communicator(distributed::World{}, config.distributed, torch::kCPU);
  auto state = build_training_state(config, shape, comm, torch::kCPU, {}, {}, torch::full({4}, 0.5f));
  TrainingStep step(*state);
  auto batches = synthetic_micro_batches(config, shape, 2, 1, torch::kCPU);
  ASSERT_EQ(batches[0].forcings.sizes(), (std::vector<int64_t>{2, 3, 3, 33, 36}));
  const StepResult one = step.run(batches, 1e-3, config.rollout_at(0));
  const StepResult three = step.run(batches, 1e-3, config.rollout_at(1));
  EXPECT_TRUE(one.applied && three.applied);
  EXPECT_TRUE(std::isfinite(one.loss) && std::isfinite(three.loss));
  EXPECT_NE(one.loss, three.loss);
}
