// Ensemble groups end to end (distributed.ensemble_group): the built wxtrain binary trains a
// 4-member ensemble of the storm U-Net as one process holding all 4 members and as `mpirun -np 2`
// with ensemble_group = 2 (each rank holding 2 members of the same samples, the members gathered
// before the afCRPS), and the checkpoints are compared. Registered in CTest as
// trainer.ensemble_group_train_np2 (labels distributed;trainer).
//
// Why the two can agree: both ranks of the group read the samples one process reads (the loader
// shards by group: one group here); the noise of member j of sample b is drawn from the group's
// stream exactly as the one process draws it (each rank draws all 4 members' and keeps its 2); the
// loss is the same afCRPS of the same 4 members; and the gradient of the one process is the SUM of
// the two ranks' gradients (each gets its own members' part through the gather), which the step
// forms as the world average times the group size. The runs are fp32: what remains is summation
// order (and the convolutions' batch of 4 rows instead of 8).
//
// The optimizer is SGD without clipping, so the weights follow the gradient's scale: a group that
// averaged instead of summing (half the gradient) would move every weight half as far, which Adam
// (scale-invariant) or clipping would hide.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "mpi_runs.h"
#include "run_outputs.h"
#include "storm_run.h"
#include "trainer/checkpoint_io.h"

using namespace wxtrain;
using namespace wxtrain::trainer;
using testing_support::losses;
using testing_support::max_difference;
using testing_support::read_file;
namespace fs = std::filesystem;

namespace {

const std::string kWxtrain = WXTRAIN_BINARY;
const std::string kMpirun = testing_support::mpirun(2);

std::string base_dir() {
  static const std::string dir = testing_support::fresh_run_folder("wxtrain_ensemble_group");
  return dir;
}

using Result = testing_support::CommandResult;

// bash -c command with a 120 s limit, stdout and stderr into `log`.
Result run(const std::string& command, const std::string& log) {
  return testing_support::run_logged(command, log, 120);
}

// A 4-member ensemble of the trainer tests' storm U-Net in fp32, SGD without clipping, rollout 2.
std::string run_file() {
  static const std::string path = [] {
    const std::string p = base_dir() + "/run.toml";
    std::ofstream(p) << testing_support::storm_run_text(
        base_dir() + "/unused",
        "precision = \"fp32\"\noptimizer = \"sgd\"\ngrad_clip = 0\nensemble_members = 4\n"
        "noise_channels = 2\nval_every = 4\n");
    return p;
  }();
  return path;
}

std::string train_command(const std::string& out_dir, const std::string& extra = "") {
  return kWxtrain + " train -q -c " + run_file() +
         " --set train.steps=4 --set train.lr=2e-2 --set train.batch_size=2 --set data.rollout_steps=2 --set train.out_dir=" + out_dir +
         " " + extra;
}

// Trains into base_dir()/name once per test binary (tests share the runs).
std::string trained(const std::string& name, bool mpi, const std::string& extra = "") {
  const std::string dir = base_dir() + "/" + name;
  if (fs::exists(dir + "/checkpoint.pt")) return dir;
  const Result r = run((mpi ? kMpirun : std::string()) + train_command(dir, extra), dir + ".log");
  EXPECT_EQ(r.code, 0) << name << ":\n" << r.output;
  return dir;
}

const char* const kGroupOf2 = "--set distributed.ensemble_group=2";

// validation.csv's numeric cells by (row key, column): "step,lead,variable,forecaster" -> values.
std::map<std::string, std::vector<double>> validation_rows(const std::string& dir) {
  std::ifstream csv(dir + "/validation.csv");
  std::string line;
  std::getline(csv, line);
  std::map<std::string, std::vector<double>> out;
  while (std::getline(csv, line)) {
    std::stringstream s(line);
    std::string cell;
    std::vector<std::string> cells;
    while (std::getline(s, cell, ',')) cells.push_back(cell);
    if (cells.size() < 6) continue;
    const std::string key = cells[0] + "," + cells[1] + "," + cells[3] + "," + cells[4];
    for (size_t i = 5; i < cells.size(); ++i) out[key].push_back(cells[i].empty() ? NAN : std::stod(cells[i]));
  }
  return out;
}

// fp32 on both sides, the same samples, noise and loss: the remaining differences are the order
// of sums (the group's two gradients added by the all-reduce, the convolutions over 4 rows instead
// of 8), ~1e-7 relative per step. SGD moves a weight by lr x gradient, so over 4 steps the weights
// agree to a few 1e-7; 2e-6 leaves room for the growth of round-off through the rollout. A wrong
// gradient scale (mean instead of sum over the group) or a member with another's noise moves
// weights by a sizeable share of an update: the test checks below that an update is far above
// the tolerance.
constexpr double kTolerance = 2e-6;

}  // namespace

TEST(EnsembleGroupTrain, TwoRanksHoldingTwoMembersEachTrainTheWeightsOfOneProcessHoldingFour) {
  const std::string single = trained("single_m4", false);
  const std::string group = trained("group2_m4", true, kGroupOf2);
  const Checkpoint a = load_checkpoint(single + "/checkpoint.pt"), b = load_checkpoint(group + "/checkpoint.pt");
  EXPECT_EQ(a.step, 4);
  EXPECT_EQ(b.step, 4);
  EXPECT_EQ(b.world_size, 2);
  // The checkpoints record the ensemble.
  EXPECT_EQ(a.ensemble_members, 4);
  EXPECT_EQ(a.ensemble_group, 1);
  EXPECT_EQ(b.ensemble_members, 4);
  EXPECT_EQ(b.ensemble_group, 2);
  EXPECT_EQ(b.noise_channels, 2);
  EXPECT_DOUBLE_EQ(b.crps_alpha, 0.95);
  EXPECT_DOUBLE_EQ(b.noise_std, 1.0);
  // One noise stream per group, held by both of its ranks.
  ASSERT_TRUE(b.noise_rng_state.defined());
  ASSERT_EQ(b.noise_rng_state.size(0), 2);
  EXPECT_TRUE(torch::equal(b.noise_rng_state[0], b.noise_rng_state[1]));
  // ... the one process's stream, advanced by the same draws.
  EXPECT_TRUE(torch::equal(a.noise_rng_state[0], b.noise_rng_state[0]));
  std::string worst;
  const double weights = max_difference(a.model, b.model, &worst);
  std::cerr << "largest weight difference, 2 ranks x 2 members vs 1 process x 4: " << weights << " in " << worst
            << "\n";
  EXPECT_LE(weights, kTolerance) << "largest difference in " << worst;
  EXPECT_LE(max_difference(a.optimizer, b.optimizer, &worst), kTolerance) << "optimizer: " << worst;
  // The same loss at every step (the group's ranks log the loss of all four members).
  const auto la = losses(single), lb = losses(group);
  ASSERT_EQ(la.size(), 4u);
  ASSERT_EQ(lb.size(), 4u);
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-5 * std::abs(la[i])) << "step " << i + 1;
  // Validation scores all 4 members in both layouts (the group gathers them): the same CRPS,
  // spread and RMSE to round-off.
  const auto va = validation_rows(single), vb = validation_rows(group);
  ASSERT_FALSE(va.empty());
  ASSERT_EQ(va.size(), vb.size());
  for (const auto& [key, values] : va) {
    ASSERT_TRUE(vb.count(key)) << key;
    ASSERT_EQ(values.size(), vb.at(key).size()) << key;
    for (size_t i = 0; i < values.size(); ++i) {
      if (std::isnan(values[i])) {
        EXPECT_TRUE(std::isnan(vb.at(key)[i])) << key << " column " << i;
        continue;
      }
      EXPECT_NEAR(values[i], vb.at(key)[i], 1e-4 * std::abs(values[i]) + 1e-6) << key << " column " << i;
    }
  }
}

TEST(EnsembleGroupTrain, AGroupRunResumesAsOneProcessHoldingAllMembers) {
  // Killed at step 2 as two ranks of 2 members, resumed as one process of 4: the noise stream of
  // the group continues (the group's row of the checkpoint), the loader continues, and the run ends
  // on the weights of the uninterrupted one-process run.
  const std::string single = trained("single_m4", false);
  const std::string dir = base_dir() + "/group_then_single";
  Result first = run(kMpirun + train_command(dir, std::string(kGroupOf2) + " --stop-after 2"), dir + ".first.log");
  ASSERT_EQ(first.code, 0) << first.output;
  const Checkpoint halfway = load_checkpoint(dir + "/checkpoint.pt");
  ASSERT_EQ(halfway.step, 2);
  Result second = run(train_command(dir, "--resume"), dir + ".second.log");
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_EQ(second.output.find("noise continues from streams seeded"), std::string::npos) << second.output;
  const Checkpoint a = load_checkpoint(single + "/checkpoint.pt"), b = load_checkpoint(dir + "/checkpoint.pt");
  EXPECT_EQ(b.step, 4);
  std::string worst;
  EXPECT_LE(max_difference(a.model, b.model, &worst), kTolerance) << "largest difference in " << worst;
  // The test can fail: two steps of SGD move the weights far more than the tolerance.
  const double moved = max_difference(halfway.model, b.model, &worst);
  EXPECT_GT(moved, 100 * kTolerance) << "steps 3-4 moved the weights by " << moved << " only";
}

TEST(EnsembleGroupTrain, IndivisibleLayoutsAndAnotherMemberCountAreRefused) {
  // Members not divisible by the group: the run file is refused (exit 2) naming both keys.
  Result r = run(train_command(base_dir() + "/m3", std::string(kGroupOf2) + " --set train.ensemble_members=3"),
                 base_dir() + "/m3.log");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("distributed.ensemble_group = 2 does not divide train.ensemble_members = 3"),
            std::string::npos)
      << r.output;
  // A world the group does not divide: one process with a group of 2 ...
  r = run(train_command(base_dir() + "/world1", kGroupOf2), base_dir() + "/world1.log");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("distributed.ensemble_group = 2 does not divide the world of 1 rank(s)"), std::string::npos)
      << r.output;
  // ... and two ranks with a group of 4 (4 members: divisible by the group, not the world).
  r = run(kMpirun + train_command(base_dir() + "/world2", "--set distributed.ensemble_group=4"),
          base_dir() + "/world2.log");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("distributed.ensemble_group = 4 does not divide the world of 2 rank(s)"), std::string::npos)
      << r.output;
  // Resuming a 4-member run with 2 members per sample.
  const std::string single = trained("single_m4", false);
  r = run(train_command(single, "--resume --set train.ensemble_members=2"),
          base_dir() + "/resume_m2.log");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("was trained with train.ensemble_members = 4"), std::string::npos) << r.output;
}
