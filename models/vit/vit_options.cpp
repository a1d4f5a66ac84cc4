#include "models/vit/vit_options.h"

#include <string>

#include "core/config_reader.h"

namespace wxtrain::models {
namespace {

void read(SectionReader& r, ViTOptions& o) {
  r.get("patch_size", o.patch_size, 1, 64);
  r.describe("patch_size", "patch edge in grid points");
  r.get("embed_dim", o.embed_dim, 1, 1 << 16);
  r.describe("embed_dim", "token width (a multiple of heads)");
  r.get("depth", o.depth, 1, 512);
  r.describe("depth", "transformer blocks");
  r.get("heads", o.heads, 1, 1024);
  r.describe("heads", "attention heads");
  r.get("mlp_ratio", o.mlp_ratio, 0.25, 64.0);
  r.describe("mlp_ratio", "MLP width / embed_dim");
  if (o.embed_dim % o.heads != 0)
    r.fail("embed_dim", "= " + std::to_string(o.embed_dim) + " must be divisible by model.heads = " + std::to_string(o.heads));
}

}  // namespace

ModelSchema vit_schema() {
  return make_model_schema<ViTOptions>("vit", "Vision Transformer on patches of the grid", &read);
}

}  // namespace wxtrain::models
