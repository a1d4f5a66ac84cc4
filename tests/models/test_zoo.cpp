// The model zoo: shapes on real and awkward grids, parameter counts against the architectures'
// formulas, block structure, checkpointing (same gradients, less memory) and bf16 autocast.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>

#include "core/autocast.h"
#include "core/error.h"
#include "core/memory_meter.h"
#include "models/fourcastnet/fourcastnet.h"
#include "models/gnn/gnn.h"
#include "models/graphcast/graphcast.h"
#include "models/pangu/pangu.h"
#include "models/unet/unet.h"
#include "models/vit/vit.h"
#include "models/weather_model.h"

namespace wxtrain::models {
namespace {

// The counting allocator must be in place before any tensor the memory test measures exists.
const bool kMeterInstalled = (memory_meter(c10::Device(c10::DeviceType::CPU)), true);

// The demo data: 6 variables, history 2, on the 33 x 36 storm grid.
ModelShape storm_shape() { return {12, 6, 33, 36}; }

ModelConfig named(const std::string& name) {
  ModelConfig c;
  c.name = name;
  return c;
}

// Small configurations that still exercise every part (several levels / heads / MLP layers): one
// [model] table for the whole zoo (a model ignores the others' keys), read as a run file is.
ModelConfig small(const std::string& name) {
  return parse_config("[model]\nname = \"" + name +
                          "\"\nchannels = [8, 16, 24]\ngroups = 4\npatch_size = 4\nembed_dim = 24\ndepth = 2\n"
                          "heads = 3\nmlp_ratio = 2.0\nlatent = 16\nprocessor_layers = 2\nmlp_layers = 3\n"
                          "neighbourhood = 1\nafno_blocks = 4\nmesh_refinement = 2\nwindow = [2, 3, 4]\n"
                          "stage_depths = [2, 2, 2, 2]\nstage_heads = [2, 4, 4, 2]\n"
                          "[data]\nvariables = [\"a\"]\ngrid = [8, 8]\n",
                      "small.toml")
      .model;
}

WeatherModel build_seeded(const ModelConfig& config, const ModelShape& shape, uint64_t seed = 0) {
  torch::manual_seed(seed);
  return build_model(config, shape);
}

int64_t count_parameters(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

class ZooTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooTest, OutputShapeOnTheStormGrid) {
  WeatherModel model = build_seeded(named(GetParam()), storm_shape());
  torch::NoGradGuard no_grad;
  torch::Tensor y = model->forward(torch::randn({2, 12, 33, 36}));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 6, 33, 36}));
  EXPECT_TRUE(torch::isfinite(y).all().item<bool>());
}

TEST_P(ZooTest, OutputShapeOnAGridDivisibleByNothing) {
  const ModelShape shape{5, 3, 17, 23};
  WeatherModel model = build_seeded(small(GetParam()), shape);
  torch::NoGradGuard no_grad;
  torch::Tensor y = model->forward(torch::randn({3, 5, 17, 23}));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{3, 3, 17, 23}));
  EXPECT_TRUE(torch::isfinite(y).all().item<bool>());
}

TEST_P(ZooTest, EveryParameterBelongsToABlock) {
  // Checkpointing hands a block's own parameters to the recompute, and train.freeze globs on these
  // names: a parameter outside every block would silently lose its gradient.
  WeatherModel model = build_seeded(small(GetParam()), {5, 3, 17, 23});
  const std::set<std::string> blocks(model->block_names().begin(), model->block_names().end());
  for (const auto& item : model->named_parameters()) {
    const std::string head = item.key().substr(0, item.key().find('.'));
    EXPECT_TRUE(blocks.count(head)) << item.key();
  }
}

TEST_P(ZooTest, ChannelAxesAreExactlyTheParametersThatDependOnTheChannels) {
  // Fine-tuning onto other channels (trainer/channel_transfer.h) carries these over by channel and
  // loads everything else whole: a parameter whose shape follows the channels but is missing here
  // would fail to load, one listed on the wrong dim or count would be sliced wrongly.
  const ModelConfig config = small(GetParam());
  const ModelShape a{5, 3, 17, 23}, b{2, 4, 17, 23};
  WeatherModel ma = build_seeded(config, a), mb = build_seeded(config, b);
  std::map<std::string, std::vector<int64_t>> shapes_b;
  for (const auto& item : mb->named_parameters()) shapes_b[item.key()] = item.value().sizes().vec();
  std::map<std::string, ChannelAxis> axes;
  for (const ChannelAxis& axis : ma->channel_axes()) {
    EXPECT_TRUE(axes.emplace(axis.parameter, axis).second) << axis.parameter << " listed twice";
    EXPECT_TRUE(shapes_b.count(axis.parameter)) << axis.parameter << " is not a parameter";
  }
  int inputs = 0, outputs = 0;
  for (const auto& item : ma->named_parameters()) {
    const std::vector<int64_t> sa = item.value().sizes().vec(), sb = shapes_b.at(item.key());
    auto it = axes.find(item.key());
    if (it == axes.end()) {
      EXPECT_EQ(sa, sb) << item.key() << " depends on the channels but is not in channel_axes()";
      continue;
    }
    const ChannelAxis& axis = it->second;
    (axis.input ? inputs : outputs)++;
    ASSERT_LT(axis.dim, static_cast<int64_t>(sa.size())) << item.key();
    EXPECT_EQ(sa[axis.dim], (axis.input ? a.in_channels : a.out_channels) * axis.per_channel) << item.key();
    EXPECT_EQ(sb[axis.dim], (axis.input ? b.in_channels : b.out_channels) * axis.per_channel) << item.key();
    for (size_t d = 0; d < sa.size(); ++d) {
      if (static_cast<int64_t>(d) != axis.dim) {
        EXPECT_EQ(sa[d], sb[d]) << item.key() << " dim " << d;
      }
    }
  }
  EXPECT_GT(inputs, 0);
  EXPECT_GT(outputs, 0);
}

TEST_P(ZooTest, CheckpointingGivesTheSameGradients) {
  const ModelShape shape{5, 3, 17, 23};
  WeatherModel model = build_seeded(small(GetParam()), shape, 7);
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({2, 5, 17, 23});
  const torch::Tensor w = torch::randn({2, 3, 17, 23});

  auto gradients = [&](bool checkpointing) {
    model->set_checkpointing(checkpointing);
    model->zero_grad();
    torch::Tensor input = x.clone().requires_grad_(true);
    (model->forward(input) * w).sum().backward();
    std::vector<torch::Tensor> g;
    for (const auto& p : model->parameters()) g.push_back(p.grad().clone());
    g.push_back(input.grad().clone());
    return g;
  };
  const auto plain = gradients(false);
  const auto recomputed = gradients(true);
  ASSERT_EQ(plain.size(), recomputed.size());
  const auto names = model->named_parameters().keys();
  for (size_t i = 0; i < plain.size(); ++i) {
    const std::string what = i < names.size() ? names[i] : "input";
    ASSERT_TRUE(recomputed[i].defined()) << what;
    EXPECT_GT(plain[i].abs().sum().item<double>(), 0.0) << what;
    EXPECT_TRUE(torch::allclose(plain[i], recomputed[i], 1e-5, 1e-5))
        << what << ": max difference " << (plain[i] - recomputed[i]).abs().max().item<double>();
  }
}

TEST_P(ZooTest, CheckpointingWithAFrozenFirstBlock) {
  // Fine-tuning: the first block frozen (train.freeze), the input needing no gradient either, so
  // the first checkpointed block has nothing to differentiate.
  const ModelShape shape{5, 3, 17, 23};
  WeatherModel model = build_seeded(small(GetParam()), shape, 7);
  const std::string frozen = model->block_names().front();
  for (auto& item : model->named_parameters())
    if (item.key().rfind(frozen + ".", 0) == 0) item.value().requires_grad_(false);
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({2, 5, 17, 23});
  auto gradients = [&](bool checkpointing) {
    model->set_checkpointing(checkpointing);
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    model->forward(x).square().sum().backward();
    std::vector<torch::Tensor> g;
    for (const auto& p : model->parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
    return g;
  };
  const auto plain = gradients(false);
  const auto recomputed = gradients(true);
  const auto params = model->named_parameters();
  for (size_t i = 0; i < plain.size(); ++i) {
    const auto& name = params[i].key();
    if (!params[i].value().requires_grad()) {
      EXPECT_FALSE(recomputed[i].defined()) << name;
      continue;
    }
    ASSERT_TRUE(recomputed[i].defined()) << name;
    EXPECT_TRUE(torch::allclose(plain[i], recomputed[i], 1e-5, 1e-5)) << name;
  }
}

TEST_P(ZooTest, PureBf16ForwardAndBackward) {
  // train.precision = "bf16": the whole model converted, no autocast.
  WeatherModel model = build_seeded(small(GetParam()), storm_shape());
  model->to(torch::kBFloat16);
  torch::Tensor y = model->forward(torch::randn({2, 12, 33, 36}).to(torch::kBFloat16));
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  ASSERT_TRUE(torch::isfinite(y).all().item<bool>());
  y.to(torch::kFloat).square().mean().backward();
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_EQ(item.value().grad().scalar_type(), torch::kBFloat16) << item.key();
  }
}

TEST_P(ZooTest, CheckpointingReducesActivationMemoryAtBatch8) {
  ASSERT_TRUE(kMeterInstalled);
  MemoryMeter& meter = memory_meter(c10::Device(c10::DeviceType::CPU));
  WeatherModel model = build_seeded(named(GetParam()), storm_shape());
  const torch::Tensor x = torch::randn({8, 12, 33, 36});

  struct Usage {
    int64_t kept_after_forward, peak;
  };
  auto measure = [&](bool checkpointing) {
    model->set_checkpointing(checkpointing);
    model->zero_grad();
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    Usage u{};
    {
      PeakScope scope(meter);
      torch::Tensor loss = model->forward(x).square().mean();
      u.kept_after_forward = meter.snapshot().allocated - scope.start();
      loss.backward();
      u.peak = scope.peak_increase();
    }
    return u;
  };
  measure(false);  // warm-up: one-time allocations of the first run stay out of the comparison
  const Usage plain = measure(false);
  const Usage recomputed = measure(true);
  std::cout << "[ " << GetParam() << " batch 8 ] kept after forward: " << plain.kept_after_forward << " -> "
            << recomputed.kept_after_forward << " bytes; peak: " << plain.peak << " -> " << recomputed.peak
            << " bytes\n";
  EXPECT_LT(recomputed.kept_after_forward * 2, plain.kept_after_forward);
  EXPECT_LT(recomputed.peak, plain.peak);
}

TEST_P(ZooTest, Bf16AutocastForwardAndBackward) {
  WeatherModel model = build_seeded(small(GetParam()), storm_shape());
  const torch::Tensor x = torch::randn({2, 12, 33, 36});
  torch::Tensor reference;
  {
    torch::NoGradGuard no_grad;
    reference = model->forward(x);
  }
  torch::Tensor y;
  {
    AutocastGuard autocast(c10::DeviceType::CPU, torch::kBFloat16, true);
    y = model->forward(x);
  }
  EXPECT_EQ(y.sizes(), reference.sizes());
  ASSERT_TRUE(torch::isfinite(y).all().item<bool>());
  // bf16 keeps ~3 significant digits; a model-sized error stays well under the output's spread.
  const double error = (y.to(torch::kFloat) - reference).abs().max().item<double>();
  EXPECT_LT(error, 0.1 * reference.abs().max().item<double>() + 0.05);
  y.to(torch::kFloat).square().mean().backward();
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_EQ(item.value().grad().scalar_type(), torch::kFloat) << item.key();
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ZooTest, ::testing::Values("unet", "vit", "gnn", "fourcastnet", "graphcast", "pangu", "aifs"),
                         [](const auto& info) { return info.param; });

// ---- train.noise_injection = "conditional_norm" (docs/ensembles.md) ----

// The models that take an ensemble's noise through conditional LayerNorms: 5 input channels plus 4
// noise fields, on a grid no patch or window divides.
class ConditionalNoiseTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ConditionalNoiseTest, FreshNormsIgnoreTheNoiseTrainedOnesReadIt) {
  ModelShape shape{9, 3, 17, 23};
  shape.conditional_noise = 4;
  const ModelConfig config = small(GetParam());
  WeatherModel model = build_seeded(config, shape);
  EXPECT_EQ(find_model(GetParam()).parameter_count(config, shape), count_parameters(*model));
  const std::set<std::string> blocks(model->block_names().begin(), model->block_names().end());
  int64_t conditional = 0;
  for (const auto& item : model->named_parameters()) {
    EXPECT_TRUE(blocks.count(item.key().substr(0, item.key().find('.')))) << item.key();
    if (item.key().find(".scale.") != std::string::npos || item.key().find(".bias.") != std::string::npos) {
      EXPECT_EQ(item.value().abs().max().item<double>(), 0.0) << item.key() << " does not start at zero";
      ++conditional;
    }
  }
  EXPECT_GT(conditional, 0) << "no conditional norms";
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({2, 9, 17, 23});
  torch::Tensor other = x.clone();
  other.narrow(1, 5, 4).normal_();
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(model->forward(x), model->forward(other)));
    // A trained model's norms have left zero: the noise moves the output.
    for (auto& item : model->named_parameters())
      if (item.key().find(".scale.") != std::string::npos || item.key().find(".bias.") != std::string::npos)
        item.value().normal_(0, 0.3);
    const double moved = (model->forward(x) - model->forward(other)).abs().max().item<double>();
    EXPECT_GT(moved, 1e-2) << "the noise does not reach the output";
  }
  // Gradients reach the conditional norms and the noise MLP, never the noise fields, and are the
  // same with checkpointing.
  std::map<std::string, torch::Tensor> grads[2];
  for (int on = 0; on < 2; ++on) {
    model->zero_grad();
    model->set_checkpointing(on == 1);
    const torch::Tensor xi = x.clone().requires_grad_(true);
    model->forward(xi).square().sum().backward();
    EXPECT_EQ(xi.grad().narrow(1, 5, 4).abs().max().item<double>(), 0.0);
    EXPECT_GT(xi.grad().narrow(1, 0, 5).abs().max().item<double>(), 0.0);
    for (const auto& item : model->named_parameters()) {
      ASSERT_TRUE(item.value().grad().defined()) << item.key();
      grads[on][item.key()] = item.value().grad().clone();
    }
  }
  double largest = 0;
  for (const auto& [name, g] : grads[0]) largest = std::max(largest, g.abs().max().item<double>());
  for (const auto& [name, g] : grads[0]) {
    if (name.find("noise_injector.") == 0 || name.find(".scale.") != std::string::npos)
      EXPECT_GT(g.abs().max().item<double>(), 0.0) << name;
    // To round-off of the gradient's size (the recompute may sum in another order), floored at 1e-3
    // of the largest: AIFS's attention key bias has a gradient of zero in exact arithmetic.
    const double size = std::max(g.abs().max().item<double>(), 1e-3 * largest);
    EXPECT_LT((g - grads[1][name]).abs().max().item<double>() / size, 1e-4) << name;
  }
}

TEST(ConditionalNoise, RunFilesSayWhichModelTakesIt) {
  auto run = [](const std::string& model) {
    return parse_config("[model]\nname = \"" + model + "\"\n[data]\nvariables = [\"a\"]\ngrid = [8, 8]\n"
                        "[train]\nensemble_members = 2\nnoise_injection = \"conditional_norm\"\n",
                        "ens.toml");
  };
  EXPECT_EQ(model_shape(run("vit")).conditional_noise, 4);
  RunConfig input = run("vit");
  input.train.noise_injection = "input";
  // The noise fields stay in the input (the rollout appends them as before); the model takes them out.
  EXPECT_EQ(model_shape(run("vit")).in_channels, model_shape(input).in_channels);
  EXPECT_EQ(model_shape(input).conditional_noise, 0);
  EXPECT_EQ(model_shape(run("aifs")).conditional_noise, 4);
  EXPECT_EQ(model_shape(run("gnn")).conditional_noise, 4);
  EXPECT_EQ(model_shape(run("graphcast")).conditional_noise, 4);
  for (const std::string name : {"unet", "fourcastnet", "pangu"}) {
    try {
      model_shape(run(name));
      ADD_FAILURE() << name << " took conditional_norm";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("model.name = \"" + name + "\""), std::string::npos) << what;
      EXPECT_NE(what.find("train.noise_injection"), std::string::npos) << what;
    }
  }
  // One member: no noise, nothing to condition on.
  RunConfig one = run("vit");
  one.train.ensemble_members = 1;
  EXPECT_EQ(model_shape(one).conditional_noise, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, ConditionalNoiseTest, ::testing::Values("vit", "aifs", "gnn", "graphcast"),
                         [](const auto& info) { return info.param; });

// ---- parameter counts from the architectures' formulas ----

TEST(UNet, ParameterCountMatchesTheArchitecture) {
  const ModelConfig c = small("unet");  // channels 8, 16, 24
  const ModelShape s{5, 3, 17, 23};
  auto conv_block = [](int64_t in, int64_t out) { return 9 * in * out + 2 * out + 9 * out * out + 2 * out; };
  const int64_t expected = conv_block(5, 8) + conv_block(8, 16) + conv_block(16, 24)  // encoder0..2
                           + conv_block(24 + 16, 16) + conv_block(16 + 8, 8)         // decoder1, decoder0
                           + 8 * 3 + 3;                                              // 1x1 head
  EXPECT_EQ(count_parameters(*build_model(c, s)), expected);
}

TEST(UNet, OneLevelAndFourLevels) {
  ModelConfig c = small("unet");
  torch::NoGradGuard no_grad;
  for (const std::vector<int64_t>& channels : {std::vector<int64_t>{8}, std::vector<int64_t>{8, 8, 16, 16}}) {
    c.options.as<UNetOptions>().channels = channels;
    auto model = std::dynamic_pointer_cast<UNetImpl>(build_model(c, {5, 3, 17, 23}));
    ASSERT_TRUE(model);
    EXPECT_EQ(model->grid_multiple(), int64_t{1} << (channels.size() - 1));
    EXPECT_EQ(model->block_names().size(), 2 * channels.size());  // encoders, decoders, head
    EXPECT_EQ(model->forward(torch::randn({1, 5, 17, 23})).sizes(), (std::vector<int64_t>{1, 3, 17, 23}));
  }
}

TEST(ViT, ParameterCountMatchesTheArchitecture) {
  const ModelConfig c = small("vit");  // D 24, patch 4, depth 2, mlp 48
  const ModelShape s{5, 3, 17, 23};
  const int64_t D = 24, p = 4, hidden = 48, tokens = 5 * 6;  // ceil(17/4) x ceil(23/4)
  const int64_t embed = 5 * p * p * D + D + tokens * D;
  const int64_t block = 2 * D + (D * 3 * D + 3 * D) + (D * D + D) + 2 * D + (D * hidden + hidden) + (hidden * D + D);
  const int64_t head = 2 * D + D * p * p * 3 + p * p * 3;
  EXPECT_EQ(count_parameters(*build_model(c, s)), embed + 2 * block + head);
}

TEST(GraphNet, ParameterCountMatchesTheArchitecture) {
  const ModelConfig c = small("gnn");  // latent 16, 2 processor layers, 3-layer MLPs
  const ModelShape s{5, 3, 17, 23};
  constexpr int64_t L = 16;  // a constant: the lambda needs no capture
  auto mlp = [](int64_t in, int64_t out, bool norm) {  // in -> L -> L -> out
    return (in * L + L) + (L * L + L) + (L * out + out) + (norm ? 2 * out : 0);
  };
  const int64_t encoder = mlp(5 + 2, L, true) + mlp(3, L, true);  // nodes (+ lat, lon), edges
  const int64_t processor = mlp(3 * L, L, true) + mlp(2 * L, L, true);
  const int64_t decoder = mlp(L, 3, false);
  EXPECT_EQ(count_parameters(*build_model(c, s)), encoder + 2 * processor + decoder);
}

TEST(GraphNet, ConditionalNormsCountTheirParameters) {
  // With 4 conditional noise channels: the encoder reads the 5 variables only; every processor
  // MLP's LayerNorm (2 L) becomes a ConditionalLayerNorm (scale and bias Linears from the 4-wide
  // embedding, 2 (4 + 1) L); the noise MLP is Linear(4, 32), GELU, Linear(32, 4), LayerNorm(4).
  const ModelConfig c = small("gnn");  // latent 16, 2 processor layers, 3-layer MLPs
  ModelShape s{9, 3, 17, 23};
  s.conditional_noise = 4;
  constexpr int64_t L = 16, k = 4;
  auto mlp = [](int64_t in, int64_t out, bool norm) {
    return (in * L + L) + (L * L + L) + (L * out + out) + (norm ? 2 * out : 0);
  };
  const int64_t encoder = mlp(5 + 2, L, true) + mlp(3, L, true);
  const int64_t processor = mlp(3 * L, L, false) + mlp(2 * L, L, false) + 2 * (2 * (k + 1) * L);
  const int64_t decoder = mlp(L, 3, false);
  const int64_t noise_mlp = (k * 32 + 32) + (32 * k + k) + 2 * k;
  const WeatherModel model = build_model(c, s);
  EXPECT_EQ(count_parameters(*model), encoder + 2 * processor + decoder + noise_mlp);
  EXPECT_EQ(find_model("gnn").parameter_count(c, s), count_parameters(*model));
  // The encoder's first Linear reads the variables, not the noise (transfers skip those channels).
  const auto params = model->named_parameters();
  EXPECT_EQ(params["encoder.node_mlp.first.0.weight"].size(1), 5);
  EXPECT_TRUE(params.contains("processor1.edge_mlp.norm.scale.weight"));
  EXPECT_TRUE(params.contains("noise_injector.noise_mlp.mlp.0.weight"));
}

TEST(GraphNet, SingleLayerMlpsAreOneLinear) {
  ModelConfig c = small("gnn");
  c.options.as<GraphNetOptions>().mlp_layers = 1;
  c.options.as<GraphNetOptions>().processor_layers = 1;
  const int64_t L = 16;
  const int64_t expected = (7 * L + L + 2 * L) + (3 * L + L + 2 * L)  // encoder
                           + (3 * L * L + L + 2 * L) + (2 * L * L + L + 2 * L)  // processor0
                           + (L * 3 + 3);                                       // decoder
  EXPECT_EQ(count_parameters(*build_model(c, {5, 3, 17, 23})), expected);
}

// ---- block structure ----

TEST(Blocks, NamesInForwardOrder) {
  const ModelShape s = storm_shape();
  EXPECT_EQ(build_model(named("unet"), s)->block_names(),
            (std::vector<std::string>{"encoder0", "encoder1", "encoder2", "decoder1", "decoder0", "head"}));
  EXPECT_EQ(build_model(named("vit"), s)->block_names(),
            (std::vector<std::string>{"embed", "block0", "block1", "block2", "block3", "head"}));
  EXPECT_EQ(build_model(named("gnn"), s)->block_names(),
            (std::vector<std::string>{"encoder", "processor0", "processor1", "processor2", "processor3", "decoder"}));
  EXPECT_EQ(build_model(named("fourcastnet"), s)->block_names(),
            (std::vector<std::string>{"embed", "block0", "block1", "block2", "block3", "head"}));
  EXPECT_EQ(build_model(named("graphcast"), s)->block_names(),
            (std::vector<std::string>{"grid2mesh", "processor0", "processor1", "processor2", "processor3", "mesh2grid"}));
}

TEST(Blocks, EncoderParametersShareAFreezablePrefix) {
  // train.freeze = ["encoder*"] (fnmatch) must take the U-Net's contracting path and nothing else.
  for (const auto& item : build_model(named("unet"), storm_shape())->named_parameters()) {
    const bool encoder = item.key().rfind("encoder", 0) == 0;
    const bool decoder_or_head = item.key().rfind("decoder", 0) == 0 || item.key().rfind("head", 0) == 0;
    EXPECT_TRUE(encoder != decoder_or_head) << item.key();
  }
}

// ---- the grid graph ----

TEST(GridGraph, RadiusOneLinksTheEightNeighboursWithoutWraparound) {
  const GridGraph g = build_grid_graph(3, 4, 1);
  // Interior nodes have 8 senders, edge nodes 5, corners 3: sum over offsets of (3-|di|)(4-|dj|).
  const int64_t expected = 2 * (3 * 3) + 2 * (2 * 4) + 4 * (2 * 3);
  ASSERT_EQ(g.senders.size(0), expected);
  const torch::Tensor in_degree = torch::bincount(g.receivers, {}, 12);
  EXPECT_EQ(in_degree[0].item<int64_t>(), 3);  // corner
  EXPECT_EQ(in_degree[1].item<int64_t>(), 5);  // top edge
  EXPECT_EQ(in_degree[5].item<int64_t>(), 8);  // interior (1, 1)
  // Sorted by receiver; features are the sender's offset and its length.
  EXPECT_TRUE((g.receivers.slice(0, 1) >= g.receivers.slice(0, 0, -1)).all().item<bool>());
  const auto s = g.senders, r = g.receivers;
  const torch::Tensor dlat = (s.div(4, "floor") - r.div(4, "floor")).to(torch::kFloat);
  const torch::Tensor dlon = (s.remainder(4) - r.remainder(4)).to(torch::kFloat);
  EXPECT_TRUE(torch::equal(g.edge_features.select(1, 0), dlat));
  EXPECT_TRUE(torch::equal(g.edge_features.select(1, 1), dlon));
  EXPECT_TRUE(torch::allclose(g.edge_features.select(1, 2), torch::sqrt(dlat * dlat + dlon * dlon)));
  EXPECT_LE(dlon.abs().max().item<float>(), 1.0f);  // no wraparound across the lon edges
}

TEST(GridGraph, RadiusTwoOnTheStormGrid) {
  const GridGraph g = build_grid_graph(33, 36, 2);
  int64_t expected = 0;
  for (int64_t di = -2; di <= 2; ++di)
    for (int64_t dj = -2; dj <= 2; ++dj)
      if (di || dj) expected += (33 - std::abs(di)) * (36 - std::abs(dj));
  EXPECT_EQ(g.senders.size(0), expected);
  EXPECT_LE(g.edge_features.abs().max().item<float>(), std::sqrt(2.0f) + 1e-6f);  // offsets / radius
}

TEST(GraphNet, GraphIndicesAreBuffers) {
  WeatherModel model = build_model(named("gnn"), storm_shape());
  const auto buffers = model->named_buffers();
  ASSERT_TRUE(buffers.contains("senders"));
  ASSERT_TRUE(buffers.contains("receivers"));
  EXPECT_EQ(buffers["senders"].scalar_type(), torch::kLong);
  const torch::Tensor senders = buffers["senders"].clone(), receivers = buffers["receivers"].clone();
  // Moving to bf16 (train.precision = "bf16") keeps the indices integral and exact.
  model->to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(model->named_buffers()["senders"], senders));
  EXPECT_TRUE(torch::equal(model->named_buffers()["receivers"], receivers));
  EXPECT_EQ(model->named_buffers()["edge_features"].scalar_type(), torch::kBFloat16);
  model->to(torch::Device(torch::kCPU), torch::kFloat);
  EXPECT_TRUE(torch::equal(model->named_buffers()["senders"], senders));
  EXPECT_EQ(model->named_parameters()[0].value().scalar_type(), torch::kFloat);
  model->to(torch::kBFloat16);
  torch::NoGradGuard no_grad;
  EXPECT_EQ(model->forward(torch::randn({1, 12, 33, 36}, torch::kBFloat16)).scalar_type(), torch::kBFloat16);
}

// ---- configuration errors ----

TEST(BuildModel, UnknownNameListsTheZoo) {
  try {
    build_model(named("bad"), storm_shape());
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bad"), std::string::npos) << what;
    for (const char* name : {"unet", "vit", "gnn", "fourcastnet", "graphcast", "pangu"}) EXPECT_NE(what.find(name), std::string::npos) << what;
  }
}

TEST(BuildModel, InconsistentSettingsAreConfigErrors) {
  ModelConfig unet = named("unet");
  unet.options.as<UNetOptions>().channels = {32, 60};  // 8 groups do not divide 60
  EXPECT_THROW(build_model(unet, storm_shape()), ConfigError);
  ModelConfig vit = named("vit");
  vit.options.as<ViTOptions>().heads = 5;  // does not divide 128
  EXPECT_THROW(build_model(vit, storm_shape()), ConfigError);
  ModelConfig gnn = named("gnn");
  gnn.options.as<GraphNetOptions>().neighbourhood = 0;
  EXPECT_THROW(build_model(gnn, storm_shape()), ConfigError);
  ModelConfig fourcastnet = named("fourcastnet");
  fourcastnet.options.as<FourCastNetOptions>().afno_blocks = 5;  // does not divide 128
  EXPECT_THROW(build_model(fourcastnet, storm_shape()), ConfigError);
  ModelConfig graphcast = named("graphcast");
  graphcast.options.as<GraphCastOptions>().mesh_refinement = 8;
  EXPECT_THROW(build_model(graphcast, storm_shape()), ConfigError);
  ModelConfig pangu = named("pangu");
  pangu.options.as<PanguOptions>().stage_heads = {4, 8, 8, 5};  // 5 does not divide 128
  EXPECT_THROW(build_model(pangu, storm_shape()), ConfigError);
}

TEST(BuildModel, DefaultParameterCounts) {
  // Reported in the docs; printed so a change in the architectures is visible in the test log.
  for (const char* name : {"unet", "vit", "gnn", "fourcastnet", "graphcast", "pangu"}) {
    WeatherModel m = build_model(named(name), storm_shape());
    std::cout << "[ " << name << " ] default config, 12 -> 6 channels on 33 x 36: " << count_parameters(*m)
              << " parameters\n";
    EXPECT_GT(count_parameters(*m), 0);
  }
}

// Cells flatten row-major over a rectangle, with graphcast's global grid when no coordinates came;
// a point set is its own list, and a shape that contradicts itself names both counts.
TEST(CellCoordinates, RectangleFlattensRowMajorAndPointSetIsItsOwnList) {
  ModelShape rectangle{1, 1, 3, 4};
  const CellCoordinates global = cell_coordinates(rectangle);
  ASSERT_EQ(global.latitudes.size(), 12u);
  EXPECT_EQ(global.latitudes[0], 90.0);
  EXPECT_EQ(global.latitudes[4], 0.0);
  EXPECT_EQ(global.latitudes[11], -90.0);
  EXPECT_EQ(global.longitudes[1], 90.0);
  EXPECT_EQ(global.longitudes[7], 270.0);

  rectangle.latitudes = {50, 40, 30};
  rectangle.longitudes = {0, 1, 2, 3};
  EXPECT_EQ(cell_coordinates(rectangle).latitudes[5], 40.0);
  EXPECT_EQ(cell_coordinates(rectangle).longitudes[5], 1.0);

  ModelShape cells{1, 1, 1, 3};
  cells.point_set = true;
  cells.latitudes = {10, -20, 30};
  cells.longitudes = {5, 6, 7};
  EXPECT_EQ(cell_coordinates(cells).latitudes, cells.latitudes);
  EXPECT_EQ(cell_coordinates(cells).longitudes, cells.longitudes);
  cells.longitudes.pop_back();
  try {
    cell_coordinates(cells);
    FAIL() << "a point set with 3 cells and 2 longitudes was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 longitudes"), std::string::npos) << e.what();
  }
}

// The models built on rows and columns refuse a point set by name; model_shape reads one from a
// [data] of one row whose coordinates come one per cell (data::take_grid).
TEST(PointSets, RectangleModelsRefuseThemAndModelShapeReadsThem) {
  ModelShape cells{12, 6, 1, 40};
  cells.point_set = true;
  for (int64_t c = 0; c < 40; ++c) {
    cells.latitudes.push_back(80.0 - 4.0 * static_cast<double>(c));
    cells.longitudes.push_back(9.0 * static_cast<double>(c));
  }
  for (const std::string name : {"unet", "vit", "fourcastnet", "pangu"}) {
    try {
      build_model(small(name), cells);
      FAIL() << name << " took a point-set grid";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("\"" + name + "\""), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("point-set grid of 40 cells"), std::string::npos) << e.what();
    }
  }
  RunConfig run = parse_config("[model]\nname = \"gnn\"\n[data]\nvariables = [\"a\"]\ngrid = [1, 40]\n", "cells.toml");
  run.data.lat_coords = cells.latitudes;
  run.data.lon_coords = cells.longitudes;
  const ModelShape shape = model_shape(run);
  EXPECT_TRUE(shape.point_set);
  EXPECT_EQ(shape.latitudes, cells.latitudes);
  // One row of a rectangle has one latitude: not a point set.
  run.data.lat_coords = {45.0};
  EXPECT_FALSE(model_shape(run).point_set);
}

// The GNN on cells: each cell receives from its 8 nearest (neighbourhood 1) by great-circle
// distance, and the model runs [B, C, 1, cells].
TEST(PointSets, GnnConnectsEachCellToItsNearestCells) {
  // A 2-degree patch of cells, rows 2 degrees apart at 40..50N, shuffled into a list.
  std::vector<double> lat, lon;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 8; ++j) lat.push_back(40.0 + 2.0 * i), lon.push_back(350.0 + 2.0 * j - (j >= 5 ? 360.0 : 0.0));
  const GridGraph g = build_cell_graph(lat, lon, 1);
  ASSERT_EQ(g.senders.size(0), 48 * 8);
  // Cell (row 2, column 3) is interior: its 8 senders are the 8 around it (across 0/360 too).
  const int64_t centre = 2 * 8 + 3;
  std::set<int64_t> around;
  for (int64_t e = 0; e < g.senders.size(0); ++e)
    if (g.receivers[e].item<int64_t>() == centre) around.insert(g.senders[e].item<int64_t>());
  EXPECT_EQ(around, (std::set<int64_t>{1 * 8 + 2, 1 * 8 + 3, 1 * 8 + 4, 2 * 8 + 2, 2 * 8 + 4, 3 * 8 + 2, 3 * 8 + 3, 3 * 8 + 4}));
  EXPECT_TRUE(torch::equal(g.receivers, torch::arange(48, torch::kLong).repeat_interleave(8)));

  ModelShape cells{12, 6, 1, 48};
  cells.point_set = true;
  cells.latitudes = lat;
  cells.longitudes = lon;
  WeatherModel model = build_seeded(small("gnn"), cells);
  EXPECT_EQ(model->forward(torch::randn({2, 12, 1, 48})).sizes(), (std::vector<int64_t>{2, 6, 1, 48}));
}

}  // namespace
}  // namespace wxtrain::models
