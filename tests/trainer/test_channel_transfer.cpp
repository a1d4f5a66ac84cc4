// Fine-tuning onto another set of channels: for every zoo model, a checkpoint trained on
// [a@t0, b@t0] -> [a, b] initialises a model on [b@t0, c@t0, a@t0] -> [a, c, b]. What proves the
// channel layouts right is the forward: with c's input at zero, the new model predicts a and b
// exactly as the old one did.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "core/error.h"
#include "models/graphcast/graphcast.h"
#include "models/graphcast/graphcast_reference.h"
#include "models/pangu/pangu.h"
#include "models/weather_model.h"
#include "trainer/channel_transfer.h"
#include "trainer/checkpoint_io.h"

using namespace wxtrain;
using namespace wxtrain::trainer;

namespace {

using Names = std::vector<std::string>;

const Names kOldIn{"a@t0", "b@t0"}, kOldOut{"a", "b"};
const Names kNewIn{"b@t0", "c@t0", "a@t0"}, kNewOut{"a", "c", "b"};
constexpr int64_t kLat = 9, kLon = 10;  // divisible by neither the U-Net's 4 nor the ViT's patch

// Small models; "gnn1" is the GNN with one-layer MLPs, whose decoder's only Linear is first.0.
ModelConfig small(const std::string& variant) {
  // One [model] table for every model, read as a run file is (a model ignores the others' keys).
  const std::string name = variant == "gnn1" ? "gnn" : variant;
  return parse_config("[model]\nname = \"" + name +
                          "\"\nchannels = [8, 16, 16]\ngroups = 4\npatch_size = 4\nembed_dim = 24\ndepth = 1\n"
                          "heads = 3\nmlp_ratio = 2.0\nlatent = 16\nprocessor_layers = 1\nmlp_layers = " +
                          std::string(variant == "gnn1" ? "1" : "2") +
                          "\nafno_blocks = 4\n"   // fourcastnet: 24 channels in blocks of 6
                          "mesh_refinement = 2\n"  // graphcast: M2 over the 9 x 10 global grid
                          "[data]\nvariables = [\"a\"]\ngrid = [9, 10]\n",
                      "small.toml")
      .model;
}

models::WeatherModel build(const std::string& variant, const Names& in, const Names& out, uint64_t seed) {
  torch::manual_seed(seed);
  return models::build_model(small(variant),
                             {static_cast<int64_t>(in.size()), static_cast<int64_t>(out.size()), kLat, kLon});
}

// Every parameter random (norm weights and biases too, which start at 1 and 0 in every model alike
// and would make "loaded" indistinguishable from "left alone").
void randomise(models::WeatherModelImpl& model, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) p.copy_(torch::randn_like(p) * 0.3);
}

TensorMap cloned_weights(const models::WeatherModelImpl& model) {
  TensorMap map;
  for (const auto& [name, t] : model_weights(model)) map[name] = t.clone();
  return map;
}

// Channel c's entries of `t` along the axis, computed from the ChannelAxis description
// independently of channel_transfer's views.
torch::Tensor channel_slice(const torch::Tensor& t, const models::ChannelAxis& axis, int64_t c, int64_t channels) {
  std::vector<int64_t> idx;
  for (int64_t j = 0; j < axis.per_channel; ++j)
    idx.push_back(axis.channel_major ? c * axis.per_channel + j : j * channels + c);
  return t.index_select(axis.dim, torch::tensor(idx, torch::kLong));
}

int64_t index_of(const Names& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) - names.begin();
}

class ChannelTransferTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChannelTransferTest, CarriesChannelsOverByName) {
  models::WeatherModel a = build(GetParam(), kOldIn, kOldOut, 1);
  randomise(*a, 11);
  models::WeatherModel b = build(GetParam(), kNewIn, kNewOut, 2);
  const TensorMap fresh = cloned_weights(*b);

  const ChannelTransferReport report =
      transfer_weights(*b, model_weights(*a), kOldIn, kOldOut, kNewIn, kNewOut, /*strict=*/true, "a.pt");
  EXPECT_EQ(report.matched_inputs, (Names{"b@t0", "a@t0"}));
  EXPECT_EQ(report.new_inputs, (Names{"c@t0"}));
  EXPECT_TRUE(report.dropped_inputs.empty());
  EXPECT_EQ(report.matched_outputs, (Names{"a", "b"}));
  EXPECT_EQ(report.new_outputs, (Names{"c"}));
  EXPECT_TRUE(report.dropped_outputs.empty());
  EXPECT_TRUE(report.initialised.empty());
  EXPECT_TRUE(report.unexpected.empty());
  EXPECT_NE(report.summary().find("input channels: 2 matched, 1 new (c@t0), 0 dropped"), std::string::npos)
      << report.summary();

  std::map<std::string, models::ChannelAxis> axes;
  for (const auto& axis : b->channel_axes()) axes[axis.parameter] = axis;
  EXPECT_EQ(std::set<std::string>(report.remapped.begin(), report.remapped.end()).size(), axes.size());

  const TensorMap old = model_weights(*a), now = model_weights(*b);
  for (const auto& [name, t] : now) {
    auto it = axes.find(name);
    if (it == axes.end()) {
      // (a) everything independent of the channels is the checkpoint's.
      EXPECT_TRUE(torch::equal(t, old.at(name))) << name;
      continue;
    }
    EXPECT_NE(std::find(report.remapped.begin(), report.remapped.end(), name), report.remapped.end()) << name;
    // (b) a and b's slices moved to their new positions; c's is the fresh initialisation.
    const models::ChannelAxis& axis = it->second;
    const Names& old_names = axis.input ? kOldIn : kOldOut;
    const Names& new_names = axis.input ? kNewIn : kNewOut;
    const auto old_n = static_cast<int64_t>(old_names.size()), new_n = static_cast<int64_t>(new_names.size());
    for (int64_t c = 0; c < new_n; ++c) {
      const int64_t from = index_of(old_names, new_names[c]);
      const torch::Tensor expected = from < old_n ? channel_slice(old.at(name), axis, from, old_n)
                                                  : channel_slice(fresh.at(name), axis, c, new_n);
      EXPECT_TRUE(torch::equal(channel_slice(t, axis, c, new_n), expected)) << name << " channel " << new_names[c];
    }
  }

  // (c) with c's input at zero the new model predicts a and b as the old one did.
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({2, 2, kLat, kLon});  // [a@t0, b@t0]
  const torch::Tensor x_new = torch::stack({x.select(1, 1), torch::zeros_like(x.select(1, 0)), x.select(1, 0)}, 1);
  const torch::Tensor y = a->forward(x), y_new = b->forward(x_new);
  EXPECT_TRUE(torch::allclose(y_new.select(1, 0), y.select(1, 0), 1e-4, 1e-5)) << "output a";
  EXPECT_TRUE(torch::allclose(y_new.select(1, 2), y.select(1, 1), 1e-4, 1e-5)) << "output b";
}

TEST_P(ChannelTransferTest, DroppedChannelsAreLeftOut) {
  // [a@t0, b@t0] -> [a, b] onto [a@t0] -> [b]: the old model with b's input at zero.
  models::WeatherModel a = build(GetParam(), kOldIn, kOldOut, 1);
  randomise(*a, 12);
  const Names in{"a@t0"}, out{"b"};
  models::WeatherModel b = build(GetParam(), in, out, 2);
  const ChannelTransferReport report =
      transfer_weights(*b, model_weights(*a), kOldIn, kOldOut, in, out, /*strict=*/true, "a.pt");
  EXPECT_EQ(report.dropped_inputs, (Names{"b@t0"}));
  EXPECT_EQ(report.dropped_outputs, (Names{"a"}));
  EXPECT_TRUE(report.new_inputs.empty() && report.new_outputs.empty());

  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  const torch::Tensor xa = torch::randn({2, 1, kLat, kLon});
  const torch::Tensor y = a->forward(torch::cat({xa, torch::zeros_like(xa)}, 1));
  EXPECT_TRUE(torch::allclose(b->forward(xa).select(1, 0), y.select(1, 1), 1e-4, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Models, ChannelTransferTest,
                         ::testing::Values("unet", "vit", "gnn", "gnn1", "fourcastnet", "graphcast"),
                         [](const auto& info) { return info.param; });

// Pangu's upper-air volume is embedded by variable, not by channel: its weights load as they are,
// and only the surface-like channels move by name (the axes skip the volume's channels). A new
// surface variable joins a model with a volume of one variable on two levels.
TEST(ChannelTransfer, PanguMovesSurfaceChannelsAroundItsUpperAirVolume) {
  ModelConfig c;
  c.name = "pangu";
  auto& o = c.options.as<models::PanguOptions>();
  o.patch_size = 2;
  o.level_patch = 1;
  o.embed_dim = 16;
  o.mlp_ratio = 2.0;
  o.upper_variables = 1;
  o.levels = 2;
  o.window = {2, 3, 4};
  o.stage_depths = {2, 2, 2, 2};
  o.stage_heads = {2, 2, 2, 2};
  const Names old_in{"u_500@t0", "u_850@t0", "a@t0"}, old_out{"u_500", "u_850", "a"};
  const Names new_in{"u_500@t0", "u_850@t0", "b@t0", "a@t0"}, new_out{"u_500", "u_850", "b", "a"};
  auto build_pangu = [&](const Names& in, const Names& out, uint64_t seed) {
    models::ModelShape s{static_cast<int64_t>(in.size()), static_cast<int64_t>(out.size()), kLat, kLon};
    s.state_channels = s.in_channels;  // one state, all prognostic
    torch::manual_seed(seed);
    return models::build_model(c, s);
  };
  models::WeatherModel a = build_pangu(old_in, old_out, 1);
  randomise(*a, 11);
  models::WeatherModel b = build_pangu(new_in, new_out, 2);
  const ChannelTransferReport report =
      transfer_weights(*b, model_weights(*a), old_in, old_out, new_in, new_out, /*strict=*/true, "a.pt");
  EXPECT_EQ(report.new_inputs, (Names{"b@t0"}));
  EXPECT_EQ(report.new_outputs, (Names{"b"}));
  EXPECT_TRUE(report.initialised.empty());
  EXPECT_EQ(std::set<std::string>(report.remapped.begin(), report.remapped.end()),
            (std::set<std::string>{"embed.surface.weight", "head.surface.weight", "head.surface_bias"}));

  // With b's input at zero the new model predicts the volume and a as the old one did.
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({2, 3, kLat, kLon});  // [u_500, u_850, a]
  const torch::Tensor x_new =
      torch::stack({x.select(1, 0), x.select(1, 1), torch::zeros_like(x.select(1, 0)), x.select(1, 2)}, 1);
  const torch::Tensor y = a->forward(x), y_new = b->forward(x_new);
  for (const auto& [now, before] : {std::pair{0, 0}, std::pair{1, 1}, std::pair{3, 2}})
    EXPECT_TRUE(torch::allclose(y_new.select(1, now), y.select(1, before), 1e-4, 1e-5)) << "output " << new_out[now];
}

// ---- identical lists: exactly load_weights ----

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ChannelTransfer, IdenticalListsLoadAsLoadWeights) {
  models::WeatherModel a = build("unet", kOldIn, kOldOut, 1);
  randomise(*a, 13);
  TensorMap weights = cloned_weights(*a);
  weights.erase("encoder1.norm1.bias");
  weights["extra.weight"] = torch::zeros({2});

  models::WeatherModel b = build("unet", kOldIn, kOldOut, 2), c = build("unet", kOldIn, kOldOut, 2);
  const ChannelTransferReport report = transfer_weights(*b, weights, kOldIn, kOldOut, kOldIn, kOldOut, false, "a.pt");
  const WeightLoadReport expected = load_weights(*c, weights, false, "a.pt");
  EXPECT_EQ(report.loaded, expected.loaded);
  EXPECT_EQ(report.initialised, expected.missing);
  EXPECT_EQ(report.unexpected, expected.unexpected);
  EXPECT_TRUE(report.remapped.empty());
  const TensorMap got = model_weights(*b), want = model_weights(*c);
  for (const auto& [name, t] : want) EXPECT_TRUE(torch::equal(got.at(name), t)) << name;

  // Strict: the same message, naming the missing and the unexpected; as a ConfigError.
  const std::string message = error_of([&] { load_weights(*c, weights, true, "a.pt"); });
  EXPECT_NE(message.find("encoder1.norm1.bias"), std::string::npos) << message;
  EXPECT_NE(message.find("extra.weight"), std::string::npos) << message;
  EXPECT_EQ(error_of([&] { transfer_weights(*b, weights, kOldIn, kOldOut, kOldIn, kOldOut, true, "a.pt"); }), message);
  EXPECT_THROW(transfer_weights(*b, weights, kOldIn, kOldOut, kOldIn, kOldOut, true, "a.pt"), ConfigError);
}

TEST(ChannelTransfer, ANonChannelShapeMismatchIsAnErrorNamingBothShapes) {
  models::WeatherModel a = build("unet", kOldIn, kOldOut, 1);
  TensorMap weights = cloned_weights(*a);
  weights["encoder1.norm1.weight"] = torch::ones({12});  // the model's is [16]
  models::WeatherModel b = build("unet", kOldIn, kOldOut, 2);
  const std::string same = error_of([&] { transfer_weights(*b, weights, kOldIn, kOldOut, kOldIn, kOldOut, false, "a.pt"); });
  EXPECT_EQ(same, error_of([&] { load_weights(*b, weights, false, "a.pt"); }));
  EXPECT_NE(same.find("encoder1.norm1.weight (checkpoint [12], model [16])"), std::string::npos) << same;

  // Also when the channels change: only the channel dimension of a channel axis may differ.
  models::WeatherModel c = build("unet", kNewIn, kNewOut, 2);
  const TensorMap before = cloned_weights(*c);
  const std::string moved = error_of([&] { transfer_weights(*c, weights, kOldIn, kOldOut, kNewIn, kNewOut, false, "a.pt"); });
  EXPECT_NE(moved.find("encoder1.norm1.weight (checkpoint [12], model [16])"), std::string::npos) << moved;
  for (const auto& [name, t] : model_weights(*c)) EXPECT_TRUE(torch::equal(t, before.at(name))) << name << " was written";

  weights = cloned_weights(*a);
  weights["encoder0.conv1.weight"] = torch::zeros({4, 2, 3, 3});  // other width: not a channel change
  const std::string axis = error_of([&] { transfer_weights(*c, weights, kOldIn, kOldOut, kNewIn, kNewOut, false, "a.pt"); });
  EXPECT_NE(axis.find("encoder0.conv1.weight (checkpoint [4, 2, 3, 3], model [8, 3, 3, 3]"), std::string::npos) << axis;
}

TEST(ChannelTransfer, TheCheckpointsListsMustFitItsWeights) {
  models::WeatherModel a = build("unet", kOldIn, kOldOut, 1);
  models::WeatherModel b = build("unet", kNewIn, kNewOut, 2);
  const Names three{"a@t0", "b@t0", "z@t0"};  // the checkpoint's first conv holds two
  const std::string message =
      error_of([&] { transfer_weights(*b, model_weights(*a), three, kOldOut, kNewIn, kNewOut, false, "a.pt"); });
  EXPECT_NE(message.find("encoder0.conv1.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("3 input channel(s)"), std::string::npos) << message;
  // And the run's lists must fit the model.
  EXPECT_THROW(transfer_weights(*b, model_weights(*a), kOldIn, kOldOut, kOldIn, kNewOut, false, "a.pt"), ConfigError);
}

// A Pangu trained on a 24 x 20 grid fine-tunes on rows 6..17 of it (data.region): its Earth-specific
// bias tables, one entry per latitude window, are cut to the region's windows and its masks rebuilt
// (models/pangu PanguImpl::fit_to_grid); everything else loads as it is. Without knowing where the
// region lies, the tables' sizes are an error that names them.
TEST(ChannelTransfer, PanguOfTheWholeGridFineTunesOnARegionOfIt) {
  ModelConfig c;
  c.name = "pangu";
  auto& o = c.options.as<models::PanguOptions>();
  o.patch_size = 2;
  o.embed_dim = 8;
  o.mlp_ratio = 2.0;
  o.upper_variables = 1;
  o.levels = 2;
  o.window = {2, 3, 4};
  o.stage_depths = {2, 2, 2, 2};
  o.stage_heads = {2, 2, 2, 2};
  const Names in{"u_500@t0", "u_850@t0", "a@t0"}, out{"u_500", "u_850", "a"};
  models::ModelShape globe{3, 3, 24, 20};
  globe.state_channels = 3;
  models::ModelShape region = globe;
  region.lat = 12;
  torch::manual_seed(1);
  models::WeatherModel a = models::build_model(c, globe);
  randomise(*a, 12);
  torch::manual_seed(2);
  models::WeatherModel b = models::build_model(c, region);
  models::GridPlacement placement{24, 20, {}, {}};
  for (int64_t r = 6; r < 18; ++r) placement.rows.push_back(r);
  for (int64_t col = 0; col < 20; ++col) placement.cols.push_back(col);

  const std::string message = error_of([&] { transfer_weights(*b, model_weights(*a), in, out, in, out, true, "a.pt"); });
  EXPECT_NE(message.find("layer1_block0.attn.earth_bias (checkpoint"), std::string::npos) << message;

  const ChannelTransferReport report =
      transfer_weights(*b, model_weights(*a), in, out, in, out, /*strict=*/true, "a.pt", placement);
  // Every block's table (the fine stages' 4 latitude windows become 2, the coarse stages' 2 become
  // 1) and the shifted blocks' masks.
  EXPECT_EQ(report.regridded.size(), 8u + 4u) << report.summary();
  EXPECT_NE(report.summary().find("regridded for the region:\n  layer1_block0.attn.earth_bias: Earth-specific "
                                  "bias: 2 latitude windows from the trained grid's 4 (windows 1, 2)"),
            std::string::npos)
      << report.summary();
  EXPECT_TRUE(report.initialised.empty());
  const TensorMap now = model_weights(*b), trained = model_weights(*a);
  EXPECT_TRUE(torch::equal(now.at("layer1_block0.attn.qkv.weight"), trained.at("layer1_block0.attn.qkv.weight")));
  EXPECT_TRUE(torch::equal(now.at("layer2_block1.attn.earth_bias").select(1, 0),
                           trained.at("layer2_block1.attn.earth_bias").select(1, 1)));
}

TEST(ChannelTransfer, DuplicateChannelNamesAreAConfigError) {
  models::WeatherModel a = build("unet", kOldIn, kOldOut, 1);
  models::WeatherModel b = build("unet", kNewIn, kNewOut, 2);
  const std::string message = error_of(
      [&] { transfer_weights(*b, model_weights(*a), kOldIn, kOldOut, kNewIn, {"a", "c", "a"}, false, "a.pt"); });
  EXPECT_NE(message.find("'a' appears twice in the run's output channels"), std::string::npos) << message;
  EXPECT_THROW(transfer_weights(*b, model_weights(*a), {"a@t0", "a@t0"}, kOldOut, kNewIn, kNewOut, false, "a.pt"),
               ConfigError);
}

TEST(ChannelTransfer, NoChannelInCommonLeavesTheLayerFreshAndStrictRefusesIt) {
  models::WeatherModel a = build("vit", kOldIn, kOldOut, 1);
  randomise(*a, 14);
  const Names out{"u", "v"};
  models::WeatherModel b = build("vit", kOldIn, out, 2);
  const TensorMap fresh = cloned_weights(*b);
  const std::string message =
      error_of([&] { transfer_weights(*b, model_weights(*a), kOldIn, kOldOut, kOldIn, out, true, "a.pt"); });
  EXPECT_NE(message.find("head.proj.weight (no output channel in common)"), std::string::npos) << message;

  const ChannelTransferReport report =
      transfer_weights(*b, model_weights(*a), kOldIn, kOldOut, kOldIn, out, false, "a.pt");
  EXPECT_EQ(report.initialised, (Names{"head.proj.bias", "head.proj.weight"}));
  EXPECT_EQ(report.dropped_outputs, kOldOut);
  const TensorMap now = model_weights(*b);
  EXPECT_TRUE(torch::equal(now.at("head.proj.weight"), fresh.at("head.proj.weight")));
  EXPECT_TRUE(torch::equal(now.at("embed.proj.weight"), model_weights(*a).at("embed.proj.weight")));
}

// init_from with train.strict = false from another architecture: not one tensor fits, so training
// would start from scratch under the name of fine-tuning. An error (the run file's: ConfigError),
// nothing copied; a transfer that loads some says which share of the model's values it carried.
TEST(ChannelTransfer, ATransferThatLoadsNothingIsAnErrorAndTheShareIsReported) {
  models::WeatherModel vit = build("vit", kOldIn, kOldOut, 1);
  models::WeatherModel unet = build("unet", kOldIn, kOldOut, 2);
  const TensorMap fresh = cloned_weights(*unet);
  const std::string message =
      error_of([&] { transfer_weights(*unet, model_weights(*vit), kOldIn, kOldOut, kOldIn, kOldOut, false, "vit.pt"); });
  EXPECT_NE(message.find("vit.pt: no tensor of the checkpoint fits this model"), std::string::npos) << message;
  EXPECT_THROW(transfer_weights(*unet, model_weights(*vit), kOldIn, kOldOut, kOldIn, kOldOut, false, "vit.pt"),
               ConfigError);
  for (const auto& [name, t] : model_weights(*unet)) EXPECT_TRUE(torch::equal(t, fresh.at(name))) << name << " was written";

  // All of it: 100%. Only the decoder's tensors: their share of the model's values.
  models::WeatherModel a = build("unet", kOldIn, kOldOut, 3);
  EXPECT_DOUBLE_EQ(transfer_weights(*unet, model_weights(*a), kOldIn, kOldOut, kOldIn, kOldOut, false, "a.pt").loaded_share, 1.0);
  TensorMap some;
  int64_t kept = 0, total = 0;
  for (const auto& [name, t] : model_weights(*a)) {
    total += t.numel();
    if (name.rfind("decoder", 0) == 0) some[name] = t, kept += t.numel();
  }
  ASSERT_GT(kept, 0);
  const ChannelTransferReport partial = transfer_weights(*unet, some, kOldIn, kOldOut, kOldIn, kOldOut, false, "a.pt");
  EXPECT_DOUBLE_EQ(partial.loaded_share, static_cast<double>(kept) / static_cast<double>(total));
  EXPECT_NE(partial.summary().find("of the model's values come from the checkpoint"), std::string::npos) << partial.summary();
}

// A global GraphCast (PhysicsNeMo's graph, as an imported checkpoint has it) initialises one on a
// data.region crop: every parameter loads whole (none is grid-sized), the graph is built for the
// region (the mesh cut to the nodes over it, each kept mesh edge with the global mesh's features)
// and the report says what changed. The region's model then trains.
TEST(ChannelTransfer, GlobalGraphCastFineTunesOnARegion) {
  ModelConfig c;
  c.name = "graphcast";
  auto& o = c.options.as<models::GraphCastOptions>();
  o.latent = 16;
  o.processor_layers = 3;
  o.mesh_refinement = 3;
  o.graph = "physicsnemo";
  o.grid_position_features = false;
  o.aggregate_residual = true;
  // 5 degrees, GraphCastNet's layout; the region: 20N..60N, 130W..60W.
  models::ModelShape global{2, 2, 37, 72};
  std::tie(global.latitudes, global.longitudes) = models::physicsnemo_grid(37, 72);
  models::ModelShape region{2, 2, 9, 15};
  for (int64_t i = 0; i < 9; ++i) region.latitudes.push_back(global.latitudes[static_cast<size_t>(22 + i)]);
  for (int64_t j = 0; j < 15; ++j) region.longitudes.push_back(global.longitudes[static_cast<size_t>(9 + j)]);
  ASSERT_EQ(region.latitudes.front(), 20.0);
  ASSERT_EQ(region.longitudes.front(), -130.0);

  torch::manual_seed(1);
  const models::WeatherModel g = models::build_model(c, global);
  randomise(*g, 2);
  const TensorMap weights = cloned_weights(*g);
  torch::manual_seed(3);
  const models::WeatherModel r = models::build_model(c, region);
  const Names in{"a@t0", "b@t0"}, out{"a", "b"};
  const ChannelTransferReport report = transfer_weights(*r, weights, in, out, in, out, /*strict=*/true, "global.pt");

  EXPECT_EQ(report.rebuilt.size(), 11u);
  EXPECT_TRUE(report.unexpected.empty());
  EXPECT_TRUE(report.initialised.empty());
  for (const auto& p : r->named_parameters()) EXPECT_TRUE(torch::equal(p.value(), weights.at(p.key()))) << p.key();
  const auto& rg = std::dynamic_pointer_cast<models::GraphCastImpl>(r)->graph();
  const auto& gg = std::dynamic_pointer_cast<models::GraphCastImpl>(g)->graph();
  EXPECT_EQ(gg.mesh_nodes, 642) << "the global grid keeps all of M3";
  EXPECT_LT(rg.mesh_nodes, gg.mesh_nodes / 4);
  EXPECT_GT(rg.mesh_nodes, 20);
  const std::string summary = report.summary();
  EXPECT_NE(summary.find("grid: graph built for this grid: 135 grid points (checkpoint 2664), " +
                         std::to_string(rg.mesh_nodes) + " mesh nodes (checkpoint 642)"),
            std::string::npos)
      << summary;

  // The region's mesh edges are the global mesh's between kept nodes, features and all.
  std::map<std::pair<int64_t, int64_t>, int64_t> global_edge;
  for (int64_t e = 0; e < gg.mesh_senders.size(0); ++e)
    global_edge[{gg.mesh_senders[e].item<int64_t>(), gg.mesh_receivers[e].item<int64_t>()}] = e;
  const auto kept = rg.kept_mesh_nodes.accessor<int64_t, 1>();
  for (int64_t e = 0; e < rg.mesh_senders.size(0); ++e) {
    const auto it = global_edge.find({kept[rg.mesh_senders[e].item<int64_t>()], kept[rg.mesh_receivers[e].item<int64_t>()]});
    ASSERT_NE(it, global_edge.end()) << "regional mesh edge " << e << " is not a global one";
    ASSERT_TRUE(torch::equal(rg.mesh_edge_features[e], gg.mesh_edge_features[it->second])) << "edge " << e;
    ASSERT_TRUE(torch::equal(rg.mesh_features[rg.mesh_senders[e].item<int64_t>()],
                             gg.mesh_features[kept[rg.mesh_senders[e].item<int64_t>()]]));
  }

  // It trains: a step on the region lowers its loss.
  torch::optim::Adam adam(r->parameters(), torch::optim::AdamOptions(1e-3));
  const torch::Tensor x = torch::randn({1, 2, 9, 15}), y = torch::randn({1, 2, 9, 15});
  const double before = torch::mse_loss(r->forward(x), y).item<double>();
  for (int step = 0; step < 5; ++step) {
    adam.zero_grad();
    const torch::Tensor loss = torch::mse_loss(r->forward(x), y);
    loss.backward();
    adam.step();
  }
  EXPECT_LT(torch::mse_loss(r->forward(x), y).item<double>(), before);
}

}  // namespace
