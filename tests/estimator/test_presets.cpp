// The published configurations (core/model_presets.h): what a preset sets, what a run file keeps,
// and the parameter counts against the figures their authors give (docs/estimator.md cites them).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "core/config.h"
#include "core/error.h"
#include "core/model_presets.h"
#include "estimator/analytic.h"
#include "models/fourcastnet/fourcastnet.h"
#include "data/dataset.h"
#include "models/aifs/aifs_options.h"
#include "models/graphcast/graphcast.h"
#include "models/pangu/pangu.h"
#include "models/weather_model.h"

using namespace wxtrain;

namespace {

RunConfig parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_config(text, "preset_test.toml", overrides);
}

}  // namespace

TEST(ModelPresets, FourCastNetSetsThePapersModelAndData) {
  const RunConfig c = parse("[model]\npreset = \"fourcastnet-0.25\"\n");
  EXPECT_EQ(c.model.preset, "fourcastnet-0.25");
  EXPECT_EQ(c.model.name, "fourcastnet");
  EXPECT_EQ(c.model.options.as<models::FourCastNetOptions>().patch_size, 8);
  EXPECT_EQ(c.model.options.as<models::FourCastNetOptions>().embed_dim, 768);
  EXPECT_EQ(c.model.options.as<models::FourCastNetOptions>().depth, 12);
  EXPECT_EQ(c.model.options.as<models::FourCastNetOptions>().afno_blocks, 8);
  ASSERT_EQ(c.data.variables.size(), 20u);
  EXPECT_EQ(c.data.variables.front(), "u10");
  EXPECT_EQ(c.data.variables.back(), "tcwv");
  EXPECT_EQ(c.data.lat, 720);
  EXPECT_EQ(c.data.lon, 1440);
  EXPECT_EQ(c.data.history, 1);
  const models::ModelShape s = models::model_shape(c);
  EXPECT_EQ(s.in_channels, 20);
  EXPECT_EQ(s.out_channels, 20);
}

TEST(ModelPresets, TheRunFilesOwnKeysWin) {
  const RunConfig c = parse("[model]\npreset = \"fourcastnet-0.25\"\nembed_dim = 384\n[data]\ngrid = [360, 720]\n",
                            {"model.depth=6"});
  EXPECT_EQ(c.model.options.as<models::FourCastNetOptions>().embed_dim, 384);
  EXPECT_EQ(c.model.options.as<models::FourCastNetOptions>().depth, 6);
  EXPECT_EQ(c.model.options.as<models::FourCastNetOptions>().patch_size, 8);  // from the preset
  EXPECT_EQ(c.data.lat, 360);
  EXPECT_EQ(c.data.lon, 720);
  EXPECT_EQ(c.data.variables.size(), 20u);  // from the preset
}

TEST(ModelPresets, ARunFileWithSourcesKeepsItsOwnData) {
  const RunConfig c = parse(
      "[model]\npreset = \"fourcastnet-0.25\"\n[data]\n[[data.sources]]\nfile = \"x.nc\"\nvariable = \"t\"\nname = \"t\"\n");
  EXPECT_EQ(c.model.name, "fourcastnet");
  EXPECT_TRUE(c.data.variables.empty());
  EXPECT_EQ(c.data.lat, 0);  // the grid comes from the file
  ASSERT_EQ(c.data.sources.size(), 1u);
}

TEST(ModelPresets, AnUnknownPresetIsNamedWithTheChoices) {
  try {
    parse("[model]\npreset = \"fourcastnet-025\"\n");
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("preset_test.toml:2"), std::string::npos) << m;
    EXPECT_NE(m.find("\"fourcastnet-025\" is not a preset"), std::string::npos) << m;
    EXPECT_NE(m.find("fourcastnet-0.25"), std::string::npos) << m;
  }
  EXPECT_THROW(parse("[model]\npreset = 3\n"), ConfigError);
}

TEST(ModelPresets, PanguHasTheVolumeFirstAndTheMasksAsInputs) {
  const RunConfig c = parse("[model]\npreset = \"pangu-0.25\"\n");
  EXPECT_EQ(c.model.name, "pangu");
  EXPECT_EQ(c.model.options.as<models::PanguOptions>().upper_variables, 5);
  EXPECT_EQ(c.model.options.as<models::PanguOptions>().levels, 13);
  EXPECT_EQ(c.model.options.as<models::PanguOptions>().stage_heads, (std::vector<int64_t>{6, 12, 12, 6}));
  const models::ModelShape s = models::model_shape(c);
  EXPECT_EQ(s.out_channels, 5 * 13 + 4);
  EXPECT_EQ(s.in_channels, 5 * 13 + 4 + 3);
  EXPECT_EQ(s.state_channels, 5 * 13 + 4);
  // Variable-major, the levels as the published models read them: 1000 hPa first.
  EXPECT_EQ(c.data.variables.front(), "z_1000");
  EXPECT_EQ(c.data.variables[12], "z_50");
}

TEST(ModelPresets, LevelChannelNamesAreVariableMajor) {
  EXPECT_EQ(level_channel_names({"z", "t"}, {500, 850}),
            (std::vector<std::string>{"z_500", "z_850", "t_500", "t_850"}));
}

// Parameter counts within 1% of what the authors give: the bar, and what makes the memory
// table in docs/estimator.md the papers' models rather than look-alikes.
TEST(ModelPresets, ParameterCountsMatchThePublishedFigures) {
  struct Published {
    const char* preset;
    double parameters;
    const char* source;
  };
  const Published published[] = {
      // NVlabs/FourCastNet's released backbone checkpoint: 74,691,840, which includes a final
      // LayerNorm the reference builds and never applies (2 x 768); the paper gives no count.
      {"fourcastnet-0.25", 74'691'840, "NVlabs/FourCastNet backbone.ckpt"},
      // "about 256 million parameters in total" for the four lead-time models (arXiv:2211.02556,
      // abstract): 64 M each.
      {"pangu-0.25", 64e6, "Bi et al. 2023: 256 M / 4 models"},
  };
  for (const auto& p : published) {
    const RunConfig c = parse(std::string("[model]\npreset = \"") + p.preset + "\"\n");
    const double counted =
        static_cast<double>(estimator::analytic_param_count(c.model, models::model_shape(c)));
    std::printf("[ preset ] %s: %.0f parameters counted, %.0f published (%s), %+.3f%%\n", p.preset, counted,
                p.parameters, p.source, 100.0 * (counted / p.parameters - 1.0));
    EXPECT_LT(std::fabs(counted / p.parameters - 1.0), 0.01) << p.preset;
  }
}

// GraphCast: the paper's 36.7 million (Lam et al. 2023, main text) counts the reference code's
// parameters, 767 thousand of which cannot change its output and which models/graphcast/graphcast.h leaves
// out (tests/estimator/test_analytic.cpp, GraphCastPublishedConfigurations): the mesh-node
// embedding's weights on the grid features, which are zero on mesh nodes, and the decoder's mesh
// node MLP, whose result is discarded. Counted with them, the preset is within 1% of the paper; the
// model itself is 3.1% under. GraphCast_small (graphcast-1.0) has no published count (its
// checkpoint, 144 MB against the 0.25 degree model's 146 MB, suggests about the same size).
TEST(ModelPresets, GraphCastCountsThePapersParametersWithTheReferencesInertOnes) {
  const RunConfig c = parse("[model]\npreset = \"graphcast-0.25\"\n");
  EXPECT_EQ(c.model.name, "graphcast");
  EXPECT_EQ(c.model.options.as<models::GraphCastOptions>().latent, 512);
  EXPECT_EQ(c.model.options.as<models::GraphCastOptions>().processor_layers, 16);
  EXPECT_EQ(c.model.options.as<models::GraphCastOptions>().mesh_refinement, 6);
  const models::ModelShape s = models::model_shape(c);
  EXPECT_EQ(s.out_channels, 227);                  // 5 + 6 x 37
  EXPECT_EQ(s.in_channels, 2 * 227 + 5 + 2);       // two states, 5 forcings, 2 constants
  const double model = static_cast<double>(estimator::analytic_param_count(c.model, s));
  const double hidden = 512;
  const double inert = static_cast<double>(s.in_channels) * hidden + (hidden * hidden + hidden) * 2 + 2 * hidden;
  const double paper = 36.7e6;
  std::printf("[ preset ] graphcast-0.25: %.0f parameters, %.0f with the reference's output-inert ones; paper "
              "36.7 M (%+.2f%%, %+.2f%%)\n",
              model, model + inert, 100 * (model / paper - 1), 100 * ((model + inert) / paper - 1));
  EXPECT_LT(std::fabs((model + inert) / paper - 1), 0.01);
  EXPECT_LT(model, paper);

  const RunConfig small = parse("[model]\npreset = \"graphcast-1.0\"\n");
  EXPECT_EQ(small.model.options.as<models::GraphCastOptions>().mesh_refinement, 5);
  EXPECT_EQ(models::model_shape(small).out_channels, 5 + 6 * 13);
  EXPECT_EQ(models::model_shape(small).lat, 181);
}

// AIFS Single 1.0 (models/aifs/aifs_options.cpp): its published sizes on the N320 data grid,
// named in [data] (data.grid = "n320"), with no data file. The count is anemoi-models' for the same
// configuration (253,035,126: tests/models/reference/aifs_published_count.py, reference label),
// less the 2 x 13 x 1024 weights of the forcings anemoi feeds at both input times (wxtrain's come
// once; the encoder embeds the input as its sender, the decoder as its receiver), less 32 for the 4 encoder edges of 8 learned features each that are
// decided at round-off distance from the cut-off (docs/estimator.md).
TEST(ModelPresets, AifsSingleOnTheN320GridWithoutData) {
  RunConfig c = parse("[model]\npreset = \"aifs-single-1.0\"\n");
  EXPECT_EQ(c.model.name, "aifs");
  const auto& o = c.model.options.as<models::AifsOptions>();
  EXPECT_EQ(o.num_channels, 1024);
  EXPECT_EQ(o.processor_layers, 16);
  EXPECT_EQ(o.num_heads, 16);
  EXPECT_EQ(o.mapper_num_heads, 16);
  EXPECT_EQ(o.hidden_grid, "o96");
  EXPECT_EQ(o.window_size, 512);
  ASSERT_EQ(c.data.variables.size(), 90u);  // 12 surface and soil, 6 x 13 pressure levels
  EXPECT_EQ(c.data.diagnostic_variables.size(), 12u);
  EXPECT_EQ(c.data.forcing_variables.size() + c.data.forcings.size(), 13u);
  EXPECT_EQ(c.data.grid_name, "n320");
  EXPECT_EQ(c.data.lat, 1);
  EXPECT_EQ(c.data.lon, 542080);
  EXPECT_EQ(c.data.history, 2);
  EXPECT_EQ(c.data.time_step, "6h");
  // The cells are generated where the run is set up (cli/run_setup.cpp); before that the shape
  // is refused naming the grid, never guessed as a rectangle of one row.
  try {
    models::model_shape(c);
    FAIL() << "a shape without the cells";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("n320"), std::string::npos) << e.what();
  }
  data::take_named_grid(c);
  const models::ModelShape s = models::model_shape(c);
  EXPECT_TRUE(s.point_set);
  EXPECT_EQ(s.lon, 542080);
  EXPECT_EQ(s.in_channels, 2 * 90 + 13);
  EXPECT_EQ(s.out_channels, 102);
  const int64_t n = estimator::analytic_param_count(c.model, s);
  std::printf("[ preset ] aifs-single-1.0: %lld parameters (anemoi-models, forcings at both input times: 253,035,126)\n",
              static_cast<long long>(n));
  EXPECT_EQ(n, 253035158 - 2 * 13 * 1024);
}

TEST(ModelPresets, ANamedGridThatIsNoneIsRefusedWithItsKey) {
  for (const std::string bad : {"n321", "f320", "o0"}) {
    try {
      parse("[model]\nname = \"aifs\"\n[data]\nvariables = [\"a\"]\ngrid = \"" + bad + "\"\n");
      FAIL() << bad << " was taken";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("data.grid"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  const RunConfig o96 = parse("[model]\nname = \"aifs\"\n[data]\nvariables = [\"a\"]\ngrid = \"o96\"\n");
  EXPECT_EQ(o96.data.lon, 40320);
}
