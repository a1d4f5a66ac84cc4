#include "models/unet/unet_options.h"

#include <string>

#include "core/config_reader.h"

namespace wxtrain::models {
namespace {

void read(SectionReader& r, UNetOptions& o) {
  r.get("channels", o.channels, 1);
  r.describe("channels", "width per level");
  r.get("groups", o.groups, 1, 1024);
  r.describe("groups", "GroupNorm groups (each width a multiple)");
  if (o.channels.empty()) r.fail("channels", "must list at least one level, e.g. [32, 64, 128]");
  if (o.channels.size() > 16) r.fail("channels", "has " + std::to_string(o.channels.size()) + " levels: at most 16 are supported");
  for (int64_t ch : o.channels)
    if (ch % o.groups != 0)
      r.fail("channels", "entry " + std::to_string(ch) + " is not divisible by model.groups = " + std::to_string(o.groups));
}

}  // namespace

ModelSchema unet_schema() {
  return make_model_schema<UNetOptions>("unet", "convolutional U-Net (regional grids, any size)", &read);
}

}  // namespace wxtrain::models
