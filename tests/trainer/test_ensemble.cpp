// Ensembles: the afCRPS loss against a brute-force pair sum and finite differences, the noise
// channels and member tiling of the step, the deterministic path left as it was, the ensemble
// scores, and the run-file keys' errors. (The resumed ensemble run is in test_trainer.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>

#include "core/autocast.h"
#include "core/error.h"
#include "distributed/communicator.h"
#include "storm_run.h"
#include "trainer/scores.h"
#include "trainer/training_step.h"

using namespace wxtrain;
using namespace wxtrain::trainer;

namespace {

// The afCRPS re-derived the slow way, in double: every ordered pair j != k of members materialised.
// members [B, M, ...], target [B, ...].
torch::Tensor brute_force_afcrps(const torch::Tensor& members, const torch::Tensor& target, double alpha) {
  const torch::Tensor x = members.to(torch::kFloat64), y = target.to(torch::kFloat64);
  const int64_t M = x.size(1);
  torch::Tensor skill = torch::zeros_like(y), pairs = torch::zeros_like(y);
  for (int64_t j = 0; j < M; ++j) {
    skill += (x.select(1, j) - y).abs();
    for (int64_t k = 0; k < M; ++k)
      if (j != k) pairs += (x.select(1, j) - x.select(1, k)).abs();
  }
  const double m = static_cast<double>(M), eps = (1.0 - alpha) / m;
  return skill / m - pairs * ((1.0 - eps) / (2.0 * m * (m - 1.0)));
}

std::unique_ptr<TrainingState> make_state(const RunConfig& config) {
  auto comm = distributed::make_communicator(distributed::World{}, config.distributed, torch::kCPU);
  return build_training_state(config, models::model_shape(config), comm, torch::kCPU);
}

RunConfig storm(const std::string& extra = "", const std::vector<std::string>& overrides = {}) {
  return testing_support::storm_run(::testing::TempDir() + "/ensemble", extra, overrides);
}

std::string config_error(const std::string& extra) {
  try {
    storm(extra);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Afcrps, EqualsTheBruteForcePairSumForMembers2To16) {
  torch::manual_seed(11);
  for (double alpha : {0.0, 0.95, 1.0}) {
    for (int64_t M = 2; M <= 16; ++M) {
      const torch::Tensor members = torch::randn({3, M, 2, 5, 4});
      const torch::Tensor target = torch::randn({3, 2, 5, 4});
      const torch::Tensor ours = afcrps(members, target, alpha, 1);
      ASSERT_EQ(ours.scalar_type(), torch::kFloat32);
      ASSERT_EQ(ours.sizes(), target.sizes());
      const torch::Tensor reference = brute_force_afcrps(members, target, alpha);
      const double err = (ours.to(torch::kFloat64) - reference).abs().max().item<double>();
      EXPECT_LT(err, 2e-6 * std::max(1.0, reference.abs().max().item<double>()))
          << "alpha " << alpha << ", " << M << " members";
    }
  }
}

TEST(Afcrps, AlphaOneIsFairAlphaZeroIsTheKernelCrps) {
  // Two members 0 and 2 around a truth of 1: the fair CRPS is 1 - 4 / (2*2*1) = 0; the kernel CRPS
  // 1 - 4 / (2*2*2) = 0.5 (its spread term divides by M^2).
  const torch::Tensor members = torch::tensor({0.0f, 2.0f}).view({1, 2});
  const torch::Tensor target = torch::tensor({1.0f});
  EXPECT_NEAR(afcrps(members, target, 1.0, 1).item<double>(), 0.0, 1e-7);
  EXPECT_NEAR(afcrps(members, target, 0.0, 1).item<double>(), 0.5, 1e-7);
  // alpha 0.95: eps = 0.025, 1 - 0.975 * 4 / 4.
  EXPECT_NEAR(afcrps(members, target, 0.95, 1).item<double>(), 0.025, 1e-7);
  // Members must be 2 or more.
  EXPECT_THROW(afcrps(torch::zeros({1, 1}), torch::zeros({1}), 0.95, 1), c10::Error);
}

TEST(Afcrps, UnderBf16AutocastItComputesInFp32OnTheBf16Values) {
  // The training step takes the loss under autocast, on a prediction the rollout returns in fp32
  // from bf16 layers: the loss of bf16-rounded members equals the brute force on those values.
  torch::manual_seed(5);
  AutocastGuard guard(torch::kCPU, torch::kBFloat16, true);
  for (double alpha : {0.0, 0.95, 1.0}) {
    for (int64_t M : {2, 3, 4, 8, 16}) {
      const torch::Tensor members = torch::randn({2, M, 3, 6, 5}).to(torch::kBFloat16);
      const torch::Tensor target = torch::randn({2, 3, 6, 5}).to(torch::kBFloat16);
      const torch::Tensor ours = afcrps(members, target, alpha, 1);
      EXPECT_EQ(ours.scalar_type(), torch::kFloat32);
      const torch::Tensor reference = brute_force_afcrps(members, target, alpha);
      EXPECT_LT((ours.to(torch::kFloat64) - reference).abs().max().item<double>(), 5e-6)
          << "alpha " << alpha << ", " << M << " members";
    }
  }
}

TEST(Afcrps, GradientMatchesFiniteDifferences) {
  torch::manual_seed(7);
  for (double alpha : {0.0, 0.95, 1.0}) {
    for (int64_t M : {2, 5, 9}) {
      const torch::Tensor members = torch::randn({2, M, 3, 4}, torch::kFloat64).requires_grad_(true);
      const torch::Tensor target = torch::randn({2, 3, 4}, torch::kFloat64);
      const torch::Tensor weights = torch::rand({2, 3, 4}, torch::kFloat64);  // any linear functional of it
      const torch::Tensor loss = (afcrps(members, target, alpha, 1) * weights).sum();
      ASSERT_EQ(loss.scalar_type(), torch::kFloat64);
      const torch::Tensor analytic = torch::autograd::grad({loss}, {members})[0];
      torch::NoGradGuard no_grad;
      const torch::Tensor x = members.detach().clone();
      torch::Tensor numeric = torch::zeros_like(x);
      auto flat = x.view({-1});
      auto grad = numeric.view({-1});
      const double h = 1e-6;
      for (int64_t i = 0; i < flat.numel(); ++i) {
        const double v = flat[i].item<double>();
        flat[i] = v + h;
        const double up = (afcrps(x, target, alpha, 1) * weights).sum().item<double>();
        flat[i] = v - h;
        const double down = (afcrps(x, target, alpha, 1) * weights).sum().item<double>();
        flat[i] = v;
        grad[i] = (up - down) / (2 * h);
      }
      EXPECT_LT((analytic - numeric).abs().max().item<double>(), 1e-6) << "alpha " << alpha << ", " << M << " members";
    }
  }
}

TEST(Ensemble, OneMemberIsTheDeterministicModelAndItsMse) {
  // The defaults and every ensemble key set to its default value train the same weights: with one
  // member there is no noise channel and the loss is the weighted MSE, bit for bit.
  RunConfig plain = storm();
  RunConfig keyed = storm("ensemble_members = 1\ncrps_alpha = 0.5\nnoise_channels = 7\nnoise_std = 3.0\nloss = \"mse\"\n");
  EXPECT_EQ(plain.in_channels(), keyed.in_channels());
  EXPECT_EQ(plain.channels().input_names(), keyed.channels().input_names());
  auto a = make_state(plain), b = make_state(keyed);
  EXPECT_FALSE(b->rollout.noise.defined());
  EXPECT_EQ(b->rollout.noise_channels, 0);
  const models::ModelShape shape = models::model_shape(plain);
  const auto batches = synthetic_micro_batches(plain, shape, 2, 1, torch::kCPU);
  TrainingStep sa(*a), sb(*b);
  for (int i = 0; i < 2; ++i) {
    const StepResult ra = sa.run(batches, 1e-3), rb = sb.run(batches, 1e-3);
    EXPECT_EQ(ra.loss, rb.loss);
  }
  const auto pa = a->model->parameters(), pb = b->model->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << "parameter " << i;
  // training_loss with one member is weighted_mse itself.
  const torch::Tensor prediction = torch::randn({2, 1, shape.out_channels, shape.lat, shape.lon});
  const torch::Tensor target = torch::randn_like(prediction);
  EXPECT_TRUE(torch::equal(training_loss(*a, prediction, target),
                           weighted_mse(prediction, target, a->lat_weights, {}, a->channel_weights, a->interior)));
}

TEST(Ensemble, MembersGetNoiseChannelsAndTheLossIsTheWeightedAfcrps) {
  RunConfig config = storm("ensemble_members = 4\nnoise_channels = 3\n");
  RunConfig plain = storm();
  EXPECT_EQ(config.in_channels(), plain.in_channels() + 3);
  const auto names = config.channels().input_names();
  EXPECT_EQ(names.back(), "noise_2");
  auto state = make_state(config);
  EXPECT_EQ(state->ensemble.members, 4);
  ASSERT_TRUE(state->rollout.noise.defined());
  // The U-Net's first layer takes the noise channels: its first convolution weight (parameters in
  // registration order) reads every input channel.
  torch::Tensor first_conv;
  for (const auto& p : state->model->parameters())
    if (p.dim() == 4) {
      first_conv = p;
      break;
    }
  ASSERT_TRUE(first_conv.defined());
  EXPECT_EQ(first_conv.size(1), config.in_channels());

  // Four members of one sample: the same input, different noise, different forecasts.
  const models::ModelShape shape = models::model_shape(config);
  auto batch = synthetic_micro_batches(config, shape, 1, 1, torch::kCPU)[0];
  torch::NoGradGuard no_grad;
  const torch::Tensor out =
      rollout(*state->model, tile_members(batch.input, 4), tile_members(batch.forcings, 4), 1, state->rollout);
  ASSERT_EQ(out.size(0), 4);
  for (int64_t j = 1; j < 4; ++j) EXPECT_FALSE(torch::allclose(out[0], out[j])) << "member " << j << " equals member 0";

  // The loss is the afCRPS of the members, with the area and channel weights as the MSE has them.
  const torch::Tensor target = batch.target.narrow(1, 0, 1);
  const torch::Tensor loss = training_loss(*state, out, target);
  const torch::Tensor per_point = brute_force_afcrps(out.view({1, 4, 1, shape.out_channels, shape.lat, shape.lon}),
                                                     target, config.train.crps_alpha);
  const torch::Tensor w = state->channel_weights.to(torch::kFloat64).view({-1, 1, 1}) *
                          state->lat_weights.to(torch::kFloat64).view({-1, 1});
  const double expected = ((per_point * w).sum() / (w.expand_as(per_point[0][0]).sum())).item<double>();
  EXPECT_NEAR(loss.item<double>(), expected, 1e-5 * std::abs(expected));
}

namespace {

// A model that predicts no change and keeps the noise fields of every call's input (its last
// `noise` channels), to see what the rollout hands it.
class NoiseProbe : public models::WeatherModelImpl {
 public:
  NoiseProbe(const models::ModelShape& shape, int64_t noise) : WeatherModelImpl(shape), noise_(noise) {}
  torch::Tensor forward(torch::Tensor x) override {
    seen.push_back(x.narrow(1, x.size(1) - noise_, noise_).clone());
    return torch::zeros({x.size(0), shape().out_channels, x.size(2), x.size(3)});
  }
  std::vector<models::ChannelAxis> channel_axes() const override { return {}; }
  std::vector<torch::Tensor> seen;

 private:
  int64_t noise_;
};

}  // namespace

TEST(Ensemble, NoiseCorrelationCarriesEachMembersNoiseFromStepToStep) {
  // 3 channels, 2 members, 2 noise fields of std 2 on a 4 x 5 grid, rolled out 3 steps.
  const models::ModelShape shape{3 + 2, 3, 4, 5};
  RolloutSetup setup;
  setup.prognostic = 3;
  setup.noise_channels = 2;
  setup.noise_std = 2.0;
  const torch::Tensor input = torch::zeros({2, 3, 4, 5});
  auto probe_with = [&](double rho, torch::Tensor* carry = nullptr, int64_t steps = 3) {
    NoiseProbe probe(shape, 2);
    setup.noise = make_noise_generator(7, 0);
    setup.noise_correlation = rho;
    setup.noise_carry = carry;
    rollout(probe, input, {}, steps, setup);
    return probe.seen;
  };
  const std::vector<torch::Tensor> independent = probe_with(0.0), kept = probe_with(1.0), half = probe_with(0.5);
  ASSERT_EQ(independent.size(), 3u);
  // rho = 0 redraws every step; rho = 1 keeps a member's first fields for the whole rollout, and
  // the members still differ; the first step is the same draw whatever rho.
  EXPECT_FALSE(torch::allclose(independent[0], independent[1]));
  for (size_t r = 0; r < 3; ++r) EXPECT_TRUE(torch::equal(kept[r], independent[0])) << "step " << r;
  EXPECT_FALSE(torch::allclose(kept[0][0], kept[0][1]));
  EXPECT_TRUE(torch::equal(half[0], independent[0]));
  // rho = 0.5: step r is 0.5 x step r-1 + sqrt(0.75) x the fresh draw (the draws rho = 0 makes).
  for (size_t r = 1; r < 3; ++r)
    EXPECT_TRUE(torch::allclose(half[r], 0.5 * half[r - 1] + std::sqrt(0.75) * independent[r], 1e-5, 1e-5))
        << "step " << r;
  // The noise keeps its std at every step: over many points its variance stays noise_std^2 = 4.
  NoiseProbe wide({3 + 2, 3, 64, 64}, 2);
  setup.noise = make_noise_generator(3, 0);
  setup.noise_correlation = 0.9;
  setup.noise_carry = nullptr;
  rollout(wide, torch::zeros({4, 3, 64, 64}), {}, 4, setup);
  for (const torch::Tensor& n : wide.seen) EXPECT_NEAR(n.var().item<double>(), 4.0, 0.1);
  // forecast rolls out one step per call: the carry continues the correlation across calls, as
  // one rollout of 3 steps does.
  torch::Tensor carry;
  setup.noise = make_noise_generator(7, 0);
  setup.noise_correlation = 0.5;
  setup.noise_carry = &carry;
  std::vector<torch::Tensor> stepwise;
  for (int r = 0; r < 3; ++r) {
    NoiseProbe probe(shape, 2);
    rollout(probe, input, {}, 1, setup);
    stepwise.push_back(probe.seen[0]);
  }
  for (size_t r = 0; r < 3; ++r) EXPECT_TRUE(torch::allclose(stepwise[r], half[r], 1e-6, 1e-6)) << "step " << r;
  // Out of range in a run file: named with the range.
  const std::string error = config_error("noise_correlation = 1.5\n");
  EXPECT_NE(error.find("noise_correlation"), std::string::npos) << error;
  EXPECT_NE(error.find("1.5"), std::string::npos) << error;
}

TEST(Ensemble, AStepTrainsAndTheNoiseStreamAdvances) {
  RunConfig config = storm("ensemble_members = 3\n");
  auto state = make_state(config);
  const models::ModelShape shape = models::model_shape(config);
  const auto batches = synthetic_micro_batches(config, shape, 2, 1, torch::kCPU);
  const torch::Tensor before = state->rollout.noise.get_state();
  TrainingStep step(*state);
  const StepResult r = step.run(batches, 1e-3);
  EXPECT_TRUE(r.applied);
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_GT(r.grad_norm, 0);
  EXPECT_FALSE(torch::equal(before, state->rollout.noise.get_state()));
}

TEST(Ensemble, RunFileKeysSayWhatIsWrong) {
  EXPECT_NE(config_error("ensemble_members = 4\nloss = \"mse\"\n")
                .find("train.loss = \"mse\" cannot train train.ensemble_members = 4"),
            std::string::npos)
      << config_error("ensemble_members = 4\nloss = \"mse\"\n");
  EXPECT_NE(config_error("loss = \"crps\"\n").find("train.loss = \"crps\" needs an ensemble"), std::string::npos)
      << config_error("loss = \"crps\"\n");
  EXPECT_NE(config_error("ensemble_members = 2\nnoise_channels = 0\n").find("train.noise_channels = 0"),
            std::string::npos);
  const std::string alpha = config_error("crps_alpha = 1.5\n");
  EXPECT_NE(alpha.find("crps_alpha"), std::string::npos) << alpha;
  EXPECT_NE(alpha.find("1.5"), std::string::npos) << alpha;
  EXPECT_NE(config_error("ensemble_members = 0\n").find("ensemble_members"), std::string::npos);
  EXPECT_NE(config_error("noise_std = 0\n").find("noise_std"), std::string::npos);
}

TEST(EnsembleScores, CrpsSpreadAndSpreadSkillOfKnownMembers) {
  // One sample, one channel, a 2 x 3 grid of weight 1: members 0 and 2 everywhere, truth 1.
  const torch::Tensor weights = torch::ones({2, 3});
  ScoreAccumulator scores({"t"}, 1, {"model", "persistence"}, weights);
  const torch::Tensor truth = torch::ones({1, 1, 2, 3}), clim = torch::zeros({1, 1, 2, 3});
  torch::Tensor members = torch::zeros({1, 2, 1, 2, 3});
  members.select(1, 1).fill_(2.0);
  scores.add_ensemble(0, 0, members, truth, clim);
  scores.add(1, 0, torch::full({1, 1, 2, 3}, 3.0), truth, clim);
  const LeadScores s = scores.result(10, 0);
  EXPECT_EQ(s.ensemble_members, 2);
  EXPECT_TRUE(s.is_ensemble(0));
  EXPECT_FALSE(s.is_ensemble(1));
  EXPECT_NEAR(s.rmse[0][0][0], 0.0, 1e-12);            // the ensemble mean is the truth
  EXPECT_NEAR(s.crps[0][0][0], 0.0, 1e-12);            // fair CRPS: 1 - 4 / 4
  EXPECT_NEAR(s.spread[0][0][0], std::sqrt(2.0), 1e-12);  // unbiased variance of {0, 2}
  EXPECT_NEAR(s.crps[1][0][0], 2.0, 1e-12);            // a deterministic forecast's CRPS: its MAE
  EXPECT_TRUE(std::isnan(s.spread[1][0][0]));
  // Another sample whose members are both the truth: the means over samples.
  ScoreAccumulator two({"t"}, 1, {"model"}, weights);
  two.add_ensemble(0, 0, members, truth, clim);
  two.add_ensemble(0, 0, torch::ones({1, 2, 1, 2, 3}), truth, clim);
  const LeadScores t = two.result(0, 0);
  EXPECT_NEAR(t.spread[0][0][0], std::sqrt(1.0), 1e-12);  // sqrt(mean(2, 0))
  EXPECT_NEAR(t.crps[0][0][0], 0.0, 1e-12);
  // The fair CRPS of random members against the brute force with alpha 1.
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({2, 5, 1, 2, 3}), y = torch::randn({2, 1, 2, 3});
  ScoreAccumulator random({"t"}, 1, {"model"}, weights);
  random.add_ensemble(0, 0, x, y, torch::zeros_like(y));
  const double expected = brute_force_afcrps(x, y, 1.0).mean().item<double>();
  EXPECT_NEAR(random.result(0, 0).crps[0][0][0], expected, 1e-6);
}

TEST(EnsembleScores, CsvAndTableCarryTheEnsembleColumns) {
  const torch::Tensor weights = torch::ones({2, 3});
  ScoreAccumulator scores({"t"}, 2, {"model", "persistence", "climatology"}, weights);
  const torch::Tensor truth = torch::ones({1, 1, 2, 3}), clim = torch::zeros({1, 1, 2, 3});
  for (int64_t l = 0; l < 2; ++l) {
    scores.add_ensemble(0, l, torch::randn({1, 4, 1, 2, 3}), truth, clim);
    scores.add(1, l, truth * 2, truth, clim);
    scores.add(2, l, clim, truth, clim);
  }
  const LeadScores s = scores.result(5, 6 * 3600);
  const std::string path = ::testing::TempDir() + "/ensemble_scores.csv";
  std::remove(path.c_str());
  write_scores_csv(path, s, false);
  write_scores_csv(path, s, true);  // a resumed run appends under the same header
  std::ifstream in(path);
  std::string header, row;
  std::getline(in, header);
  EXPECT_EQ(header, "step,lead,lead_hours,variable,forecaster,rmse,acc,crps,spread,spread_skill,"
                    "rank_0,rank_1,rank_2,rank_3,rank_4");
  int rows = 0;
  while (std::getline(in, row)) {
    ++rows;
    const bool model = row.find(",model,") != std::string::npos;
    // Deterministic forecasters leave spread, spread/skill and the 5 bins empty; the ensemble fills them.
    EXPECT_EQ(row.size() >= 7 && row.substr(row.size() - 7) == ",,,,,,,", !model) << row;
  }
  EXPECT_EQ(rows, 12);
  const std::string table = scores_table(s);
  EXPECT_NE(table.find("ensemble of 4 members"), std::string::npos) << table;
  EXPECT_NE(table.find("model CRPS"), std::string::npos) << table;
  EXPECT_NE(table.find("spread/skill"), std::string::npos) << table;
  // A deterministic validation keeps its columns (plus the MAE, its CRPS), without the ensemble's.
  ScoreAccumulator plain({"t"}, 1, {"model"}, weights);
  plain.add(0, 0, truth, truth, clim);
  const std::string plain_path = ::testing::TempDir() + "/plain_scores.csv";
  std::remove(plain_path.c_str());
  write_scores_csv(plain_path, plain.result(1, 0), false);
  std::ifstream plain_in(plain_path);
  std::getline(plain_in, header);
  EXPECT_EQ(header, "step,lead,lead_hours,variable,forecaster,rmse,acc,mae");
  EXPECT_EQ(scores_table(plain.result(1, 0)).find("CRPS"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Rank histogram

namespace {

// members [1, M, 1, 1, P] from the rows (one row per member, P points), truth [1, 1, 1, P].
std::pair<torch::Tensor, torch::Tensor> points(const std::vector<std::vector<double>>& members,
                                               const std::vector<double>& truth) {
  const auto M = static_cast<int64_t>(members.size()), P = static_cast<int64_t>(truth.size());
  torch::Tensor x = torch::empty({1, M, 1, 1, P}, torch::kFloat32);
  for (int64_t j = 0; j < M; ++j)
    for (int64_t i = 0; i < P; ++i) x[0][j][0][0][i] = members[static_cast<size_t>(j)][static_cast<size_t>(i)];
  torch::Tensor y = torch::tensor(truth, torch::kFloat64).to(torch::kFloat32).view({1, 1, 1, P});
  return {x, y};
}

std::vector<double> counts(const torch::Tensor& histogram) {  // [1, M + 1] -> its row
  const torch::Tensor row = histogram.select(0, 0).contiguous();
  return std::vector<double>(row.data_ptr<double>(), row.data_ptr<double>() + row.numel());
}

}  // namespace

TEST(RankHistogram, KnownRanksGiveKnownCounts) {
  // Three members, unsorted, at five points; the truth below all, between, above all.
  const auto [x, y] = points({{3, 1, 2, 2, 1}, {1, 3, 3, 3, 3}, {2, 2, 1, 1, 2}}, {0, 1.5, 2.5, 4, 2.5});
  EXPECT_EQ(counts(rank_histogram(x, y)), (std::vector<double>{1, 1, 2, 1}));
  // Only the counted points: the first and the last left out.
  const torch::Tensor counted = torch::tensor({0, 1, 1, 1, 0}, torch::kBool).view({1, 1, 1, 5});
  EXPECT_EQ(counts(rank_histogram(x, y, counted)), (std::vector<double>{0, 1, 1, 1}));
}

TEST(RankHistogram, TiesSplitEvenlyOverTheRanksTheyAllow) {
  // Truth 2 equals one member of {1, 2, 3}: rank 1 or 2, half a point each. Truth 0 equals every
  // member of {0, 0, 0}: any rank 0..3, a quarter each (a dry point of precipitation).
  // Truth 3 equals two members of {1, 3, 3}: ranks 1..3, a third each.
  const auto [x, y] = points({{1, 0, 1}, {2, 0, 3}, {3, 0, 3}}, {2, 0, 3});
  const std::vector<double> got = counts(rank_histogram(x, y));
  const std::vector<double> expected = {0.25, 0.5 + 0.25 + 1.0 / 3, 0.5 + 0.25 + 1.0 / 3, 0.25 + 1.0 / 3};
  ASSERT_EQ(got.size(), expected.size());
  for (size_t r = 0; r < got.size(); ++r) EXPECT_NEAR(got[r], expected[r], 1e-12) << "rank " << r;
  EXPECT_NEAR(std::accumulate(got.begin(), got.end(), 0.0), 3.0, 1e-12);  // every point counts once
}

TEST(RankHistogram, NonFiniteTruthOrMembersAreNotCounted) {
  const double nan = std::nan("");
  const auto [x, y] = points({{1, 1, nan}, {2, 2, 2}}, {0, nan, 5});
  EXPECT_EQ(counts(rank_histogram(x, y)), (std::vector<double>{1, 0, 0}));
  EXPECT_THROW(rank_histogram(x, y.squeeze(0)), Error);
}

TEST(RankHistogram, ValidationCountsItPerLeadInTheCsvAndSumsAcrossRanks) {
  // Two channels on a 1 x 2 grid, one lead; two batches of one sample. Channel 0's truth is above
  // both members at both points, then below; channel 1's between them.
  const torch::Tensor weights = torch::ones({1, 2});
  const torch::Tensor clim = torch::zeros({1, 2, 1, 2});
  torch::Tensor members = torch::zeros({1, 2, 2, 1, 2});
  members.select(1, 1).fill_(1.0);  // members 0 and 1 everywhere
  ScoreAccumulator scores({"a", "b"}, 1, {"model", "persistence"}, weights);
  torch::Tensor truth = torch::full({1, 2, 1, 2}, 0.5);
  truth.select(1, 0).fill_(2.0);
  scores.add_ensemble(0, 0, members, truth, clim);
  scores.add(1, 0, clim, truth, clim);
  truth.select(1, 0).fill_(-1.0);
  // The second sample's mask leaves channel 1's second point out.
  torch::Tensor mask = torch::ones({1, 2, 1, 2});
  mask[0][1][0][1] = 0;
  scores.add_ensemble(0, 0, members, truth, clim, mask);
  const LeadScores s = scores.result(7, 0);
  EXPECT_EQ(s.ranks[0][0][0], (std::vector<double>{2, 0, 2}));
  EXPECT_EQ(s.ranks[0][0][1], (std::vector<double>{0, 3, 0}));
  EXPECT_TRUE(s.ranks[1][0][0].empty());  // persistence is no ensemble
  // The sums carry the bins: another rank's share (the same) summed in doubles every count.
  ScoreAccumulator other({"a", "b"}, 1, {"model", "persistence"}, weights);
  other.expect_ensemble(0, 2);  // a rank with no sample still has the columns
  ASSERT_EQ(other.sums().sizes(), scores.sums().sizes());
  other.set_sums(scores.sums() * 2);
  EXPECT_EQ(other.result(7, 0).ranks[0][0][1], (std::vector<double>{0, 6, 0}));
  // Another ensemble size in the same validation has no histogram to join.
  EXPECT_THROW(scores.add_ensemble(0, 0, torch::zeros({1, 3, 2, 1, 2}), truth, clim), Error);
  // validation.csv: rank_0..rank_2 after spread_skill, the counts on the model's rows.
  const std::string path = ::testing::TempDir() + "/rank_scores.csv";
  std::remove(path.c_str());
  write_scores_csv(path, s, false);
  std::ifstream in(path);
  std::string header, row, text;
  std::getline(in, header);
  EXPECT_EQ(header, "step,lead,lead_hours,variable,forecaster,rmse,acc,crps,spread,spread_skill,rank_0,rank_1,rank_2");
  while (std::getline(in, row)) text += row + "\n";
  EXPECT_NE(text.find(",a,model,"), std::string::npos) << text;
  EXPECT_NE(text.find(",2,0,2\n"), std::string::npos) << text;
  EXPECT_NE(text.find(",0,3,0\n"), std::string::npos) << text;
  EXPECT_NE(text.find(",b,persistence,"), std::string::npos) << text;
  for (size_t at = text.find(",persistence,"); at != std::string::npos; at = text.find(",persistence,", at + 1))
    EXPECT_EQ(text.substr(text.find('\n', at) - 5, 5), ",,,,,") << text;  // spread, spread/skill, 3 bins
}

TEST(EnsembleScores, SvgDrawsTheCrpsAndTheSpreadBesideTheRmse) {
  const torch::Tensor weights = torch::ones({2, 3});
  ScoreAccumulator scores({"t", "z"}, 3, {"model", "persistence", "climatology"}, weights, {"K", "m2 s-2"});
  const torch::Tensor clim = torch::zeros({1, 2, 2, 3});
  torch::manual_seed(5);
  for (int64_t l = 0; l < 3; ++l) {
    const torch::Tensor truth = torch::randn({1, 2, 2, 3});
    scores.add_ensemble(0, l, torch::randn({1, 4, 2, 2, 3}), truth, clim);
    scores.add(1, l, truth * 2, truth, clim);
    scores.add(2, l, clim, truth, clim);
  }
  const std::string svg = scores_svg(scores.result(5, 6 * 3600), "ensemble");
  for (const char* title : {">t CRPS [K]<", ">z CRPS [m2 s-2]<", ">t spread and RMSE [K]<", ">z spread and RMSE [m2 s-2]<",
                            ">model spread<"})
    EXPECT_NE(svg.find(title), std::string::npos) << title;
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = svg.find(what); at != std::string::npos; at = svg.find(what, at + 1)) ++n;
    return n;
  };
  // 2 channels x (RMSE, ACC, CRPS of 3 forecasters + the model's RMSE and spread + the rank
  // histogram's flat line).
  EXPECT_EQ(count("<polyline"), 2u * (3 * 3 + 2 + 1));
  EXPECT_EQ(count("<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" stroke-dasharray"), 2u);
  // A deterministic validation's figure has neither.
  ScoreAccumulator plain({"t"}, 1, {"model"}, weights);
  plain.add(0, 0, torch::ones({1, 1, 2, 3}), torch::zeros({1, 1, 2, 3}), torch::zeros({1, 1, 2, 3}));
  const std::string plain_svg = scores_svg(plain.result(1, 0), "deterministic");
  EXPECT_EQ(plain_svg.find("CRPS"), std::string::npos);
  EXPECT_EQ(plain_svg.find("spread"), std::string::npos);
}

TEST(RankHistogram, RelativeFrequenciesAreOneWhereFlat) {
  EXPECT_EQ(rank_frequencies({2, 0, 2}), (std::vector<double>{1.5, 0, 1.5}));  // U-shaped: above 1 at the ends
  EXPECT_EQ(rank_frequencies({5, 5, 5, 5}), (std::vector<double>{1, 1, 1, 1}));
  EXPECT_TRUE(rank_frequencies({}).empty());
  EXPECT_TRUE(rank_frequencies({0, 0, 0}).empty());
  EXPECT_EQ(rank_histogram_leads(1), (std::vector<size_t>{0}));
  EXPECT_EQ(rank_histogram_leads(2), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(rank_histogram_leads(4), (std::vector<size_t>{0, 1, 3}));
  EXPECT_EQ(rank_histogram_leads(5), (std::vector<size_t>{0, 2, 4}));
}

TEST(RankHistogram, SvgDrawsABarPerRankAtThreeLeadsAgainstTheFlatLine) {
  // Two members at 0 and 1 on a 1 x 2 grid, 4 leads, two channels: channel a's truth is above both
  // members (rank 2) at lead 1 and below them (rank 0) at the others; channel b's between them.
  const torch::Tensor weights = torch::ones({1, 2}), clim = torch::zeros({1, 2, 1, 2});
  torch::Tensor members = torch::zeros({1, 2, 2, 1, 2});
  members.select(1, 1).fill_(1.0);
  ScoreAccumulator scores({"a", "b"}, 4, {"model", "persistence"}, weights);
  for (int64_t l = 0; l < 4; ++l) {
    torch::Tensor truth = torch::full({1, 2, 1, 2}, 0.5);
    truth.select(1, 0).fill_(l == 0 ? 2.0 : -1.0);
    scores.add_ensemble(0, l, members, truth, clim);
    scores.add(1, l, clim, truth, clim);
  }
  const LeadScores s = scores.result(3, 6 * 3600);
  const std::string svg = scores_svg(s, "ranks");
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = svg.find(what); at != std::string::npos; at = svg.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_NE(svg.find(">a rank histogram<"), std::string::npos);
  EXPECT_NE(svg.find(">b rank histogram<"), std::string::npos);
  EXPECT_NE(svg.find(">rank of the truth<"), std::string::npos);
  // The legend: leads 6 h, 12 h (the middle of 4) and 24 h; 18 h is not drawn.
  for (const char* lead : {">lead 6h<", ">lead 12h<", ">lead 24h<", ">flat (reliable)<"})
    EXPECT_NE(svg.find(lead), std::string::npos) << lead;
  EXPECT_EQ(svg.find(">lead 18h<"), std::string::npos);
  // Bars in the three lead colours: 2 channels x 3 bins each (zero-height bars included), plus
  // one legend square per colour.
  EXPECT_EQ(count("fill=\"#9ecae1\""), 2u * 3 + 1);
  EXPECT_EQ(count("fill=\"#4292c6\""), 2u * 3 + 1);
  EXPECT_EQ(count("fill=\"#08306b\""), 2u * 3 + 1);
  // Heights: channel b at lead 1 is all rank 1, relative frequency 3 (3 bins); channel a at lead 1
  // all rank 2. Their tallest bars are the same height, 3x the flat line's height above the axis.
  auto heights = [&](const std::string& color) {
    std::vector<double> out;
    const std::string key = "fill=\"" + color + "\"/>";
    for (size_t at = svg.find(key); at != std::string::npos; at = svg.find(key, at + 1)) {
      const size_t rect = svg.rfind("<rect", at), h = svg.find("height=\"", rect);
      if (h < at) out.push_back(std::stod(svg.substr(h + 8)));
    }
    if (!out.empty()) out.erase(out.begin());  // the legend's square, drawn before the panels
    return out;
  };
  const std::vector<double> first = heights("#9ecae1");
  ASSERT_EQ(first.size(), 6u);
  // Channel a: ranks 0, 1, 2 -> 0, 0, 3; channel b: 0, 3, 0.
  EXPECT_EQ(first[0], 0.0);
  EXPECT_EQ(first[1], 0.0);
  EXPECT_GT(first[2], 0.0);
  EXPECT_EQ(first[3], 0.0);
  EXPECT_NEAR(first[4], first[2], 0.11);
  EXPECT_EQ(first[5], 0.0);
  const std::vector<double> last = heights("#08306b");  // channel a at 24 h: all rank 0
  ASSERT_EQ(last.size(), 6u);
  EXPECT_NEAR(last[0], first[2], 0.11);
  EXPECT_EQ(last[2], 0.0);
  // The SVG parses as XML.
  const std::string path = ::testing::TempDir() + "/rank_histogram.svg";
  std::ofstream(path) << svg;
  const std::string command = "/usr/bin/python3 -c \"import sys, xml.etree.ElementTree as E; "
                              "r = E.parse(sys.argv[1]).getroot(); "
                              "assert r.tag == '{http://www.w3.org/2000/svg}svg', r.tag\" " + path;
  EXPECT_EQ(std::system(command.c_str()), 0) << path;
  // A deterministic validation draws no rank histogram.
  ScoreAccumulator plain({"t"}, 1, {"model"}, weights);
  plain.add(0, 0, torch::ones({1, 1, 1, 2}), torch::zeros({1, 1, 1, 2}), torch::zeros({1, 1, 1, 2}));
  EXPECT_EQ(scores_svg(plain.result(1, 0), "deterministic").find("rank histogram"), std::string::npos);
}
