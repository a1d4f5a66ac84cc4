#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <iterator>
#include <thread>

#include "core/error.h"
#include "data/dataset.h"
#include "storm_run.h"
#include "trainer/checkpoint_io.h"
#include "trainer/stop_signal.h"
#include "trainer/trainer.h"

using namespace wxtrain;
using namespace wxtrain::trainer;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/wxtrain_trainer_" + name;
  fs::remove_all(dir);
  return dir;
}

TrainSummary run(const std::string& dir, const std::string& extra = "", TrainOptions options = {},
                 const std::vector<std::string>& overrides = {}) {
  options.quiet = true;
  const std::string text = testing_support::storm_run_text(dir, extra);
  RunConfig config = parse_config(text, dir + "/run.toml", overrides);
  auto dataset = std::make_shared<data::Dataset>(config.data);
  data::take_grid(config, *dataset);
  return train(config, dataset, {text, overrides}, options);
}

TensorMap weights_at(const std::string& dir) { return load_checkpoint(dir + "/checkpoint.pt").model; }

// run() with another [model] table.
TrainSummary run_model(const std::string& model, const std::string& dir, const std::string& extra = "",
                       TrainOptions options = {}, const std::vector<std::string>& overrides = {}) {
  options.quiet = true;
  const std::string text = testing_support::storm_run_text(dir, extra, model);
  RunConfig config = parse_config(text, dir + "/run.toml", overrides);
  auto dataset = std::make_shared<data::Dataset>(config.data);
  data::take_grid(config, *dataset);
  return train(config, dataset, {text, overrides}, options);
}

}  // namespace

TEST(Trainer, ResumedRunEqualsUninterruptedRunBitForBit) {
  const std::string straight = fresh_dir("straight"), split = fresh_dir("split");
  TrainSummary a = run(straight);
  EXPECT_EQ(a.last_step, 20);
  TrainOptions first_half;
  first_half.stop_after = 10;
  TrainSummary b1 = run(split, "", first_half);
  EXPECT_TRUE(b1.stopped_early);
  EXPECT_EQ(b1.last_step, 10);
  EXPECT_EQ(load_checkpoint(split + "/checkpoint.pt").step, 10);
  TrainOptions resume;
  resume.resume = true;
  TrainSummary b2 = run(split, "", resume);
  EXPECT_EQ(b2.first_step, 10);
  EXPECT_EQ(b2.last_step, 20);
  TensorMap wa = weights_at(straight), wb = weights_at(split);
  ASSERT_EQ(wa.size(), wb.size());
  for (const auto& [name, t] : wa) EXPECT_TRUE(torch::equal(t, wb.at(name))) << name << " differs after resume";
  TensorMap oa = load_checkpoint(straight + "/checkpoint.pt").optimizer;
  TensorMap ob = load_checkpoint(split + "/checkpoint.pt").optimizer;
  for (const auto& [name, t] : oa) EXPECT_TRUE(torch::equal(t, ob.at(name))) << "optimizer " << name;
  // metrics.csv continues across the resume: header + 20 rows.
  std::ifstream csv(split + "/metrics.csv");
  int lines = 0;
  for (std::string l; std::getline(csv, l);) ++lines;
  EXPECT_EQ(lines, 21);
}

TEST(Trainer, ResumedEnsembleRunContinuesTheNoiseStreamBitForBit) {
  // Four members, each drawing its noise every step: the checkpoint holds the noise generator, so
  // the resumed run draws what the uninterrupted one drew. Without that state (the control: the
  // checkpoint's noise stream removed) the resumed run trains other weights.
  const std::string ensemble = "ensemble_members = 4\nval_every = 2\n";
  const std::vector<std::string> steps = {"train.steps=4"};
  const std::string straight = fresh_dir("ens_straight"), split = fresh_dir("ens_split"),
                    control = fresh_dir("ens_control");
  run(straight, ensemble, {}, steps);
  TrainOptions first_half;
  first_half.stop_after = 2;
  run(split, ensemble, first_half, steps);
  run(control, ensemble, first_half, steps);
  Checkpoint halfway = load_checkpoint(split + "/checkpoint.pt");
  ASSERT_TRUE(halfway.noise_rng_state.defined());
  EXPECT_EQ(halfway.noise_rng_state.size(0), 1);  // one row per rank
  Checkpoint without_noise = load_checkpoint(control + "/checkpoint.pt");
  without_noise.noise_rng_state = torch::Tensor();
  save_checkpoint(control + "/checkpoint.pt", without_noise);
  TrainOptions resume;
  resume.resume = true;
  TrainSummary b = run(split, ensemble, resume, steps);
  EXPECT_EQ(b.first_step, 2);
  EXPECT_EQ(b.last_step, 4);
  run(control, ensemble, resume, steps);
  TensorMap wa = weights_at(straight), wb = weights_at(split), wc = weights_at(control);
  ASSERT_EQ(wa.size(), wb.size());
  bool control_differs = false;
  for (const auto& [name, t] : wa) {
    EXPECT_TRUE(torch::equal(t, wb.at(name))) << name << " differs after resume";
    control_differs = control_differs || !torch::equal(t, wc.at(name));
  }
  EXPECT_TRUE(control_differs) << "a resume without the noise stream trained the same weights: the test cannot fail";
  // The validation rows of both runs agree, ensemble columns included.
  auto text = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const std::string scores = text(straight + "/validation.csv");
  EXPECT_EQ(scores.rfind("step,lead,lead_hours,variable,forecaster,rmse,acc,crps,spread,spread_skill,"
                         "rank_0,rank_1,rank_2,rank_3,rank_4\n", 0), 0u);
  EXPECT_EQ(scores, text(split + "/validation.csv"));
}

TEST(Trainer, ConditionalNormEnsembleResumesBitForBitAndItsMembersDiffer) {
  // train.noise_injection = "conditional_norm" (a ViT: its blocks' LayerNorms take the noise): the
  // noise is drawn from the same checkpointed stream, so a resumed run ends on the uninterrupted
  // run's weights; the conditional norms start at zero and training moves them, so the members
  // differ (the validation's spread is not zero).
  const std::string model = "name = \"vit\"\npatch_size = 4\nembed_dim = 24\ndepth = 2\nheads = 3\n";
  const std::string ensemble = "ensemble_members = 4\nnoise_injection = \"conditional_norm\"\nval_every = 2\n";
  const std::vector<std::string> steps = {"train.steps=4"};
  const std::string straight = fresh_dir("cn_straight"), split = fresh_dir("cn_split");
  run_model(model, straight, ensemble, {}, steps);
  TrainOptions first_half;
  first_half.stop_after = 2;
  run_model(model, split, ensemble, first_half, steps);
  TrainOptions resume;
  resume.resume = true;
  TrainSummary b = run_model(model, split, ensemble, resume, steps);
  EXPECT_EQ(b.first_step, 2);
  EXPECT_EQ(b.last_step, 4);
  TensorMap wa = weights_at(straight), wb = weights_at(split);
  ASSERT_EQ(wa.size(), wb.size());
  int conditional = 0;
  for (const auto& [name, t] : wa) {
    EXPECT_TRUE(torch::equal(t, wb.at(name))) << name << " differs after resume";
    if (name.find(".scale.") != std::string::npos || name.find(".bias.") != std::string::npos) {
      ++conditional;
      EXPECT_GT(t.abs().max().item<double>(), 0.0) << name << " is still zero after training";
    }
  }
  EXPECT_EQ(conditional, 2 * 2 * 4);  // 2 blocks x 2 norms x (scale, bias) x (weight, bias)
  EXPECT_GT(wa.count("noise_injector.noise_mlp.mlp.0.weight"), 0u);
  // Every validation row of the model has a spread above zero: its members differ.
  std::ifstream csv(straight + "/validation.csv");
  std::string line;
  std::getline(csv, line);
  int rows = 0;
  while (std::getline(csv, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
    if (cells.size() < 9 || cells[4] != "model") continue;
    ++rows;
    EXPECT_GT(std::stod(cells[8]), 0.0) << line;
  }
  EXPECT_GT(rows, 0);
}

TEST(Trainer, SigtermFinishesTheStepSavesAndStops) {
  const std::string dir = fresh_dir("sigterm");
  clear_stop();
  std::thread killer([dir] {
    // Wait for a few steps of real training, then deliver a real SIGTERM to this process.
    for (int i = 0; i < 600; ++i) {
      std::ifstream csv(dir + "/metrics.csv");
      int lines = 0;
      for (std::string l; std::getline(csv, l);) ++lines;
      if (lines >= 4) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(getpid(), SIGTERM);
  });
  TrainSummary s = run(dir, "", {}, {"train.steps=2000"});
  killer.join();
  clear_stop();
  EXPECT_TRUE(s.stopped_early);
  EXPECT_LT(s.last_step, 2000);
  Checkpoint c = load_checkpoint(dir + "/checkpoint.pt");
  EXPECT_EQ(c.step, s.last_step);
  EXPECT_FALSE(c.model.empty());
  EXPECT_FALSE(fs::exists(dir + "/checkpoint.pt.tmp"));
}

TEST(Trainer, ShortRunOnTheStormBeatsPersistence) {
  const std::string dir = fresh_dir("skill");
  TrainSummary s = run(dir, "", {}, {"train.steps=150", "train.warmup_steps=10"});
  ASSERT_FALSE(s.validations.empty());
  const Validation& v = s.validations.back();
  ASSERT_EQ(v.names.size(), 6u);
  double model = 0, persistence = 0;
  for (size_t i = 0; i < v.names.size(); ++i) {
    // Normalise by persistence so pressure (Pa) does not drown the winds (m/s).
    model += v.model_rmse[i] / v.persistence_rmse[i];
    persistence += 1.0;
  }
  EXPECT_LT(model, persistence) << "mean RMSE ratio to persistence: " << model / persistence;
}

TEST(Trainer, FineTuningLoadsWeightsAndFreezesTheEncoder) {
  const std::string base = fresh_dir("base"), tuned = fresh_dir("tuned");
  run(base, "", {}, {"train.steps=5"});
  const std::string init = "init_from = \"" + base + "/checkpoint.pt\"\nfreeze = [\"encoder*\"]\n";
  run(tuned, init, {}, {"train.steps=5"});
  TensorMap before = weights_at(base), after = weights_at(tuned);
  int frozen = 0, trained = 0;
  for (const auto& [name, t] : before) {
    if (name.rfind("encoder", 0) == 0) {
      EXPECT_TRUE(torch::equal(t, after.at(name))) << name;
      ++frozen;
    } else if (!torch::equal(t, after.at(name))) {
      ++trained;
    }
  }
  EXPECT_GT(frozen, 0);
  EXPECT_GT(trained, 0);
}

TEST(Trainer, StrictLoadingNamesWhatDoesNotMatch) {
  const std::string base = fresh_dir("strict_base");
  run(base, "", {}, {"train.steps=2"});
  // A deeper U-Net: one more level than the checkpoint has.
  const std::string model = "name = \"unet\"\nchannels = [16, 32, 64]\ngroups = 4\n";
  const std::string text = testing_support::storm_run_text(fresh_dir("strict"), "init_from = \"" + base + "/checkpoint.pt\"\n", model);
  RunConfig config = parse_config(text, "strict.toml", {"train.steps=1"});
  auto dataset = std::make_shared<data::Dataset>(config.data);
  data::take_grid(config, *dataset);
  TrainOptions quiet;
  quiet.quiet = true;
  try {
    train(config, dataset, {text, {}}, quiet);
    FAIL() << "strict loading of a different architecture must fail";
  } catch (const wxtrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint.pt"), std::string::npos) << e.what();
  }
}

TEST(Trainer, ResumeWithoutACheckpointSaysWhere) {
  const std::string dir = fresh_dir("nothing");
  TrainOptions resume;
  resume.resume = true;
  try {
    run(dir, "", resume);
    FAIL();
  } catch (const wxtrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/checkpoint.pt"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, TruncatedFileIsAClearError) {
  const std::string dir = fresh_dir("truncated");
  run(dir, "", {}, {"train.steps=1"});
  const std::string path = dir + "/checkpoint.pt";
  fs::resize_file(path, fs::file_size(path) / 2);
  try {
    load_checkpoint(path);
    FAIL();
  } catch (const wxtrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// Damaged checkpoints found by fuzz/checkpoint_fuzz: each is one wxtrain::Error naming the file.
namespace {

// A small checkpoint in the layout save_checkpoint writes, its bytes.
std::string small_checkpoint_bytes(const std::string& path) {
  Checkpoint c;
  c.step = 3;
  c.config_text = "[model]\nname = \"unet\"\n";
  c.model_name = "unet";
  c.model["conv.weight"] = torch::ones({2, 2});
  save_checkpoint(path, c);
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string load_error(const std::string& path) {
  try {
    load_checkpoint(path);
  } catch (const wxtrain::Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(Checkpoint, DamagedTorchScriptIsAnErrorNotAnAbort) {
  // The TorchScript stored beside the tensors no longer parses: LibTorch throws
  // torch::jit::ErrorReport, which is no c10::Error and used to end the process.
  const std::string dir = fresh_dir("damaged_script");
  fs::create_directories(dir);
  const std::string path = dir + "/checkpoint.pt";
  std::string bytes = small_checkpoint_bytes(path);
  const size_t source = bytes.find("class Module(Module):");  // a submodule's source, stored uncompressed
  ASSERT_NE(source, std::string::npos);
  bytes.replace(source, 5, "clazz");
  write_bytes(path, bytes);
  const std::string message = load_error(path);
  EXPECT_NE(message.find(path + ": not a readable wxtrain checkpoint"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line, no TorchScript excerpt: " << message;
}

TEST(Checkpoint, ALengthPastTheEndIsRefusedBeforeLibTorchAllocatesIt) {
  // A flipped length byte in data.pkl: LibTorch's unpickler would zero-fill 4 GiB and take ~15 s
  // before "Unexpected end of pickler archive"; the walk over the pickle refuses it at once.
  const std::string dir = fresh_dir("long_string");
  fs::create_directories(dir);
  const std::string path = dir + "/checkpoint.pt";
  std::string bytes = small_checkpoint_bytes(path);
  const size_t format = bytes.find(std::string("X\x14\0\0\0wxtrain-checkpoint-1", 25));
  ASSERT_NE(format, std::string::npos);
  bytes.replace(format + 1, 4, std::string("\0\xff\xff\xff", 4));
  write_bytes(path, bytes);
  const auto start = std::chrono::steady_clock::now();
  const std::string message = load_error(path);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_NE(message.find(path + ": not a readable wxtrain checkpoint (damaged): its 'archive/data.pkl' declares "
                                "4294967040 bytes"),
            std::string::npos)
      << message;
}

TEST(Checkpoint, AnEntryOfTheWrongTypeIsNamed) {
  const std::string dir = fresh_dir("wrong_type");
  fs::create_directories(dir);
  const std::string path = dir + "/checkpoint.pt";
  torch::serialize::OutputArchive archive;
  archive.write("format", c10::IValue(std::string("wxtrain-checkpoint-1")));
  archive.write("step", c10::IValue(std::string("three")));
  archive.save_to(path);
  const std::string message = load_error(path);
  EXPECT_NE(message.find(path + ": corrupt wxtrain checkpoint: 'step' is not an integer"), std::string::npos) << message;
}

TEST(Checkpoint, ATensorLargerThanItsDataIsRefused) {
  // conv.weight's sizes in data.pkl changed from (2, 2) to (9, 2): LibTorch's unpickler builds that
  // tensor over the 16 bytes stored (it checks neither the sizes nor the entry's CRC), and copying
  // it into a model would read past them.
  const std::string dir = fresh_dir("tensor_past_data");
  fs::create_directories(dir);
  const std::string path = dir + "/checkpoint.pt";
  std::string bytes = small_checkpoint_bytes(path);
  const std::string sizes_and_strides("(K\x02K\x02t(K\x02K\x01t", 12);
  const size_t at = bytes.find(sizes_and_strides);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 2] = '\x09';
  write_bytes(path, bytes);
  const std::string message = load_error(path);
  EXPECT_NE(message.find(path + ": not a readable wxtrain checkpoint (damaged): tensor 'model.conv.weight' reaches "
                                "past its data (18 elements of 4 bytes in 16 stored)"),
            std::string::npos)
      << message;
}

TEST(Checkpoint, AMemoIndexPastTheEndIsRefusedBeforeLibTorchSizesItsMemo) {
  // A LONG_BINPUT of 2^30 where the format string was: LibTorch's unpickler would resize its memo
  // to 2^30 entries (16 GiB) before anything else.
  const std::string dir = fresh_dir("memo_index");
  fs::create_directories(dir);
  const std::string path = dir + "/checkpoint.pt";
  std::string bytes = small_checkpoint_bytes(path);
  const size_t format = bytes.find(std::string("X\x14\0\0\0wxtrain-checkpoint-1", 25));
  ASSERT_NE(format, std::string::npos);
  bytes.replace(format, 25, std::string("r\0\0\0\x40", 5) + std::string(20, 'N'));
  write_bytes(path, bytes);
  const std::string message = load_error(path);
  EXPECT_NE(message.find(path + ": not a readable wxtrain checkpoint (damaged): its 'archive/data.pkl' stores memo "
                                "entry 1073741824"),
            std::string::npos)
      << message;
}

TEST(Checkpoint, AnEntryCountCutInTheEndRecordHidesNoPickle) {
  // The 32-bit end record says one entry; miniz takes the zip64 record's count and finds data.pkl,
  // so the walk before it must look at every entry too.
  const std::string dir = fresh_dir("entry_count");
  fs::create_directories(dir);
  const std::string path = dir + "/checkpoint.pt";
  std::string bytes = small_checkpoint_bytes(path);
  const size_t format = bytes.find(std::string("X\x14\0\0\0wxtrain-checkpoint-1", 25));
  const size_t end_record = bytes.rfind(std::string("PK\x05\x06", 4));
  ASSERT_NE(format, std::string::npos);
  ASSERT_NE(end_record, std::string::npos);
  bytes.replace(format + 1, 4, std::string("\0\xff\xff\x7f", 4));
  bytes.replace(end_record + 10, 2, std::string("\x01\0", 2));
  write_bytes(path, bytes);
  const std::string message = load_error(path);
  EXPECT_NE(message.find(path + ": not a readable wxtrain checkpoint (damaged): its 'archive/data.pkl' declares"),
            std::string::npos)
      << message;
}
