// wxtrain's AIFS against ECMWF's anemoi: tests/models/reference/aifs_fixture.py, run in the anemoi
// environment before these (the CTest fixture aifs_reference), builds anemoi-graphs' graph and an
// anemoi-models AnemoiModelEncProcDec on a 29 x 48 grid with an O4 hidden grid, random weights,
// SDPA attention with a sliding window, and writes the graph, the state_dict, an input, the output
// and the gradients of a scalar function of it. Here: our graph on the same grid has the same edges
// and features; anemoi's state_dict imported by name gives the same output and gradients in fp32.
// Without the anemoi environment the fixture is missing and every test skips, saying so.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/memory_meter.h"
#include "estimator/estimate.h"
#include "models/aifs/aifs.h"
#include "models/registry.h"
#include "tests/models/reference_tensors.h"

namespace wxtrain::models {
namespace {

namespace fs = std::filesystem;

std::string fixture_dir() {
  const char* dir = std::getenv("WXTRAIN_AIFS_REFERENCE_DIR");
  if (dir == nullptr || !fs::exists(fs::path(dir) / "io.pt")) return "";
  return dir;
}

#define REQUIRE_FIXTURE(dir)                                                                                  \
  const std::string dir = fixture_dir();                                                                      \
  if (dir.empty())                                                                                            \
  GTEST_SKIP() << "no anemoi AIFS fixture (WXTRAIN_AIFS_REFERENCE_DIR unset or empty): the anemoi environment " \
                  "is not installed (scripts/install_anemoi_env.sh), see tests/models/reference/run_fixture.sh"

nlohmann::json load_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// The fixture's grid and sizes as our [model] options and shape.
std::pair<ModelConfig, ModelShape> fixture_model(const nlohmann::json& grid) {
  ModelConfig config;
  config.name = "aifs";
  auto o = std::make_unique<AifsOptions>();
  const auto& m = grid.at("model");
  o->num_channels = m.at("channels");
  o->num_heads = m.at("heads");
  o->mapper_num_heads = m.at("mapper_heads");
  o->processor_layers = m.at("processor_layers");
  o->window_size = m.at("window_size");
  o->hidden_grid = m.at("hidden_grid");
  o->mlp_hidden_ratio = m.at("mlp_ratio");
  o->data_trainable = m.at("data_trainable");
  o->hidden_trainable = m.at("hidden_trainable");
  o->edge_trainable = m.at("edge_trainable");
  config.options = ModelOptionsBox(std::move(o));
  ModelShape shape;
  shape.in_channels = grid.at("in_channels");
  shape.out_channels = grid.at("out_channels");
  shape.latitudes = grid.at("data_latitudes").get<std::vector<double>>();
  shape.longitudes = grid.at("data_longitudes").get<std::vector<double>>();
  shape.lat = static_cast<int64_t>(shape.latitudes.size());
  shape.lon = static_cast<int64_t>(shape.longitudes.size());
  return {std::move(config), shape};
}

// Ours and anemoi's edge sets: the same (sender, receiver) pairs in the same order (both sorted by
// receiver, then sender), and features equal to float32 round-off.
void expect_same_edges(const BipartiteEdges& ours, const StateDict& graph, const std::string& name) {
  const torch::Tensor s = graph.at(name + ".senders"), r = graph.at(name + ".receivers"), f = graph.at(name + ".features");
  const torch::Tensor f64 = graph.at(name + ".features64");
  ASSERT_EQ(ours.edges(), s.size(0)) << name << ": edge counts differ";
  EXPECT_TRUE(torch::equal(ours.senders, s)) << name << ": senders differ";
  EXPECT_TRUE(torch::equal(ours.receivers, r)) << name << ": receivers differ";
  const double length = (ours.features.select(1, 0) - f.select(1, 0)).abs().max().item<double>();
  const double dirs = (ours.features.narrow(1, 1, 2) - f.narrow(1, 1, 2)).abs().max().item<double>();
  // anemoi's formulas evaluated in float64: ours to float32 rounding of the result.
  const double exact = (ours.features.to(torch::kDouble) - f64).abs().max().item<double>();
  std::printf("[ aifs graph ] %s: %lld edges; max |diff| to anemoi's float32 edge_length %.2e, edge_dirs %.2e; "
              "to its formulas in float64 %.2e\n",
              name.c_str(), static_cast<long long>(ours.edges()), length, dirs, exact);
  EXPECT_LT(exact, 1e-6) << name << ": a formula differs";
  // anemoi builds in float32 (the Rodrigues rotation of nearby unit vectors loses ~5 digits).
  EXPECT_LT(length, 1e-5) << name << " edge_length";
  EXPECT_LT(dirs, 2e-4) << name << " edge_dirs";
}

TEST(AifsReference, HiddenGridIsTheOctahedralGaussianGrid) {
  REQUIRE_FIXTURE(dir);
  const nlohmann::json grid = load_json(fs::path(dir) / "grid.json");
  const auto lat = grid.at("hidden_latitudes").get<std::vector<double>>();
  const auto lon = grid.at("hidden_longitudes").get<std::vector<double>>();
  const LatLonPoints ours = octahedral_grid(4);
  ASSERT_EQ(ours.size(), static_cast<int64_t>(lat.size()));
  ASSERT_EQ(ours.size(), 4 * 4 * (4 + 9));
  double worst = 0;
  for (size_t i = 0; i < lat.size(); ++i)
    worst = std::max({worst, std::abs(ours.latitudes[i] - lat[i]), std::abs(ours.longitudes[i] - lon[i])});
  EXPECT_LT(worst, 1e-9) << "degrees";
}

TEST(AifsReference, GraphIsAnemoiGraphs) {
  REQUIRE_FIXTURE(dir);
  const auto [config, shape] = fixture_model(load_json(fs::path(dir) / "grid.json"));
  const StateDict graph = testing::load_tensor_dict((fs::path(dir) / "graph.pt").string());
  const WeatherModel model = build_model(config, shape);
  const auto& aifs = dynamic_cast<const AifsImpl&>(*model);
  expect_same_edges(aifs.encoder_edges(), graph, "encoder");
  expect_same_edges(aifs.decoder_edges(), graph, "decoder");
}

// anemoi's state_dict mapped to our names (aifs_state_from_anemoi) loaded into `model`: every
// parameter and every mapped buffer, and nothing left over. anemoi's buffers (the nodes' positions,
// computed from its float32 radians) equal ours to round-off.
void load_imported(WeatherModelImpl& model, const StateDict& ours) {
  torch::NoGradGuard no_grad;
  std::set<std::string> loaded;
  for (auto& item : model.named_parameters()) {
    ASSERT_TRUE(ours.count(item.key())) << "the mapping gives no " << item.key();
    ASSERT_EQ(item.value().sizes(), ours.at(item.key()).sizes()) << item.key();
    item.value().copy_(ours.at(item.key()));
    loaded.insert(item.key());
  }
  for (auto& item : model.named_buffers())
    if (ours.count(item.key())) {
      EXPECT_LT((item.value() - ours.at(item.key())).abs().max().item<double>(), 1e-6) << item.key();
      item.value().copy_(ours.at(item.key()));
      loaded.insert(item.key());
    }
  for (const auto& [name, t] : ours) EXPECT_TRUE(loaded.count(name)) << name << " is not in the model";
}

// The worst parameter gradient of `model` against anemoi's (io's "grad.<name>", mapped as the
// weights were), relative to each gradient's size floored at 1e-3 of the largest: the attention's
// key bias has a gradient of exactly zero in exact arithmetic (a constant per receiver cancels in
// the softmax), and both sides hold round-off there. Returns the error and the parameter's name.
std::pair<double, std::string> worst_gradient(WeatherModelImpl& model, const StateDict& io, const AifsImpl& aifs,
                                              const StateDict& graph) {
  StateDict their_grads;
  for (const auto& [name, t] : io)
    if (name.rfind("grad.", 0) == 0 && name != "grad.x") their_grads[name.substr(5)] = t;
  const StateDict grads =
      aifs_state_from_anemoi(their_grads, aifs, graph.at("encoder.provider_index"), graph.at("decoder.provider_index"));
  double largest = 0;
  for (const auto& [name, g] : grads) largest = std::max(largest, g.abs().max().item<double>());
  double worst = 0;
  std::string worst_name;
  for (auto& item : model.named_parameters()) {
    EXPECT_TRUE(grads.count(item.key())) << "anemoi has no gradient for " << item.key();
    EXPECT_TRUE(item.value().grad().defined()) << item.key();
    if (!grads.count(item.key()) || !item.value().grad().defined()) return {1.0, item.key()};
    const torch::Tensor g = grads.at(item.key());
    const double e =
        (item.value().grad() - g).abs().max().item<double>() / std::max(g.abs().max().item<double>(), 1e-3 * largest);
    if (e > worst) worst = e, worst_name = item.key();
  }
  return {worst, worst_name};
}

TEST(AifsReference, ImportedWeightsGiveAnemoisOutputAndGradients) {
  REQUIRE_FIXTURE(dir);
  const auto [config, shape] = fixture_model(load_json(fs::path(dir) / "grid.json"));
  const StateDict graph = testing::load_tensor_dict((fs::path(dir) / "graph.pt").string());
  const StateDict state = testing::load_tensor_dict((fs::path(dir) / "state.pt").string());
  const StateDict io = testing::load_tensor_dict((fs::path(dir) / "io.pt").string());
  for (int64_t chunks : {1, 3}) {
    ModelConfig c = config;
    auto o = std::make_unique<AifsOptions>(c.options.as<AifsOptions>());
    o->encoder_chunks = chunks, o->decoder_chunks = chunks;
    c.options = ModelOptionsBox(std::move(o));
    const WeatherModel model = build_model(c, shape);
    const auto& aifs = dynamic_cast<const AifsImpl&>(*model);
    const StateDict ours =
        aifs_state_from_anemoi(state, aifs, graph.at("encoder.provider_index"), graph.at("decoder.provider_index"));
    ASSERT_NO_FATAL_FAILURE(load_imported(*model, ours));
    const torch::Tensor x = io.at("x").view({io.at("x").size(0), shape.in_channels, shape.lat, shape.lon}).clone();
    x.requires_grad_(true);
    const torch::Tensor y = model->forward(x).flatten(2);
    const torch::Tensor reference = io.at("y");
    const double scale = reference.abs().max().item<double>();
    const double error = (y - reference).abs().max().item<double>() / scale;
    std::printf("[ aifs vs anemoi ] %lld chunk(s): output max |diff| / max |y| = %.2e (max |y| %.3f)\n",
                static_cast<long long>(chunks), error, scale);
    EXPECT_LT(error, 1e-5);
    (y * io.at("w")).sum().backward();

    // The gradients, named as anemoi names its parameters, mapped as the weights were.
    const auto [worst, worst_name] = worst_gradient(*model, io, aifs, graph);
    const torch::Tensor gx = io.at("grad.x");
    const double ex = (x.grad().flatten(2) - gx).abs().max().item<double>() / gx.abs().max().item<double>();
    std::printf("[ aifs vs anemoi ] %lld chunk(s): input gradient %.2e, worst parameter gradient %.2e (%s)\n",
                static_cast<long long>(chunks), ex, worst, worst_name.c_str());
    EXPECT_LT(ex, 1e-4);
    EXPECT_LT(worst, 1e-4) << worst_name;
  }
}

// AIFS-ENS: anemoi's AnemoiEnsModelEncProcDec with NoiseConditioning (4 noise channels, noise MLP of
// 32, conditional LayerNorms in the processor; the noise on the data grid projected onto the hidden
// nodes through the encoder's edges, row-normalised) against ours with train.noise_injection =
// "conditional_norm": the same noise fed to both (the members' last 4 input channels here, anemoi's
// torch.randn there), every weight random (the conditional norms start at zero, where the noise
// would not matter), anemoi's state_dict imported by name.
TEST(AifsReference, EnsembleNoiseConditioningGivesAnemoisOutputAndGradients) {
  REQUIRE_FIXTURE(dir);
  if (!fs::exists(fs::path(dir) / "ens_io.pt")) GTEST_SKIP() << "the fixture has no AIFS-ENS part (ens_io.pt)";
  const nlohmann::json ens = load_json(fs::path(dir) / "ens.json");
  auto [config, shape] = fixture_model(load_json(fs::path(dir) / "grid.json"));
  const int64_t k = ens.at("noise_channels");
  shape.in_channels += k;
  shape.conditional_noise = k;
  const StateDict graph = testing::load_tensor_dict((fs::path(dir) / "graph.pt").string());
  const StateDict state = testing::load_tensor_dict((fs::path(dir) / "ens_state.pt").string());
  const StateDict io = testing::load_tensor_dict((fs::path(dir) / "ens_io.pt").string());
  const int64_t C = config.options.as<AifsOptions>().num_channels;
  // anemoi's embeddings have one more column each (its forecast-step input, dropped: fcstep 0).
  {
    const WeatherModel model = build_model(config, shape);
    int64_t n = 0;
    for (const auto& p : model->parameters()) n += p.numel();
    EXPECT_EQ(n + 2 * C, ens.at("parameters").get<int64_t>());
    EXPECT_EQ(find_model("aifs").parameter_count(config, shape), n);
  }
  for (const bool checkpointing : {false, true}) {
    const WeatherModel model = build_model(config, shape);
    model->set_checkpointing(checkpointing);
    const auto& aifs = dynamic_cast<const AifsImpl&>(*model);
    {
      // An untrained model ignores the noise: the conditional norms start at zero.
      torch::NoGradGuard no_grad;
      const torch::Tensor x = io.at("x").view({io.at("x").size(0), shape.in_channels, shape.lat, shape.lon});
      torch::Tensor other = x.clone();
      other.narrow(1, shape.in_channels - k, k).normal_();
      EXPECT_TRUE(torch::equal(model->forward(x), model->forward(other))) << "fresh conditional norms read the noise";
    }
    const StateDict ours =
        aifs_state_from_anemoi(state, aifs, graph.at("encoder.provider_index"), graph.at("decoder.provider_index"));
    ASSERT_NO_FATAL_FAILURE(load_imported(*model, ours));
    const torch::Tensor x = io.at("x").view({io.at("x").size(0), shape.in_channels, shape.lat, shape.lon}).clone();
    x.requires_grad_(true);
    const torch::Tensor y = model->forward(x).flatten(2);
    const torch::Tensor reference = io.at("y");
    const double scale = reference.abs().max().item<double>();
    const double error = (y - reference).abs().max().item<double>() / scale;
    // The noise matters now: other noise moves the output by far more than the tolerance.
    double moved = 0;
    {
      torch::NoGradGuard no_grad;
      torch::Tensor other = x.detach().clone();
      other.narrow(1, shape.in_channels - k, k).normal_();
      moved = (model->forward(other).flatten(2) - reference).abs().max().item<double>() / scale;
    }
    std::printf("[ aifs-ens vs anemoi ] checkpointing %d: output max |diff| / max |y| = %.2e (other noise: %.2e)\n",
                checkpointing, error, moved);
    EXPECT_LT(error, 1e-5);
    EXPECT_GT(moved, 1e-2) << "the noise does not reach the output";
    (y * io.at("w")).sum().backward();
    const auto [worst, worst_name] = worst_gradient(*model, io, aifs, graph);
    // The noise channels get no gradient (anemoi's noise has none); the state channels anemoi's.
    const torch::Tensor gx = io.at("grad.x");
    const torch::Tensor ours_gx = x.grad().flatten(2);
    const double ex = (ours_gx.narrow(1, 0, gx.size(1)) - gx).abs().max().item<double>() / gx.abs().max().item<double>();
    EXPECT_EQ(ours_gx.narrow(1, gx.size(1), k).abs().max().item<double>(), 0.0);
    std::printf("[ aifs-ens vs anemoi ] checkpointing %d: input gradient %.2e, worst parameter gradient %.2e (%s)\n",
                checkpointing, ex, worst, worst_name.c_str());
    EXPECT_LT(ex, 1e-4);
    EXPECT_LT(worst, 1e-4) << worst_name;
  }
}

TEST(AifsReference, ParameterCountIsAnemois) {
  REQUIRE_FIXTURE(dir);
  const nlohmann::json grid = load_json(fs::path(dir) / "grid.json");
  const auto [config, shape] = fixture_model(grid);
  const WeatherModel model = build_model(config, shape);
  int64_t n = 0;
  for (const auto& p : model->parameters()) n += p.numel();
  EXPECT_EQ(n, grid.at("parameters").get<int64_t>());
  EXPECT_EQ(find_model("aifs").parameter_count(config, shape), n);
}

// AIFS Single 1.0's configuration (tests/models/reference/aifs_published_count.py): N320 data grid
// (542,080 cells, from ecCodes), O96 hidden grid (40,320), 1024 channels, 16 layers of 16 heads,
// 8 learned features per cell, node and edge, 2 input steps of 90 prognostic and 13 forcing
// variables, 102 outputs. Our parameter count (by formula: the graph built as the model builds it)
// is anemoi-models' on the same grid; then the analytic estimates at that size, which
// docs/estimator.md quotes.
TEST(AifsPublished, ParameterCountIsAnemoisAndTheEstimates) {
  const char* env = std::getenv("WXTRAIN_AIFS_PUBLISHED_DIR");
  if (env == nullptr || !fs::exists(fs::path(env) / "count.json"))
    GTEST_SKIP() << "no anemoi count at AIFS Single's size (WXTRAIN_AIFS_PUBLISHED_DIR unset or empty; "
                    "tests/models/reference/aifs_published.sh)";
  const fs::path dir = env;
  const nlohmann::json count = load_json(dir / "count.json");
  const StateDict cells = testing::load_tensor_dict((dir / "n320.pt").string());
  ModelShape shape;
  shape.point_set = true;
  shape.lat = 1;
  shape.lon = cells.at("latitudes").size(0);
  const torch::Tensor lat = cells.at("latitudes").contiguous(), lon = cells.at("longitudes").contiguous();
  shape.latitudes.assign(lat.data_ptr<double>(), lat.data_ptr<double>() + shape.lon);
  shape.longitudes.assign(lon.data_ptr<double>(), lon.data_ptr<double>() + shape.lon);
  shape.in_channels = count.at("in_channels");
  shape.out_channels = count.at("out_channels");
  const std::string model_keys =
      "[model]\nname = \"aifs\"\nnum_channels = 1024\nnum_heads = 16\nmapper_num_heads = 16\n"
      "processor_layers = 16\nwindow_size = 512\nhidden_grid = \"o96\"\n";
  const RunConfig run = parse_config(model_keys + "[data]\nvariables = [\"a\"]\ngrid = [8, 8]\n", "aifs-single.toml");
  const int64_t ours = find_model("aifs").parameter_count(run.model, shape);
  const LatLonPoints data{shape.latitudes, shape.longitudes};
  const int64_t encoder_edges = cutoff_edges(data, octahedral_grid(96), 0.6, 64).edges();
  const int64_t their_edges = count.at("encoder_edges");
  std::printf("[ aifs single 1.0 ] N320 %lld cells -> O96: wxtrain %lld parameters, anemoi-models %lld; encoder "
              "edges %lld (anemoi %lld), decoder %lld\n",
              static_cast<long long>(shape.lon), static_cast<long long>(ours),
              count.at("parameters").get<long long>(), static_cast<long long>(encoder_edges),
              static_cast<long long>(their_edges), count.at("decoder_edges").get<long long>());
  // The cut-off radius meets a few cells of N320 (symmetric about the equator and longitude 0, as
  // O96 is) at round-off distance: anemoi decides them in float32, we in double. Each such edge
  // carries 8 learned features; everything else is equal.
  EXPECT_LE(std::abs(encoder_edges - their_edges), 16) << "more than round-off apart";
  EXPECT_EQ(ours - 8 * (encoder_edges - their_edges), count.at("parameters").get<int64_t>());

  // The estimates at that size (analytic; the graph's buffers with the states). wxtrain's inputs
  // hold the forcings once (at the predicted time), anemoi's at both input steps: 193 against 206
  // input channels, 0.01% of the parameters.
  std::string variables, diagnostics, forcings;
  for (int i = 0; i < 90; ++i) variables += (i ? ", \"p" : "\"p") + std::to_string(i) + "\"";
  for (int i = 0; i < 12; ++i) diagnostics += (i ? ", \"d" : "\"d") + std::to_string(i) + "\"";
  for (int i = 0; i < 13; ++i) forcings += (i ? ", \"f" : "\"f") + std::to_string(i) + "\"";
  for (const auto& [mode, precision, chunks, checkpointing] :
       std::vector<std::tuple<estimator::Mode, std::string, int, bool>>{
           {estimator::Mode::kInference, "fp32", 1, false}, {estimator::Mode::kInference, "bf16", 1, false},
           {estimator::Mode::kInference, "fp32", 4, false}, {estimator::Mode::kInference, "bf16", 4, false},
           {estimator::Mode::kTrain, "bf16-mixed", 1, true}, {estimator::Mode::kTrain, "bf16-mixed", 4, true},
           {estimator::Mode::kTrain, "bf16-mixed", 4, false}}) {
    RunConfig r = parse_config(model_keys + "encoder_chunks = " + std::to_string(chunks) + "\ndecoder_chunks = " +
                                   std::to_string(chunks) + "\n[data]\nhistory = 2\nvariables = [" + variables +
                                   "]\ndiagnostic_variables = [" + diagnostics + "]\nforcing_variables = [" + forcings +
                                   "]\ngrid = [1, " + std::to_string(shape.lon) + "]\n[train]\nbatch_size = 1\nprecision = \"" +
                                   precision + "\"\ncheckpointing = " + (checkpointing ? "true" : "false") +
                                   "\noptimizer = \"adamw\"\ndevice = \"cuda\"\n",
                               "aifs-single.toml");
    ModelShape s = models::model_shape(r);
    s.point_set = true, s.latitudes = shape.latitudes, s.longitudes = shape.longitudes;
    estimator::EstimateOptions options;
    options.mode = mode;
    options.analytic = true;
    const estimator::Estimate e = estimator::estimate(r, s, options);
    const estimator::Breakdown b = e.breakdown(1, estimator::find_gpu("H100"));
    std::printf("[ aifs single 1.0 ] %-9s %-10s chunks %d checkpointing %d, batch 1 on an H100: params %.1f GB, grads %.1f, "
                "optimizer %.1f, activations %.1f, overhead %.1f: total %.1f GB\n",
                mode == estimator::Mode::kTrain ? "training" : "inference", precision.c_str(), chunks, checkpointing,
                b.params / 1e9, b.grads / 1e9, b.optimizer / 1e9, b.activations / 1e9, b.overhead / 1e9, b.total() / 1e9);
    EXPECT_GT(b.total(), 0);
  }
}

}  // namespace
}  // namespace wxtrain::models
