// The run-file fuzzer links the models' [model] schemas (torch-free), not the models themselves,
// so it hands the schemas to the parser here, in the registry's order (models/registry.cpp does
// this in the main build). tests/models/check_model_names.sh fails if a registered model is missing.
#include <vector>

#include "core/model_options.h"
#include "models/aifs/aifs_options.h"
#include "models/fourcastnet/fourcastnet_options.h"
#include "models/gnn/gnn_options.h"
#include "models/graphcast/graphcast_options.h"
#include "models/pangu/pangu_options.h"
#include "models/unet/unet_options.h"
#include "models/vit/vit_options.h"

namespace {

std::vector<wxtrain::ModelSchema> schemas() {
  using namespace wxtrain::models;
  return {unet_schema(), vit_schema(), gnn_schema(), fourcastnet_schema(), graphcast_schema(), pangu_schema(), aifs_schema()};
}

[[maybe_unused]] const bool kSchemasHandedOver = (wxtrain::set_model_schema_provider(&schemas), true);

}  // namespace
