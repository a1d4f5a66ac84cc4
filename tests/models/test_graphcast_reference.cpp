// wxtrain's GraphCast against PhysicsNeMo's GraphCastNet (tests/models/graphcast_reference.py wrote
// the reference's weights, input, output, gradients and graph with the reference's own code): built
// from the reference's arguments and loaded through the mapping, ours computes the same function
// with the same gradients; its graph is the reference's; the published size maps name for name.
// Without the reference environment every test here is skipped, and says so.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "models/graphcast/graphcast.h"
#include "models/graphcast/graphcast_reference.h"
#include "models/registry.h"
#include "tests/models/reference_tensors.h"

namespace wxtrain::models {
namespace {

namespace fs = std::filesystem;

// The fixture folder, or empty (and the test skips) when the reference step did not run.
fs::path fixture_dir() {
  const char* dir = std::getenv("WXTRAIN_GRAPHCAST_REFERENCE_DIR");
  if (!dir || !fs::exists(fs::path(dir) / "published.json")) return {};
  return dir;
}

#define REQUIRE_FIXTURE(dir)                                                                                 \
  const fs::path dir = fixture_dir();                                                                        \
  if (dir.empty())                                                                                           \
  GTEST_SKIP() << "no GraphCastNet fixtures: the reference environment is not installed "                    \
                  "(scripts/install_reference_env.sh; ctest -R graphcast_reference_fixture says why)"

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// |a - b| / |b| over the whole tensor (the norm-relative error of a float32 result).
double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).norm().item<double>() /
         std::max(b.to(torch::kDouble).norm().item<double>(), 1e-30);
}

struct Case {
  ModelConfig config;
  ModelShape shape;
  StateDict state, data;
};

Case load_case(const fs::path& dir, const std::string& name) {
  Case c;
  std::tie(c.config, c.shape) = graphcast_from_reference_args(read_json(dir / name / "args.json"));
  c.state = testing::load_tensor_dict((dir / name / "state.pt").string());
  c.data = testing::load_tensor_dict((dir / name / "data.pt").string());
  return c;
}

// The reference's grid values are what from_reference_args computes (torch.linspace in float32).
TEST(GraphCastReference, GridIsTheReferences) {
  REQUIRE_FIXTURE(dir);
  for (const std::string name : {"small", "concat_trick"}) {
    const Case c = load_case(dir, name);
    const torch::Tensor lat = c.data.at("latitudes"), lon = c.data.at("longitudes");
    ASSERT_EQ(lat.size(0), c.shape.lat);
    ASSERT_EQ(lon.size(0), c.shape.lon);
    for (int64_t i = 0; i < c.shape.lat; ++i) EXPECT_EQ(c.shape.latitudes[i], lat[i].item<float>()) << name;
    for (int64_t j = 0; j < c.shape.lon; ++j) EXPECT_EQ(c.shape.longitudes[j], lon[j].item<float>()) << name;
  }
}

// model.graph = "physicsnemo" builds the reference's graph: the same mesh vertices bit for bit, the
// same edges in the same order, the same features.
TEST(GraphCastReference, GraphIsTheReferences) {
  REQUIRE_FIXTURE(dir);
  for (const std::string name : {"small", "concat_trick"}) {
    SCOPED_TRACE(name);
    const Case c = load_case(dir, name);
    const auto& o = c.config.options.as<GraphCastOptions>();
    const IcosahedralMesh mesh = deepmind_icosahedral_mesh(o.mesh_refinement);
    torch::Tensor vertices = torch::empty({static_cast<int64_t>(mesh.vertices.size()), 3});
    for (size_t v = 0; v < mesh.vertices.size(); ++v)
      for (int k = 0; k < 3; ++k) vertices[static_cast<int64_t>(v)][k] = static_cast<float>(mesh.vertices[v][k]);
    EXPECT_TRUE(torch::equal(vertices, c.data.at("graph.mesh_vertices"))) << "mesh vertices differ";

    const GraphCastGraph g = build_model_graph(o, c.shape.latitudes, c.shape.longitudes);
    ASSERT_EQ(g.mesh_nodes, vertices.size(0)) << "a global grid keeps every mesh node";
    auto expect_edges = [&](const std::string& what, const torch::Tensor& senders, const torch::Tensor& receivers,
                            const torch::Tensor& features) {
      const torch::Tensor index = c.data.at("graph." + what + "_edge_index");
      ASSERT_EQ(senders.size(0), index.size(1)) << what << " edges";
      EXPECT_TRUE(torch::equal(senders, index[0])) << what << " senders";
      EXPECT_TRUE(torch::equal(receivers, index[1])) << what << " receivers";
      const torch::Tensor expected = c.data.at("graph." + what + "_edge_attr");
      EXPECT_EQ((features - expected).abs().max().item<float>(), 0.0f) << what << " edge features";
    };
    expect_edges("mesh", g.mesh_senders, g.mesh_receivers, g.mesh_edge_features);
    expect_edges("g2m", g.g2m_senders, g.g2m_receivers, g.g2m_features);
    expect_edges("m2g", g.m2g_senders, g.m2g_receivers, g.m2g_features);
    EXPECT_EQ((g.mesh_features - c.data.at("graph.mesh_x")).abs().max().item<float>(), 0.0f) << "mesh node features";
  }
}

// The reference's weights in our model: the same output and the same gradient of every parameter.
TEST(GraphCastReference, ForwardAndGradientsEqual) {
  REQUIRE_FIXTURE(dir);
  torch::manual_seed(0);
  for (const std::string name : {"small", "concat_trick"}) {
    SCOPED_TRACE(name);
    const Case c = load_case(dir, name);
    WeatherModel model = find_model("graphcast").build(c.config, c.shape);
    const StateDict ours = graphcast_from_reference_state(c.state, c.config, c.shape);
    {
      torch::NoGradGuard no_grad;
      size_t loaded = 0;
      for (auto& p : model->named_parameters()) {
        ASSERT_TRUE(ours.count(p.key())) << "no reference tensor for " << p.key();
        p.value().copy_(ours.at(p.key()));
        ++loaded;
      }
      EXPECT_EQ(loaded, ours.size()) << "every mapped tensor is one of our parameters";
    }
    const torch::Tensor y = model->forward(c.data.at("input"));
    const torch::Tensor expected = c.data.at("output");
    ASSERT_EQ(y.sizes(), expected.sizes());
    const double forward_error = relative_error(y, expected);
    EXPECT_LT(forward_error, 1e-5) << "output max |diff| " << (y - expected).abs().max().item<float>();
    // The loss itself, a number a user would compare.
    const torch::Tensor loss = (y * c.data.at("probe")).sum();
    EXPECT_NEAR(loss.item<double>(), c.data.at("loss").item<double>(),
                1e-5 * std::abs(c.data.at("loss").item<double>()) + 1e-6);
    loss.backward();

    // Our gradients in the reference's layout (to_reference_state concatenates the split Linears).
    StateDict grads;
    for (const auto& p : model->named_parameters()) grads[p.key()] = p.value().grad();
    const StateDict as_reference = graphcast_to_reference_state(grads, c.config, c.shape);
    double worst = 0;
    std::string worst_name;
    size_t compared = 0;
    for (const auto& [ref_name, t] : c.state) {
      // With the concat trick an edge MLP's first Linear is lin_efeat/lin_src/lin_dst and bias, and
      // its later modules sit one place earlier; ours comes back in the default layout.
      const size_t model_at = ref_name.find(".model.");
      const std::string mlp = model_at != std::string::npos ? ref_name.substr(0, model_at)
                                                             : ref_name.substr(0, ref_name.rfind('.'));
      std::string default_name = ref_name;
      torch::Tensor expected_grad = c.data.at("grad." + ref_name);
      if (c.state.count(mlp + ".lin_efeat")) {
        if (ref_name == mlp + ".lin_src" || ref_name == mlp + ".lin_dst") continue;  // with lin_efeat
        if (ref_name == mlp + ".lin_efeat") {
          default_name = mlp + ".model.0.weight";
          expected_grad = torch::cat({c.data.at("grad." + mlp + ".lin_efeat"), c.data.at("grad." + mlp + ".lin_src"),
                                      c.data.at("grad." + mlp + ".lin_dst")}, 1);
        } else if (ref_name == mlp + ".bias") {
          default_name = mlp + ".model.0.bias";
        } else {
          const std::string rest = ref_name.substr(model_at + 7);  // "<i>.<leaf>"
          const int64_t index = std::stoll(rest.substr(0, rest.find('.')));
          default_name = mlp + ".model." + std::to_string(index + 1) + rest.substr(rest.find('.'));
        }
      }
      ASSERT_TRUE(as_reference.count(default_name)) << default_name;
      const double e = relative_error(as_reference.at(default_name), expected_grad);
      if (e > worst) worst = e, worst_name = ref_name;
      ++compared;
    }
    EXPECT_GT(compared, 40u);
    EXPECT_LT(worst, 1e-5) << "worst gradient: " << worst_name;
    std::cout << name << ": output relative error " << forward_error << ", worst gradient " << worst << " ("
              << worst_name << ") over " << compared << " tensors\n";
  }
}

// GraphCastNet() as published (474 inputs, 227 outputs, latent 512, 16 processor layers, M6):
// every parameter maps one to one, name and shape, both ways, and our count is the reference's.
TEST(GraphCastReference, PublishedSizeMapsOneToOne) {
  REQUIRE_FIXTURE(dir);
  const nlohmann::json published = read_json(dir / "published.json");
  const auto [config, shape] = graphcast_from_reference_args(published.at("args"));
  EXPECT_EQ(published.at("default").at("count").get<int64_t>(), 35'580'643);
  EXPECT_EQ(find_model("graphcast").parameter_count(config, shape), 35'580'643);

  // Our parameters at these sizes (they do not depend on the grid or the mesh: a small one).
  ModelConfig small = config;
  small.options.as<GraphCastOptions>().mesh_refinement = 1;
  ModelShape small_shape = shape;
  small_shape.lat = 5;
  small_shape.lon = 8;
  std::tie(small_shape.latitudes, small_shape.longitudes) = physicsnemo_grid(5, 8);
  const WeatherModel model = find_model("graphcast").build(small, small_shape);
  std::map<std::string, std::vector<int64_t>> our_shapes;
  int64_t our_count = 0;
  for (const auto& p : model->named_parameters()) {
    our_shapes[p.key()] = p.value().sizes().vec();
    our_count += p.value().numel();
  }
  EXPECT_EQ(our_count, 35'580'643);

  for (const std::string layout : {"default", "concat_trick"}) {
    SCOPED_TRACE(layout);
    StateDict reference;
    std::map<std::string, std::vector<int64_t>> reference_shapes;
    for (const auto& entry : published.at(layout).at("parameters")) {
      const auto name = entry[0].get<std::string>();
      const auto sizes = entry[1].get<std::vector<int64_t>>();
      reference[name] = torch::empty(sizes, torch::TensorOptions().device(torch::kMeta));
      reference_shapes[name] = sizes;
    }
    const StateDict mapped = graphcast_from_reference_state(reference, config, shape);
    std::map<std::string, std::vector<int64_t>> mapped_shapes;
    for (const auto& [name, t] : mapped) mapped_shapes[name] = t.sizes().vec();
    EXPECT_EQ(mapped_shapes, our_shapes);
    if (layout == "default") {
      // Back again: the reference's names and shapes exactly.
      std::map<std::string, std::vector<int64_t>> back;
      for (const auto& [name, t] : graphcast_to_reference_state(mapped, config, shape)) back[name] = t.sizes().vec();
      EXPECT_EQ(back, reference_shapes);
    }
  }
}

// The reference's weights through ours and back are the reference's, tensor for tensor.
TEST(GraphCastReference, StateRoundTrips) {
  REQUIRE_FIXTURE(dir);
  const Case c = load_case(dir, "small");
  const StateDict back = graphcast_to_reference_state(graphcast_from_reference_state(c.state, c.config, c.shape),
                                                      c.config, c.shape);
  ASSERT_EQ(back.size(), c.state.size());
  for (const auto& [name, t] : c.state) {
    ASSERT_TRUE(back.count(name)) << name;
    EXPECT_TRUE(torch::equal(back.at(name), t)) << name;
  }
}

}  // namespace
}  // namespace wxtrain::models
