// wxtrain against the reference implementations, on files the references wrote themselves
// (tests/interop/reference_case.py, run by run_reference_tests.sh in the reference environment;
// CTest label `reference`). For every case: the .mdlus PhysicsNeMo saved, imported through
// interop/, builds our model, which computes the reference's output and parameter gradients on
// the reference's input (fp32, CPU); the bare state_dict imports to the same weights. For every
// published configuration: our model built from its arguments has the reference's tensors, one to
// one, names and shapes.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "interop/archive.h"
#include "interop/reference_checkpoint.h"
#include "interop/torch_pickle.h"
#include "models/registry.h"
#include "trainer/checkpoint_io.h"

namespace wxtrain::interop {
namespace {
namespace fs = std::filesystem;

fs::path cases_dir() {
  const char* dir = std::getenv("WXTRAIN_REFERENCE_CASES");
  return dir ? fs::path(dir) : fs::path();
}

std::vector<std::string> cases_with(const std::string& suffix) {
  std::vector<std::string> names;
  if (cases_dir().empty() || !fs::is_directory(cases_dir())) return names;
  for (const auto& entry : fs::directory_iterator(cases_dir())) {
    const std::string file = entry.path().filename().string();
    if (file.size() > suffix.size() && file.compare(file.size() - suffix.size(), suffix.size(), suffix) == 0)
      names.push_back(file.substr(0, file.size() - suffix.size()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

// ||a - b|| / ||b||: float32 round-off through a few layers and FFTs is ~1e-7 to 1e-6.
double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  const double norm = b.to(torch::kFloat64).norm().item<double>();
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).norm().item<double>() / (norm > 0 ? norm : 1.0);
}

class ReferenceCases : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(cases_dir().empty()) << "WXTRAIN_REFERENCE_CASES is not set: run this through "
                                         "tests/interop/run_reference_tests.sh";
    ASSERT_FALSE(cases_with(".mdlus").empty()) << "no <case>.mdlus in " << cases_dir();
  }
};

TEST_F(ReferenceCases, ForwardAndParameterGradientsEqualTheReference) {
  for (const std::string& name : cases_with(".mdlus")) {
    SCOPED_TRACE(name);
    const ImportedModel imported = import_reference_checkpoint((cases_dir() / (name + ".mdlus")).string());
    EXPECT_TRUE(imported.has_args);
    const models::ModelEntry& entry = models::find_model(imported.model_name);
    ASSERT_FALSE(entry.references.empty());
    models::WeatherModel model = models::build_model(imported.model, imported.shape);
    const trainer::WeightLoadReport loaded = trainer::load_weights(*model, imported.weights, /*strict=*/true, name);
    EXPECT_EQ(loaded.loaded.size(), imported.weights.size());

    const PyRef io = read_torch_save(read_file_bytes((cases_dir() / (name + "_io.pt")).string()), name + "_io.pt");
    const models::StateDict values = state_dict_of(io, name + "_io.pt");
    torch::Tensor out = model->forward(values.at("input"));
    ASSERT_EQ(out.sizes(), values.at("output").sizes());
    const double forward_error = relative_error(out, values.at("output"));
    EXPECT_LT(forward_error, 1e-5) << "forward: relative error " << forward_error;

    (out * values.at("output_weight")).sum().backward();
    models::StateDict grads;
    for (const auto& p : model->named_parameters()) grads[p.key()] = p.value().grad();
    const models::StateDict theirs_named =
        entry.references.front().to_reference_state(grads, imported.model, imported.shape);
    size_t compared = 0;
    for (const auto& [reference_name, grad] : theirs_named) {
      const auto expected = values.find("grad/" + reference_name);
      ASSERT_NE(expected, values.end()) << "the reference has no gradient for " << reference_name;
      ASSERT_TRUE(grad.defined()) << reference_name << " got no gradient";
      const double error = relative_error(grad, expected->second);
      EXPECT_LT(error, 1e-5) << "gradient of " << reference_name << ": relative error " << error;
      ++compared;
    }
    EXPECT_EQ(compared, imported.weights.size());
    std::cout << name << ": forward relative error " << forward_error << ", " << compared << " gradients compared\n";
  }
}

TEST_F(ReferenceCases, BareStateDictImportsTheSameWeightsAsTheMdlus) {
  for (const std::string& name : cases_with("_state.pt")) {
    SCOPED_TRACE(name);
    const ImportedModel from_mdlus = import_reference_checkpoint((cases_dir() / (name + ".mdlus")).string());
    EXPECT_EQ(checkpoint_kind((cases_dir() / (name + "_state.pt")).string()), CheckpointKind::kStateDict);
    EXPECT_EQ(checkpoint_kind((cases_dir() / (name + ".mdlus")).string()), CheckpointKind::kMdlus);
    const ImportedModel bare =
        import_reference_checkpoint((cases_dir() / (name + "_state.pt")).string(), &from_mdlus.model, &from_mdlus.shape);
    EXPECT_FALSE(bare.has_args);
    ASSERT_EQ(bare.weights.size(), from_mdlus.weights.size());
    for (const auto& [n, t] : from_mdlus.weights) EXPECT_TRUE(torch::equal(bare.weights.at(n), t)) << n;
  }
}

TEST_F(ReferenceCases, PublishedSizeTensorsMapOneToOne) {
  const std::vector<std::string> published = cases_with(".json");
  ASSERT_FALSE(published.empty()) << "no published_<name>.json in " << cases_dir();
  for (const std::string& name : published) {
    SCOPED_TRACE(name);
    std::ifstream in(cases_dir() / (name + ".json"));
    const nlohmann::json record = nlohmann::json::parse(in);
    const models::ModelEntry* entry = nullptr;
    const models::ReferenceModel* reference = nullptr;
    for (const auto& e : models::model_registry())
      for (const auto& r : e.references)
        if (r.python_class == record["cls"].get<std::string>() && r.python_module == record["module"].get<std::string>()) {
          entry = &e;
          reference = &r;
        }
    ASSERT_NE(reference, nullptr) << "no wxtrain model reads " << record["module"] << "." << record["cls"];
    const auto [config, shape] = reference->from_reference_args(record["args"]);
    // Our model at the published size; every parameter and buffer named, with its shape.
    torch::NoGradGuard no_grad;
    models::WeatherModel model = entry->build(config, shape);
    models::StateDict ours;
    int64_t parameters = 0;
    for (const auto& p : model->named_parameters()) {
      ours[p.key()] = p.value();
      parameters += p.value().numel();
    }
    for (const auto& b : model->named_buffers()) ours[b.key()] = b.value();
    const models::StateDict mapped = reference->to_reference_state(ours, config, shape);
    std::map<std::string, std::vector<int64_t>> theirs = record["tensors"].get<std::map<std::string, std::vector<int64_t>>>();
    EXPECT_EQ(mapped.size(), theirs.size());
    for (const auto& [n, t] : mapped) {
      const auto it = theirs.find(n);
      ASSERT_NE(it, theirs.end()) << "ours maps to '" << n << "', which the reference does not have";
      EXPECT_EQ(t.sizes().vec(), it->second) << n;
    }
    EXPECT_EQ(parameters, record["parameters"].get<int64_t>());
    std::cout << name << ": " << mapped.size() << " tensors, " << parameters << " parameters, one to one\n";
  }
}

}  // namespace
}  // namespace wxtrain::interop
