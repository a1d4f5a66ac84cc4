// wxtrain's Pangu against PhysicsNeMo's (physicsnemo.models.pangu.Pangu), the reference whose
// checkpoints pangu_reference.cpp maps. tests/models/reference/pangu_fixture.py, run in the
// reference environment before these (the CTest fixture pangu_reference), builds a small Pangu
// with fixed-seed random weights and writes its arguments, state_dict, an input, the outputs and
// the gradients of a scalar function of them, and the names and shapes of the published-size
// model. Here: its arguments become our options, its state_dict our weights, and our model
// computes the same forward output and the same gradients in fp32; the published size maps one to
// one and back. Without the reference environment the fixture is missing and every test skips,
// saying so.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/pangu/pangu.h"
#include "models/registry.h"

namespace wxtrain::models {
namespace {

namespace fs = std::filesystem;

// The fixture's directory, or "" (the test skips) when pangu_fixture.py has not written it.
std::string fixture_dir() {
  const char* dir = std::getenv("WXTRAIN_PANGU_REFERENCE_DIR");
  if (dir == nullptr || !fs::exists(fs::path(dir) / "state.pt")) return "";
  return dir;
}

#define REQUIRE_FIXTURE(dir)                                                                                 \
  const std::string dir = fixture_dir();                                                                     \
  if (dir.empty())                                                                                           \
  GTEST_SKIP() << "no PhysicsNeMo Pangu fixture (WXTRAIN_PANGU_REFERENCE_DIR unset or empty): the reference " \
                  "environment is not installed, see tests/models/reference/run_fixture.sh"

// The one place a fixture's tensors are read: torch.save of a plain dict of tensors, which
// LibTorch's unpickler reads (a state_dict's OrderedDict it does not).
StateDict load_tensor_dict(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path.string());
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const c10::IValue value = torch::pickle_load(bytes);
  if (!value.isGenericDict()) throw Error(path.string() + ": expected a dict of tensors");
  StateDict out;
  for (const auto& entry : value.toGenericDict()) out[entry.key().toStringRef()] = entry.value().toTensor();
  return out;
}

nlohmann::json load_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

const ReferenceModel& physicsnemo_pangu() {
  const ModelEntry& entry = find_model("pangu");
  EXPECT_EQ(entry.references.size(), 1u);
  return entry.references.at(0);
}

// max |a - b| / max |b|: float32 round-off through 16 blocks stays near 1e-6.
double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

// Every parameter and buffer of `model` from `state`, which must hold exactly those names.
void load_exactly(WeatherModelImpl& model, const StateDict& state) {
  torch::NoGradGuard no_grad;
  size_t loaded = 0;
  for (const auto& item : model.named_parameters()) {
    ASSERT_TRUE(state.count(item.key())) << "the mapping gives no " << item.key();
    ASSERT_EQ(state.at(item.key()).sizes(), item.value().sizes()) << item.key();
    item.value().copy_(state.at(item.key()));
    ++loaded;
  }
  for (const auto& item : model.named_buffers()) {
    ASSERT_TRUE(state.count(item.key())) << "the mapping gives no " << item.key();
    ASSERT_TRUE(torch::equal(state.at(item.key()).to(item.value().scalar_type()), item.value())) << item.key();
    ++loaded;
  }
  EXPECT_EQ(loaded, state.size()) << "the mapping gives tensors the model does not have";
}

TEST(PanguReference, ForwardAndGradientsEqualPhysicsNeMos) {
  REQUIRE_FIXTURE(dir);
  const ReferenceModel& ref = physicsnemo_pangu();
  const auto [config, shape] = ref.from_reference_args(load_json(fs::path(dir) / "args.json"));
  const StateDict reference_state = load_tensor_dict(fs::path(dir) / "state.pt");
  const StateDict tensors = load_tensor_dict(fs::path(dir) / "tensors.pt");
  WeatherModel model = find_model("pangu").build(config, shape);
  load_exactly(*model, ref.from_reference_state(reference_state, config, shape));

  // The reference reads [4 surface, 3 masks, 5 x 13 upper air] and answers (surface, upper air);
  // ours reads and writes the upper air first (pangu.h).
  const torch::Tensor x = tensors.at("input");
  const int64_t B = x.size(0), H = x.size(2), W = x.size(3);
  const torch::Tensor ours_x = torch::cat({x.narrow(1, 7, 65), x.narrow(1, 0, 7)}, 1);
  const torch::Tensor expected = torch::cat({tensors.at("upper_air").reshape({B, 65, H, W}), tensors.at("surface")}, 1);
  const torch::Tensor weights = torch::cat({tensors.at("w_upper").reshape({B, 65, H, W}), tensors.at("w_surface")}, 1);
  const torch::Tensor out = model->forward(ours_x);
  ASSERT_EQ(out.sizes(), expected.sizes());
  const double forward_error = relative_error(out, expected);
  EXPECT_LT(forward_error, 1e-5);
  const torch::Tensor loss = (out * weights).sum();
  EXPECT_NEAR(loss.item<double>(), tensors.at("loss").item<double>(), 1e-5 * std::abs(tensors.at("loss").item<double>()));
  loss.backward();

  // The reference's gradients mapped as its weights are (the buffers alongside, as the mapping
  // checks them), compared parameter by parameter.
  StateDict reference_grads = reference_state;
  for (const auto& [name, grad] : load_tensor_dict(fs::path(dir) / "grads.pt")) reference_grads[name] = grad;
  const StateDict expected_grads = ref.from_reference_state(reference_grads, config, shape);
  double worst = 0;
  std::string worst_name;
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    const double e = relative_error(item.value().grad(), expected_grads.at(item.key()));
    EXPECT_LT(e, 1e-5) << item.key();
    if (e > worst) worst = e, worst_name = item.key();
  }
  std::cout << "forward relative error " << forward_error << "; worst gradient " << worst << " (" << worst_name
            << ")\n";
}

// The options are what makes ours compute PhysicsNeMo's function: with any one of them back at
// wxtrain's own reading (the pseudocode's, and the model before they existed) the same weights give
// another forecast. fit_window is not among them: here it changes the tables' shapes, which the
// mapping refuses.
TEST(PanguReference, EachOptionIsNeeded) {
  REQUIRE_FIXTURE(dir);
  const ReferenceModel& ref = physicsnemo_pangu();
  const auto [config, shape] = ref.from_reference_args(load_json(fs::path(dir) / "args.json"));
  const StateDict ours = ref.from_reference_state(load_tensor_dict(fs::path(dir) / "state.pt"), config, shape);
  const StateDict tensors = load_tensor_dict(fs::path(dir) / "tensors.pt");
  const torch::Tensor x = tensors.at("input");
  const int64_t B = x.size(0), H = x.size(2), W = x.size(3);
  const torch::Tensor ours_x = torch::cat({x.narrow(1, 7, 65), x.narrow(1, 0, 7)}, 1);
  const torch::Tensor expected = torch::cat({tensors.at("upper_air").reshape({B, 65, H, W}), tensors.at("surface")}, 1);
  const std::vector<std::pair<std::string, std::function<void(PanguOptions&)>>> readings{
      {"block_norm = \"post\"", [](PanguOptions& o) { o.block_norm = "post"; }},
      {"padding = \"end\"", [](PanguOptions& o) { o.padding = "end"; }},
      {"window_shift = []", [](PanguOptions& o) { o.window_shift.clear(); }},
      {"shift_mask = \"periodic\"", [](PanguOptions& o) { o.shift_mask = "periodic"; }}};
  torch::NoGradGuard no_grad;
  for (const auto& [what, change] : readings) {
    ModelConfig other = config;
    change(other.options.as<PanguOptions>());
    WeatherModel model = find_model("pangu").build(other, shape);
    for (const auto& item : model->named_parameters()) item.value().copy_(ours.at(item.key()));
    const double error = relative_error(model->forward(ours_x), expected);
    EXPECT_GT(error, 1e-3) << "model." << what;
    std::cout << "model." << what << ": relative error " << error << "\n";
  }
}

TEST(PanguReference, StateRoundTripsExactly) {
  REQUIRE_FIXTURE(dir);
  const ReferenceModel& ref = physicsnemo_pangu();
  const auto [config, shape] = ref.from_reference_args(load_json(fs::path(dir) / "args.json"));
  EXPECT_EQ(ref.to_reference_args(config, shape), load_json(fs::path(dir) / "args.json"));
  const StateDict reference_state = load_tensor_dict(fs::path(dir) / "state.pt");
  const StateDict back = ref.to_reference_state(ref.from_reference_state(reference_state, config, shape), config, shape);
  ASSERT_EQ(back.size(), reference_state.size());
  for (const auto& [name, t] : reference_state) {
    ASSERT_TRUE(back.count(name)) << name;
    EXPECT_TRUE(torch::equal(back.at(name), t)) << name;
  }
}

TEST(PanguReference, PublishedSizeMapsOneToOne) {
  REQUIRE_FIXTURE(dir);
  // Pangu() with its defaults, as names, shapes and dtypes (built on the meta device in Python);
  // here meta tensors of the same shapes go through the mapping, so nothing is allocated.
  const nlohmann::json published = load_json(fs::path(dir) / "published.json");
  EXPECT_EQ(published.at("parameters").get<int64_t>(), 64'220'169);
  StateDict reference;
  for (const auto& entry : published.at("state")) {
    const std::string dtype = entry.at(2).get<std::string>();
    reference[entry.at(0).get<std::string>()] =
        torch::empty(entry.at(1).get<std::vector<int64_t>>(),
                     torch::TensorOptions().device(torch::kMeta).dtype(dtype == "int64" ? torch::kLong : torch::kFloat));
  }
  ASSERT_EQ(reference.size(), published.at("state").size());
  const ReferenceModel& ref = physicsnemo_pangu();
  const auto [config, shape] = ref.from_reference_args(nlohmann::json::object());  // every default
  EXPECT_EQ(shape.lat, 721);
  EXPECT_EQ(shape.lon, 1440);
  const StateDict ours = ref.from_reference_state(reference, config, shape);
  EXPECT_EQ(ours.size(), reference.size());

  // Our names are the model's (they depend on neither the grid nor the widths: the fixture's small
  // model has them all), our parameter count is the reference's, by our own formula too.
  const auto [small_config, small_shape] = ref.from_reference_args(load_json(fs::path(dir) / "args.json"));
  std::set<std::string> model_names;
  WeatherModel small_model = find_model("pangu").build(small_config, small_shape);
  for (const auto& item : small_model->named_parameters()) model_names.insert(item.key());
  for (const auto& item : small_model->named_buffers()) model_names.insert(item.key());
  std::set<std::string> mapped_names;
  int64_t parameters = 0;
  for (const auto& [name, t] : ours) {
    mapped_names.insert(name);
    if (name.find("position_index") == std::string::npos && name.find("shift_mask") == std::string::npos)
      parameters += t.numel();
  }
  EXPECT_EQ(mapped_names, model_names);
  EXPECT_EQ(parameters, 64'220'169);
  EXPECT_EQ(find_model("pangu").parameter_count(config, shape), 64'220'169);

  // And back: the same names, shapes and dtypes.
  const StateDict back = ref.to_reference_state(ours, config, shape);
  ASSERT_EQ(back.size(), reference.size());
  for (const auto& [name, t] : reference) {
    ASSERT_TRUE(back.count(name)) << name;
    EXPECT_EQ(back.at(name).sizes(), t.sizes()) << name;
    EXPECT_EQ(back.at(name).scalar_type(), t.scalar_type()) << name;
  }
}

}  // namespace
}  // namespace wxtrain::models
