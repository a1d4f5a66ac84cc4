#include "models/registry.h"

#include "core/config_reader.h"
#include "core/error.h"
#include "ops/bf16_gemm.h"

namespace wxtrain::models {

// Each defined at the end of the model's network file (models/<name>/<name>.cpp).
ModelEntry unet_entry();
ModelEntry vit_entry();
ModelEntry gnn_entry();
ModelEntry fourcastnet_entry();
ModelEntry graphcast_entry();
ModelEntry pangu_entry();
ModelEntry aifs_entry();

const std::vector<ModelEntry>& model_registry() {
  static const std::vector<ModelEntry> zoo = {
      unet_entry(), vit_entry(), gnn_entry(), fourcastnet_entry(), graphcast_entry(), pangu_entry(), aifs_entry(),
  };
  return zoo;
}

const ModelEntry& find_model(const std::string& name) {
  for (const auto& e : model_registry())
    if (e.schema.name == name) return e;
  std::vector<std::string> names;
  for (const auto& e : model_registry()) names.push_back(e.schema.name);
  throw ConfigError("model.name = '" + name + "' is not a model: expected one of " + join_list(names) +
                    did_you_mean(name, names));
}

WeatherModel build_model(const ModelConfig& config, const ModelShape& shape) {
  const ModelEntry& entry = find_model(config.name);
  check_model_options(config);  // options set in code meet the rules a run file's do
  // Before any step: on a CPU without native bf16, bf16 GEMMs are computed in fp32 (ops/bf16_gemm.h).
  ops::install_bf16_gemm_in_fp32();
  return entry.build(config, shape);
}

namespace {

std::vector<ModelSchema> registered_schemas() {
  std::vector<ModelSchema> schemas;
  for (const auto& e : model_registry()) schemas.push_back(e.schema);
  return schemas;
}

// Hands the schemas to the run-file parser before main() runs. models/CMakeLists.txt makes every
// program that links wxtrain_models keep this file (the anchor below), though nothing calls it.
[[maybe_unused]] const bool kSchemasHandedOver = (set_model_schema_provider(&registered_schemas), true);

}  // namespace
}  // namespace wxtrain::models

// Referenced with -Wl,--undefined by every program linking wxtrain_models (models/CMakeLists.txt).
extern "C" const int wxtrain_model_registry_anchor = 0;
