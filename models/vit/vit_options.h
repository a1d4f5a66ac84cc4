#pragma once
// [model] keys of the Vision Transformer (model.name = "vit"), read by vit_schema().
#include <cstdint>

#include "core/model_options.h"

namespace wxtrain::models {

struct ViTOptions : ModelOptionsOf<ViTOptions> {
  int64_t patch_size = 4;   // model.patch_size
  int64_t embed_dim = 128;  // model.embed_dim
  int64_t depth = 4;        // model.depth: transformer blocks
  int64_t heads = 4;        // model.heads
  double mlp_ratio = 4.0;   // model.mlp_ratio
};

ModelSchema vit_schema();

}  // namespace wxtrain::models
