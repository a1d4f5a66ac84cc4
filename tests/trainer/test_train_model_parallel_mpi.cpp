// Model parallelism end to end (distributed.model_parallel; docs/distributed.md, "Model
// parallelism"): `mpirun -np 2 wxtrain train` with model_parallel = 2 — the two ranks share every
// sample, each running the gnn on its band of the storm grid's latitude rows and exchanging the
// halo rows before each message-passing layer — against one process training the whole grid, on
// the real storm data with rollout 2, both activation checkpointings, accumulation, mid-run
// checkpoints and validation; resuming the sharded run's checkpoint in one process; the refusals.
// Registered in CTest with the label `distributed` (tests/trainer/CMakeLists.txt).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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
  static const std::string dir = testing_support::fresh_run_folder("wxtrain_mp");
  return dir;
}

// The small models each test trains, by name.
std::string model_text(const std::string& name) {
  if (name == "graphcast")  // M3 over the storm grid: a regional mesh of a few dozen nodes
    return "name = \"graphcast\"\nlatent = 16\nprocessor_layers = 2\nmlp_layers = 1\nmesh_refinement = 3\n";
  if (name == "aifs")  // O8's 544 hidden nodes; a window of 32 of them on either side of a rank's range
    return "name = \"aifs\"\nnum_channels = 16\nnum_heads = 2\nmapper_num_heads = 2\nmlp_hidden_ratio = 2\n"
           "processor_layers = 2\nhidden_grid = \"o8\"\nwindow_size = 32\ndata_trainable = 2\n"
           "hidden_trainable = 2\nedge_trainable = 2\nencoder_chunks = 2\n";
  return "name = \"gnn\"\nlatent = 16\nprocessor_layers = 2\nmlp_layers = 1\n";
}

std::string run_file(const std::string& model = "gnn") {
  const std::string path = base_dir() + "/" + model + ".toml";
  if (!fs::exists(path))
    std::ofstream(path) << testing_support::storm_run_text(base_dir() + "/unused", "grad_clip = 1.0\n", model_text(model));
  return path;
}

using Result = testing_support::CommandResult;

// bash -c command with a 240 s limit, stdout and stderr into `log`.
Result run(const std::string& command, const std::string& log) {
  return testing_support::run_logged(command, log, 240);
}

// Rollout 2 with both kinds of activation checkpointing, 2 accumulation micro-steps, a checkpoint
// written mid-run (step 3) and at the end, validation every 3 steps.
const std::string kEverything =
    "--set data.rollout_steps=2 --set train.checkpointing=true --set train.rollout_checkpointing=true "
    "--set train.accumulation=2 --set train.checkpoint_every=3 --set train.val_every=3 --set train.steps=6";

std::string trained(const std::string& name, bool sharded, const std::string& extra = kEverything + " --set train.batch_size=2",
                    const std::string& model = "gnn") {
  const std::string dir = base_dir() + "/" + name;
  if (fs::exists(dir + "/checkpoint.pt")) return dir;
  const Result r = run((sharded ? kMpirun : std::string()) + kWxtrain + " train -c " + run_file(model) +
                           " --set train.out_dir=" + dir + " " + extra +
                           (sharded ? " --set distributed.model_parallel=2" : ""),
                       dir + ".log");
  EXPECT_EQ(r.code, 0) << name << ":\n" << r.output;
  return dir;
}

Checkpoint checkpoint_in(const std::string& dir) { return load_checkpoint(dir + "/checkpoint.pt"); }

// Two validation.csv files with the same rows and columns whose words are equal and whose numbers
// agree: persistence's and climatology's, which the weights do not touch, within 1e-6 relative
// (the bands' sums are added in another order than one process's); the model's within 1e-3, as its
// weights differ by round-off through Adam (above). A band left out or counted twice moves an
// RMSE by tens of percent.
void expect_same_scores(const std::string& a_path, const std::string& b_path) {
  const std::string a = read_file(a_path), b = read_file(b_path);
  ASSERT_FALSE(a.empty()) << a_path;
  std::istringstream la(a), lb(b);
  std::string row_a, row_b;
  int rows = 0, numbers = 0;
  while (std::getline(la, row_a)) {
    ASSERT_TRUE(static_cast<bool>(std::getline(lb, row_b))) << b_path << " has fewer rows than " << a_path;
    ++rows;
    const double tolerance = row_a.find(",model,") != std::string::npos ? 1e-3 : 1e-6;
    std::istringstream ca(row_a), cb(row_b);
    std::string x, y;
    while (std::getline(ca, x, ',')) {
      ASSERT_TRUE(static_cast<bool>(std::getline(cb, y, ','))) << "row " << rows << ": " << row_b;
      char* end_x = nullptr;
      char* end_y = nullptr;
      const double vx = std::strtod(x.c_str(), &end_x), vy = std::strtod(y.c_str(), &end_y);
      if (!x.empty() && *end_x == '\0' && !y.empty() && *end_y == '\0' && std::isfinite(vx)) {
        EXPECT_NEAR(vx, vy, tolerance * std::max(1.0, std::abs(vx))) << "row " << rows << ":\n" << row_a << "\n" << row_b;
        ++numbers;
      } else {
        EXPECT_EQ(x, y) << "row " << rows;
      }
    }
  }
  EXPECT_FALSE(static_cast<bool>(std::getline(lb, row_b))) << b_path << " has more rows than " << a_path;
  EXPECT_GT(rows, 2);
  EXPECT_GT(numbers, 10);
}

}  // namespace

TEST(ModelParallel, TwoBandsTrainTheGnnToTheWeightsOfOneProcess) {
  const std::string whole = trained("whole", false), bands = trained("bands", true);
  const Checkpoint a = checkpoint_in(whole), b = checkpoint_in(bands);
  EXPECT_EQ(a.step, 6);
  EXPECT_EQ(b.step, 6);
  EXPECT_EQ(b.world_size, 2);
  std::string worst;
  // The same samples and the same function; what differs is the order of float sums (the loss is
  // two bands' partial sums, the gradient two ranks' sum, a halo node's gradient the sum of its
  // owner's and its reader's): ~1e-7 relative, which Adam's 1/sqrt(v) turns into up to ~1% of an lr
  // step (2e-3) where a gradient is near zero, as for data parallelism (test_train_mpi.cpp). A
  // lost halo, a wrong band or a missing gradient moves weights by whole lr steps.
  EXPECT_LE(max_difference(a.model, b.model, &worst), 3e-5) << "largest difference in " << worst;
  EXPECT_LE(max_difference(a.optimizer, b.optimizer, &worst), 1e-5) << "optimizer: " << worst;
  // The checkpoint is the one-process run's: the whole graph's buffers, the same names and shapes.
  for (const auto& [name, t] : a.model) {
    ASSERT_TRUE(b.model.count(name)) << name;
    EXPECT_EQ(b.model.at(name).sizes(), t.sizes()) << name;
  }
  // The bands' losses summed over the group are the whole grid's loss.
  const auto la = losses(whole), lb = losses(bands);
  ASSERT_EQ(la.size(), 6u);
  ASSERT_EQ(lb.size(), 6u);
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-5 * std::abs(la[i])) << "step " << i + 1;
  EXPECT_NE(la.front(), la.back());
  // Validation scores each band and sums the bands' per-sample sums over the group: the whole
  // grid's scores, those of one process.
  expect_same_scores(whole + "/validation.csv", bands + "/validation.csv");
  // The storm grid is 33 x 36: bands of 17 and 16 rows; radius 1 reads one row of the other band,
  // so an exchange moves 2 x 36 nodes of 16 latents, 72 x 16 x 2 samples x 4 bytes = 9216 bytes.
  const std::string log = read_file(bands + ".log");
  EXPECT_NE(log.find("1 model-parallel group(s) of 2 ranks"), std::string::npos) << log;
  EXPECT_NE(log.find("bands of 17, 16 latitude rows; halo exchange: 72 nodes x 16 latents, 9216 bytes"),
            std::string::npos)
      << log;
  // Each rank read only its band: rank 0's micro-batch is 17 of the group's 33 rows. The storm
  // data (1.8 MB) is preloaded at open and cut to the band, so nothing more is read for samples.
  const std::string data_line = "model parallel data: rank 0 reads its band of 17 of 33 latitude rows; its micro-batch is ";
  const size_t at = log.find(data_line);
  ASSERT_NE(at, std::string::npos) << log;
  double rank0 = 0, group = 0;
  ASSERT_EQ(std::sscanf(log.c_str() + at + data_line.size(), "%lf bytes of its group's %lf", &rank0, &group), 2) << log;
  // Micro-batch 2: input 2 x 12 channels, forcings none, target and mask 2 x 2 rollout x 6; 36 columns, 4 bytes.
  EXPECT_EQ(rank0, 2.0 * (12 + 2 * 6 * 2) * 17 * 36 * 4);
  EXPECT_EQ(group, 2.0 * (12 + 2 * 6 * 2) * 33 * 36 * 4);
  EXPECT_NE(log.find("archive bytes read for its samples so far: 0 of its group's 0 (the data was small enough"),
            std::string::npos)
      << log;
}

TEST(ModelParallel, TwoDataParallelGroupsOfTwoBandsTrainLikeOneProcess) {
  // mpirun -np 4, model_parallel = 2: two data-parallel groups of two bands, micro-batch 2 each,
  // against one process at micro-batch 4 (the same samples per step).
  const std::string whole = trained("whole_b4", false, kEverything + " --set train.batch_size=4");
  const std::string dir = base_dir() + "/np4";
  const Result r = run(testing_support::mpirun(4) +
                           kWxtrain + " train -c " + run_file() + " --set train.out_dir=" + dir + " " + kEverything +
                           " --set train.batch_size=2 --set distributed.model_parallel=2",
                       dir + ".log");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("2 model-parallel group(s) of 2 ranks"), std::string::npos) << r.output;
  std::string worst;
  EXPECT_LE(max_difference(checkpoint_in(whole).model, checkpoint_in(dir).model, &worst), 3e-5) << worst;
  const auto la = losses(whole), lb = losses(dir);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-5 * std::abs(la[i])) << "step " << i + 1;
}

// The models whose encoder and decoder cross between the grid and a second node set (GraphCast's
// mesh, AIFS's hidden grid with its sliding-window transformer): rollout 2 with both checkpointings, accumulation, mid-run checkpoints and validation, as
// the gnn above; two bands at micro-batch 4 and two data-parallel groups of two bands at micro-batch
// 2, both against one process at micro-batch 4.
class ModelParallelModel : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelParallelModel, TwoBandsAndTwoGroupsOfTwoBandsTrainLikeOneProcess) {
  const std::string model = GetParam();
  const std::string batch4 = kEverything + " --set train.batch_size=4";
  const std::string whole = trained(model + "_whole_b4", false, batch4, model);
  const std::string bands = trained(model + "_bands_b4", true, batch4, model);
  const std::string dir = base_dir() + "/" + model + "_np4";
  const Result r = run(testing_support::mpirun(4) +
                           kWxtrain + " train -c " + run_file(model) + " --set train.out_dir=" + dir + " " +
                           kEverything + " --set train.batch_size=2 --set distributed.model_parallel=2",
                       dir + ".log");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("2 model-parallel group(s) of 2 ranks"), std::string::npos) << r.output;
  const Checkpoint a = checkpoint_in(whole);
  EXPECT_EQ(a.step, 6);
  const auto la = losses(whole);
  ASSERT_EQ(la.size(), 6u);
  EXPECT_NE(la.front(), la.back());
  for (const std::string& run_dir : {bands, dir}) {
    const Checkpoint b = checkpoint_in(run_dir);
    EXPECT_EQ(b.step, 6) << run_dir;
    std::string worst;
    // As for the gnn: float sums in another order, through Adam's 1/sqrt(v) (3e-5); a lost halo,
    // a misassigned mesh node or a missing gradient moves weights by whole lr steps (2e-3). AIFS's
    // mapper key biases have a gradient of zero in exact arithmetic (the softmax ignores a shift
    // common to a receiver's scores): theirs is round-off in both runs, which Adam scales up to a
    // fraction of an lr step, so they are held to a quarter of one (5e-4) apart.
    trainer::TensorMap weights_a = a.model, weights_b = b.model;
    const trainer::TensorMap key_bias_a = testing_support::take_round_off_weights(weights_a);
    const trainer::TensorMap key_bias_b = testing_support::take_round_off_weights(weights_b);
    EXPECT_LE(max_difference(weights_a, weights_b, &worst), 3e-5) << run_dir << ": largest difference in " << worst;
    if (!key_bias_a.empty()) EXPECT_LE(max_difference(key_bias_a, key_bias_b, &worst), 5e-4) << run_dir << ": " << worst;
    EXPECT_LE(max_difference(a.optimizer, b.optimizer, &worst), 1e-5) << run_dir << ": optimizer " << worst;
    // A one-process checkpoint: the whole graph's buffers.
    for (const auto& [name, t] : a.model) {
      ASSERT_TRUE(b.model.count(name)) << name;
      EXPECT_EQ(b.model.at(name).sizes(), t.sizes()) << name;
    }
    const auto lb = losses(run_dir);
    ASSERT_EQ(lb.size(), la.size()) << run_dir;
    for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-5 * std::abs(la[i])) << run_dir << " step " << i + 1;
  }
  expect_same_scores(whole + "/validation.csv", bands + "/validation.csv");
  // The header: the processor's exchange, and the encoder's and decoder's.
  const std::string log = read_file(bands + ".log");
  EXPECT_NE(log.find("bands of 17, 16 latitude rows; halo exchange: "), std::string::npos) << log;
  EXPECT_NE(log.find("model parallel: encoder halo "), std::string::npos) << log;
}

INSTANTIATE_TEST_SUITE_P(Graph, ModelParallelModel, ::testing::Values("graphcast", "aifs"));

TEST(ModelParallel, ASharedRunResumesInOneProcess) {
  const std::string extra = "--set data.rollout_steps=2 --set train.steps=6 --set train.batch_size=2";
  const std::string reference = trained("resume_reference", false, extra);
  const std::string dir = base_dir() + "/resume";
  const std::string common = kWxtrain + " train -c " + run_file() + " --set train.out_dir=" + dir + " " + extra;
  const Result first = run(kMpirun + common + " --stop-after 3 --set distributed.model_parallel=2", dir + ".first.log");
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_EQ(checkpoint_in(dir).step, 3);
  const Result second = run(common + " --resume", dir + ".second.log");
  ASSERT_EQ(second.code, 0) << second.output;
  const Checkpoint c = checkpoint_in(dir);
  EXPECT_EQ(c.step, 6);
  std::string worst;
  EXPECT_LE(max_difference(checkpoint_in(reference).model, c.model, &worst), 3e-5) << worst;
}

// A point set: the O12 cells of tests/data/cells_fixture.py (xarray's NetCDF with a cell dimension),
// cut to a region across the 0/360 seam, with computed forcings (insolation, per cell and valid
// time). The bands are ranges of the region's cells, read alone from the file; their forcings are
// computed for their cells. Two bands train the gnn to one process's weights and scores.
TEST(ModelParallel, TwoBandsOfCellsReadAloneTrainLikeOneProcess) {
  const std::string dir = base_dir() + "/cells";
  const std::string fixture = WXTRAIN_SYSTEM_PYTHON + std::string(" ") + WXTRAIN_SOURCE_DIR +
                              "/tests/data/cells_fixture.py " + dir + "/data";
  ASSERT_EQ(run(fixture, dir + "_fixture.log").code, 0) << read_file(dir + "_fixture.log");
  const std::string cells = dir + "/data/cells.nc";
  std::string text = model_text("gnn") +
                     "\n[data]\nhistory = 2\nval_fraction = 0.25\ntime_step = \"6h\"\n"
                     "forcings = [\"cos_latitude\", \"insolation\"]\n"
                     "region = { lat = [-50, 70], lon = [300, 100] }\n";
  for (const char* source : {"name = \"z\"\nvariable = \"z\"\nlevels = [500, 850]\n", "name = \"t\"\nvariable = \"t\"\nlevels = [850]\n",
                             "name = \"t2m\"\nvariable = \"t2m\"\n"})
    text += "[[data.sources]]\nfile = \"" + cells + "\"\n" + source;
  text = "[model]\n" + text +
         "\n[train]\nbatch_size = 2\nlr = 2e-3\nsteps = 4\nwarmup_steps = 1\nseed = 3\ncheckpoint_every = 0\n"
         "log_every = 1000\nval_every = 2\ngrad_clip = 1.0\n";
  const std::string run_path = dir + "/cells.toml";
  std::ofstream(run_path) << text;
  const Result one = run(kWxtrain + " train -c " + run_path + " --set train.out_dir=" + dir + "/whole", dir + "_whole.log");
  ASSERT_EQ(one.code, 0) << one.output;
  const Result two = run(kMpirun + kWxtrain + " train -c " + run_path + " --set train.out_dir=" + dir +
                             "/bands --set distributed.model_parallel=2",
                         dir + "_bands.log");
  ASSERT_EQ(two.code, 0) << two.output;
  // The region's cells split in two ranges; rank 0's batch is its cells' share.
  const size_t at = two.output.find("model parallel data: rank 0 reads its band of ");
  ASSERT_NE(at, std::string::npos) << two.output;
  long long band = 0, cells_in_region = 0;
  double rank0 = 0, group = 0;
  ASSERT_EQ(std::sscanf(two.output.c_str() + at, "model parallel data: rank 0 reads its band of %lld of %lld cells; its "
                                                 "micro-batch is %lf bytes of its group's %lf",
                        &band, &cells_in_region, &rank0, &group),
            4)
      << two.output;
  EXPECT_EQ(band, (cells_in_region + 1) / 2);
  EXPECT_GT(cells_in_region, 200);
  EXPECT_LT(cells_in_region, 1008);
  EXPECT_DOUBLE_EQ(rank0 * static_cast<double>(cells_in_region), group * static_cast<double>(band));
  const Checkpoint a = checkpoint_in(dir + "/whole"), b = checkpoint_in(dir + "/bands");
  EXPECT_EQ(b.step, 4);
  std::string worst;
  EXPECT_LE(max_difference(a.model, b.model, &worst), 3e-5) << "largest difference in " << worst;
  const auto la = losses(dir + "/whole"), lb = losses(dir + "/bands");
  ASSERT_EQ(la.size(), 4u);
  ASSERT_EQ(lb.size(), 4u);
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-5 * std::abs(la[i])) << "step " << i + 1;
  expect_same_scores(dir + "/whole/validation.csv", dir + "/bands/validation.csv");
}

TEST(ModelParallel, RefusesWhatCannotShard) {
  // A model that cannot shard its grid: the run file's error, exit code 2, before any work.
  const std::string unet = base_dir() + "/unet.toml";
  std::ofstream(unet) << testing_support::storm_run_text(base_dir() + "/unet_out");
  Result r = run(kWxtrain + " train -c " + unet + " --set distributed.model_parallel=2", base_dir() + "/unet.log");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("model_parallel = 2 needs a model that can shard its grid"), std::string::npos) << r.output;
  // AIFS-ENS's noise conditioning, averaged onto the hidden nodes outside the sharded mapper.
  r = run(kWxtrain + " train -c " + run_file("aifs") +
              " --set distributed.model_parallel=2 --set train.ensemble_members=2 "
              "--set train.noise_injection=conditional_norm --set train.out_dir=" + base_dir() + "/aifs_ens",
          base_dir() + "/aifs_ens.log");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("model parallelism cannot shard the noise conditioning yet"), std::string::npos) << r.output;
  // A world that model_parallel does not divide.
  r = run(kWxtrain + " train -c " + run_file() + " --set distributed.model_parallel=2 --set train.out_dir=" +
              base_dir() + "/one_rank",
          base_dir() + "/one_rank.log");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("model_parallel = 2 does not divide the world of 1 rank(s)"), std::string::npos) << r.output;
}
