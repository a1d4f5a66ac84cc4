#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "core/config.h"
#include "core/error.h"
#include "core/units.h"

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
  EXPECT_EQ(c.model.patch_size, 3);
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
