// torch.save files written by PyTorch itself (tests/interop/torch_save_fixture.py), read by
// wxtrain: every tensor's dtype, shape and values as PyTorch had them, views that shared a storage
// sharing it again, a state_dict found inside a training checkpoint; and written back for PyTorch's
// torch.load(weights_only=True) to check. Run by torch_save_with_pytorch.sh (CTest
// interop.torch_save_with_pytorch), which sets WXTRAIN_TORCH_SAVE_FIXTURES.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "interop/archive.h"
#include "interop/reference_checkpoint.h"
#include "interop/torch_pickle.h"

namespace wxtrain::interop {
namespace {
namespace fs = std::filesystem;

class TorchSaveFromPyTorch : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("WXTRAIN_TORCH_SAVE_FIXTURES");
    ASSERT_NE(dir, nullptr) << "run through tests/interop/torch_save_with_pytorch.sh";
    dir_ = dir;
    std::ifstream in(dir_ / "expected.json");
    ASSERT_TRUE(in) << dir_ / "expected.json";
    expected_ = nlohmann::json::parse(in);
  }
  models::StateDict read(const std::string& name, std::string* where = nullptr) {
    const std::string path = (dir_ / (name + ".pt")).string();
    return state_dict_of(read_torch_save(read_file_bytes(path), path), path, where);
  }
  void expect_as_saved(const std::string& name, const models::StateDict& got) {
    const nlohmann::json& want = expected_[name];
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [n, record] : want.items()) {
      SCOPED_TRACE(name + ": " + n);
      ASSERT_TRUE(got.count(n));
      const torch::Tensor& t = got.at(n);
      EXPECT_EQ(std::string(c10::toString(t.scalar_type())), dtype_name(record["dtype"]));
      EXPECT_EQ(t.sizes().vec(), record["shape"].get<std::vector<int64_t>>());
      const std::vector<double> values = record["values"].get<std::vector<double>>();
      const torch::Tensor flat = t.to(torch::kFloat64).contiguous().flatten();
      ASSERT_EQ(flat.numel(), static_cast<int64_t>(values.size()));
      for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(flat[static_cast<int64_t>(i)].item<double>(), values[i]) << i;
    }
  }
  static std::string dtype_name(const std::string& python) {
    static const std::map<std::string, std::string> names = {
        {"float32", "Float"}, {"float64", "Double"}, {"bfloat16", "BFloat16"}, {"float16", "Half"},
        {"int32", "Int"},     {"int64", "Long"},     {"bool", "Bool"}};
    return names.at(python);
  }
  fs::path dir_;
  nlohmann::json expected_;
};

TEST_F(TorchSaveFromPyTorch, AModuleStateDictWithItsMetadataReadsAsSaved) {
  const models::StateDict state = read("module_state");
  expect_as_saved("module_state", state);
  EXPECT_EQ(checkpoint_kind((dir_ / "module_state.pt").string()), CheckpointKind::kStateDict);
  write_file_atomically((dir_ / "written_module_state.pt").string(), write_torch_state_dict(state));
}

TEST_F(TorchSaveFromPyTorch, EveryDtypeViewsAndSharedStoragesReadAsSaved) {
  const models::StateDict kinds = read("kinds");
  expect_as_saved("kinds", kinds);
  // base[2] and base were one storage in PyTorch, and are one again.
  EXPECT_EQ(kinds.at("row_view").storage().data(), kinds.at("base").storage().data());
  EXPECT_EQ(kinds.at("row_view").storage_offset(), 12);
  EXPECT_EQ(kinds.at("transposed").strides().vec(), (std::vector<int64_t>{1, 6}));
  write_file_atomically((dir_ / "written_kinds.pt").string(), write_torch_state_dict(kinds));
}

TEST_F(TorchSaveFromPyTorch, AStateDictInsideATrainingCheckpointIsFound) {
  std::string where;
  const models::StateDict state = read("training_checkpoint", &where);
  expect_as_saved("module_state", state);  // "module." dropped from every name
  EXPECT_EQ(where, "its 'model_state' entry, 'module.' prefix dropped");
}

}  // namespace
}  // namespace wxtrain::interop
