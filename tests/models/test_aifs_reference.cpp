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

#include <nlohmann/json.hpp>

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
    {
      torch::NoGradGuard no_grad;
      std::set<std::string> loaded;
      for (auto& item : model->named_parameters()) {
        ASSERT_TRUE(ours.count(item.key())) << "the mapping gives no " << item.key();
        ASSERT_EQ(item.value().sizes(), ours.at(item.key()).sizes()) << item.key();
        item.value().copy_(ours.at(item.key()));
        loaded.insert(item.key());
      }
      for (auto& item : model->named_buffers())
        if (ours.count(item.key())) {
          // anemoi's positions, computed from its float32 radians, equal ours to round-off.
          EXPECT_LT((item.value() - ours.at(item.key())).abs().max().item<double>(), 1e-6) << item.key();
          item.value().copy_(ours.at(item.key()));
          loaded.insert(item.key());
        }
      for (const auto& [name, t] : ours) EXPECT_TRUE(loaded.count(name)) << name << " is not in the model";
    }
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
    StateDict their_grads;
    for (const auto& [name, t] : io)
      if (name.rfind("grad.", 0) == 0 && name != "grad.x") their_grads[name.substr(5)] = t;
    const StateDict grads =
        aifs_state_from_anemoi(their_grads, aifs, graph.at("encoder.provider_index"), graph.at("decoder.provider_index"));
    // Relative to each gradient's size, floored at 1e-3 of the largest: the attention's key bias has
    // a gradient of exactly zero in exact arithmetic (a constant per receiver cancels in the
    // softmax), and both sides hold round-off there.
    double largest = 0;
    for (const auto& [name, g] : grads) largest = std::max(largest, g.abs().max().item<double>());
    double worst = 0;
    std::string worst_name;
    for (auto& item : model->named_parameters()) {
      ASSERT_TRUE(grads.count(item.key())) << "anemoi has no gradient for " << item.key();
      ASSERT_TRUE(item.value().grad().defined()) << item.key();
      const torch::Tensor g = grads.at(item.key());
      const double e =
          (item.value().grad() - g).abs().max().item<double>() / std::max(g.abs().max().item<double>(), 1e-3 * largest);
      if (e > worst) worst = e, worst_name = item.key();
    }
    const torch::Tensor gx = io.at("grad.x");
    const double ex = (x.grad().flatten(2) - gx).abs().max().item<double>() / gx.abs().max().item<double>();
    std::printf("[ aifs vs anemoi ] %lld chunk(s): input gradient %.2e, worst parameter gradient %.2e (%s)\n",
                static_cast<long long>(chunks), ex, worst, worst_name.c_str());
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

}  // namespace
}  // namespace wxtrain::models
