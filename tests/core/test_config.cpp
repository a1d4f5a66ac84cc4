#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/config.h"
#include "core/config_keys.h"
#include "core/run_file_text.h"
#include "core/error.h"
#include "core/units.h"
#include "models/vit/vit_options.h"

using namespace wxtrain;

namespace {

const char* kValid = R"(
[model]
name = "vit"
patch_size = 3
embed_dim = 64
heads = 4

[data]
variables = ["t", "u", "v"]
grid = [33, 36]
history = 2

[train]
batch_size = 16
precision = "bf16-mixed"
checkpointing = true

[memory]
limit = "24GiB"
)";

std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config(text, "run.toml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Config, ParsesTypedSections) {
  RunConfig c = parse_config(kValid, "run.toml");
  EXPECT_EQ(c.model.name, "vit");
  EXPECT_EQ(c.model.options.as<models::ViTOptions>().patch_size, 3);
  EXPECT_EQ(c.num_variables(), 3);
  EXPECT_EQ(c.in_channels(), 6);
  EXPECT_EQ(c.data.lat, 33);
  EXPECT_EQ(c.train.batch_size, 16);
  EXPECT_EQ(c.train.precision, Precision::kBf16Mixed);
  EXPECT_TRUE(c.train.checkpointing);
  EXPECT_EQ(c.memory.limit, 24LL * 1024 * 1024 * 1024);
}

TEST(Config, UnknownKeyNamesFileLineAndSuggestion) {
  std::string msg = error_of(R"(
[model]
name = "unet"
[data]
variables = ["t"]
grid = [8, 8]
[train]
bach_size = 4
)");
  EXPECT_NE(msg.find("run.toml:8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train.bach_size"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'batch_size'"), std::string::npos) << msg;
}

TEST(Config, WrongTypeAndRangeAreErrors) {
  std::string msg = error_of("[data]\nvariables=[\"t\"]\ngrid=[8,8]\n[train]\nbatch_size = \"big\"\n");
  EXPECT_NE(msg.find("train.batch_size must be an integer, got a string"), std::string::npos) << msg;
  msg = error_of("[data]\nvariables=[\"t\"]\ngrid=[8,8]\n[train]\nlr = -1.0\n");
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
  msg = error_of("[data]\nvariables=[\"t\"]\ngrid=[8,8]\n[memory]\nlimit = \"24 parsecs\"\n");
  EXPECT_NE(msg.find("memory.limit"), std::string::npos) << msg;
}

TEST(Config, UnknownModelNameListsChoices) {
  std::string msg = error_of("[model]\nname = \"unett\"\n[data]\nvariables=[\"t\"]\ngrid=[8,8]\n");
  EXPECT_NE(msg.find("expected one of unet, vit, gnn"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'unet'"), std::string::npos) << msg;
}

TEST(Config, MalformedTomlGivesLineAndColumn) {
  std::string msg = error_of("[model]\nname = \"unet\n");
  EXPECT_NE(msg.find("run.toml:2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed TOML"), std::string::npos) << msg;
}

TEST(Config, DuplicateSourceNamesMustBeRenamed) {
  std::string msg = error_of(R"(
[[data.sources]]
file = "U.cdf"
variable = "u"
[[data.sources]]
file = "U500.cdf"
variable = "u"
)");
  EXPECT_NE(msg.find("'u' is used twice"), std::string::npos) << msg;
}

TEST(Config, OverridesApplyWithTheSameChecks) {
  RunConfig c = parse_config(kValid, "run.toml", {"train.batch_size=4", "train.precision=bf16", "distributed.zero_stage=2"});
  EXPECT_EQ(c.train.batch_size, 4);
  EXPECT_EQ(c.train.precision, Precision::kBf16);
  EXPECT_EQ(c.distributed.zero_stage, 2);
  std::string msg = error_of(kValid, {"train.batch_size=0"});
  EXPECT_NE(msg.find("command line"), std::string::npos) << msg;
  EXPECT_NE(error_of(kValid, {"nonsense"}).find("section.key=value"), std::string::npos);
}

TEST(Config, MissingFileIsAClearError) {
  try {
    load_config("/nonexistent/run.toml");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/run.toml: cannot open"), std::string::npos);
  }
}

TEST(Config, WriteValueKeepsCommentsAndRoundTrips) {
  std::string path = testing::TempDir() + "/write_value.toml";
  {
    std::ofstream f(path);
    f << "# my run\n[data]\nvariables = [\"t\"]\ngrid = [8, 8]\n\n[train]\nbatch_size = 8  # tuned later\nlr = 0.01\n";
  }
  write_config_value(path, "train", "batch_size", "24");
  RunConfig c = load_config(path);
  EXPECT_EQ(c.train.batch_size, 24);
  EXPECT_DOUBLE_EQ(c.train.lr, 0.01);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("# my run"), std::string::npos);
  EXPECT_NE(text.find("batch_size = 24  # tuned later"), std::string::npos) << text;
  write_config_value(path, "memory", "margin", "0.2");
  EXPECT_DOUBLE_EQ(load_config(path).memory.margin, 0.2);
}

TEST(Units, ParsesAndFormatsSizes) {
  EXPECT_EQ(*parse_bytes("24GiB"), 24LL << 30);
  EXPECT_EQ(*parse_bytes("80GB"), 80000000000LL);
  EXPECT_EQ(*parse_bytes("512 MiB"), 512LL << 20);
  EXPECT_EQ(*parse_bytes("1.5GiB"), 3LL << 29);
  EXPECT_EQ(*parse_bytes("1024"), 1024);
  EXPECT_FALSE(parse_bytes("lots").has_value());
  EXPECT_FALSE(parse_bytes("-1GB").has_value());
  EXPECT_EQ(format_bytes(3.0 * (1 << 30)), "3.00 GiB");
}

TEST(Config, ZeroOrNegativeValuesThatMeanNothingAreRejected) {
  // train.steps = 0 used to "finish at step 0 of 0" and write a checkpoint.
  std::string msg = error_of("[data]\nvariables=[\"t\"]\ngrid=[8,8]\n[train]\nsteps = 3\n", {"train.steps=0"});
  EXPECT_NE(msg.find("command line (--set): train.steps = 0 is out of range: expected >= 1"), std::string::npos) << msg;
  msg = error_of("[data]\nvariables=[\"t\"]\ngrid=[8,8]\n[train]\neps = 0\n");
  EXPECT_NE(msg.find("run.toml:5: train.eps = 0 is out of range: expected > 0.0 and <= 1.0"), std::string::npos) << msg;
  msg = error_of("[data]\nvariables=[\"t\"]\ngrid=[8,8]\n[train]\nout_dir = \"\"\n");
  EXPECT_NE(msg.find("train.out_dir must not be empty"), std::string::npos) << msg;
  // Documented zeros stay valid: checkpoint_every = 0 (only at the end), val_every = 0 (per epoch).
  EXPECT_EQ(error_of("[data]\nvariables=[\"t\"]\ngrid=[8,8]\n[train]\ncheckpoint_every = 0\nval_every = 0\n"), "");
}

TEST(ConfigKeys, EveryKeyComesFromTheParserWithTypeDefaultAndRange) {
  const std::vector<ConfigKey> keys = config_keys();
  auto find = [&](const std::string& name) -> const ConfigKey* {
    for (const auto& k : keys)
      if (k.key == name) return &k;
    return nullptr;
  };
  const ConfigKey* steps = find("train.steps");
  ASSERT_NE(steps, nullptr);
  EXPECT_EQ(steps->type, "integer");
  EXPECT_EQ(steps->default_value, "100");
  EXPECT_EQ(steps->range, ">= 1");
  const ConfigKey* precision = find("train.precision");
  ASSERT_NE(precision, nullptr);
  EXPECT_EQ(precision->default_value, "\"fp32\"");
  EXPECT_EQ(precision->range, "one of fp32, bf16-mixed, fp16-mixed, bf16");
  // [data] is read by the same SectionReader, so its keys come out without being listed anywhere.
  ASSERT_NE(find("data.history"), nullptr);
  EXPECT_EQ(find("data.history")->range, "1 to 64");
  ASSERT_NE(find("data.sources.file"), nullptr);
  for (const auto& k : keys) EXPECT_FALSE(k.type.empty()) << k.key << " has no type";
  // Every key the markdown lists is one a run file may set: parse each default back.
  for (const auto& k : keys) {
    if (k.key.rfind("data.", 0) == 0 || k.default_value.empty()) continue;
    EXPECT_EQ(error_of(kValid, {k.key + "=" + k.default_value}), "")
        << k.key << " = " << k.default_value;
  }
}

TEST(Config, OverridesWrittenIntoTheTextReproduceTheRun) {
  const std::vector<std::string> overrides = {"train.batch_size=4", "train.precision=fp32", "memory.margin=0.25",
                                              "distributed.zero_stage=1"};
  const std::string text = apply_overrides_to_text(kValid, overrides);
  const RunConfig direct = parse_config(kValid, "run.toml", overrides);
  const RunConfig recorded = parse_config(text, "recorded.toml");
  EXPECT_EQ(recorded.train.batch_size, 4);
  EXPECT_EQ(recorded.train.precision, direct.train.precision);
  EXPECT_DOUBLE_EQ(recorded.memory.margin, 0.25);
  EXPECT_EQ(recorded.distributed.zero_stage, 1);
  EXPECT_EQ(recorded.model.options.as<models::ViTOptions>().patch_size, direct.model.options.as<models::ViTOptions>().patch_size);
}

// A key written in the wrong section names the section that has it ([data] here); a key no section
// has keeps the did-you-mean of its own section.
TEST(Config, AKeyInTheWrongSectionPointsToItsSection) {
  const std::string text = std::string(kValid) + "val_fraction = 0.3\n";  // under [memory]
  const std::string message = error_of(text);
  EXPECT_NE(message.find("run.toml:20: unknown key memory.val_fraction: val_fraction belongs in [data], not in [memory]"),
            std::string::npos)
      << message;
  const std::string sources = error_of(std::string(kValid) + "[distributed]\nfile = \"x.nc\"\n");
  EXPECT_NE(sources.find("unknown key distributed.file: file belongs in [[data.sources]] or [[data.static]], not in "
                         "[distributed]"),
            std::string::npos)
      << sources;
  const std::string typo = error_of(std::string(kValid) + "[distributed]\nzero_stag = 1\n");
  EXPECT_NE(typo.find("did you mean 'zero_stage'"), std::string::npos) << typo;
}

// The files a run reads resolve against the run file's folder, --set ones against the working
// directory, and come out absolute; the text recorded for the checkpoint says the same.
TEST(Config, RelativePathsResolveAgainstTheRunFilesFolder) {
  const std::string text =
      "[data]\n[[data.sources]]\nfile = \"data/t.nc\"  # next to the run file\nvariable = \"t\"\n"
      "[[data.static]]\nfile = \"/abs/lsm.nc\"\nvariable = \"lsm\"\n"
      "[train]\ninit_from = \"../pretrained/checkpoint.pt\"\nout_dir = \"runs/x\"\n";
  const RunConfig c = parse_config(text, "/home/u/project/run.toml", {}, "/home/u/project");
  EXPECT_EQ(c.data.sources[0].file, "/home/u/project/data/t.nc");
  EXPECT_EQ(c.data.statics[0].file, "/abs/lsm.nc");
  EXPECT_EQ(c.train.init_from, "/home/u/pretrained/checkpoint.pt");
  EXPECT_EQ(c.train.out_dir, "runs/x");  // an output: relative to the working directory
  const RunConfig set = parse_config(text, "/home/u/project/run.toml", {"train.init_from=other.pt"}, "/home/u/project");
  EXPECT_EQ(set.train.init_from, (std::filesystem::current_path() / "other.pt").string());
  EXPECT_EQ(run_file_folder("/home/u/project/run.toml"), "/home/u/project");

  const std::string recorded = absolute_paths_in_text(text, "/home/u/project");
  EXPECT_NE(recorded.find("file = \"/home/u/project/data/t.nc\"  # next to the run file\n"), std::string::npos) << recorded;
  EXPECT_NE(recorded.find("init_from = \"/home/u/pretrained/checkpoint.pt\"\n"), std::string::npos) << recorded;
  EXPECT_NE(recorded.find("file = \"/abs/lsm.nc\"\n"), std::string::npos) << recorded;
  EXPECT_NE(recorded.find("out_dir = \"runs/x\"\n"), std::string::npos) << recorded;
  // Read anywhere, the recorded text means the same files.
  const RunConfig again = parse_config(recorded, "checkpoint (embedded run file)");
  EXPECT_EQ(again.data.sources[0].file, c.data.sources[0].file);
  EXPECT_EQ(again.train.init_from, c.train.init_from);
  EXPECT_EQ(absolute_paths_in_overrides({"train.init_from=x.pt", "train.steps=3"}),
            (std::vector<std::string>{"train.init_from=\"" + (std::filesystem::current_path() / "x.pt").string() + "\"",
                                      "train.steps=3"}));
}
