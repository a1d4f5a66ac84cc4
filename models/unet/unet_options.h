#pragma once
// [model] keys of the U-Net (model.name = "unet"), read by unet_schema().
#include <cstdint>
#include <vector>

#include "core/model_options.h"

namespace wxtrain::models {

struct UNetOptions : ModelOptionsOf<UNetOptions> {
  std::vector<int64_t> channels = {32, 64, 128};  // model.channels: width per level
  int64_t groups = 8;                             // model.groups: GroupNorm groups
};

ModelSchema unet_schema();

}  // namespace wxtrain::models
