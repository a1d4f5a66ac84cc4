// Global to regional: a FourCastNet trained on the globe, fine-tuned on a region of it. Its
// positional embedding is the one grid-sized tensor; adapt_to_grid cuts it to the region's patches
// when the region starts on the global patch grid (across the 0/360 seam too), and interpolates
// otherwise, and says which.
#include <gtest/gtest.h>

#include "models/fourcastnet/fourcastnet.h"

namespace wxtrain::models {
namespace {

FourCastNetOptions small() {
  FourCastNetOptions o;
  o.patch_size = 4;
  o.embed_dim = 8;
  o.depth = 1;
  o.afno_blocks = 2;
  o.mlp_ratio = 2.0;
  return o;
}

// 16 x 32 global cells of 11.25 degrees from 90 N and 0 E: 4 x 8 patches.
ModelShape global_grid() {
  ModelShape s;
  s.in_channels = s.out_channels = 2;
  s.lat = 16;
  s.lon = 32;
  for (int i = 0; i < 16; ++i) s.latitudes.push_back(90.0 - 11.25 * i);
  for (int j = 0; j < 32; ++j) s.longitudes.push_back(11.25 * j);
  return s;
}

ModelShape region(int first_row, int rows, int first_col, int cols) {
  const ModelShape g = global_grid();
  ModelShape s = g;
  s.lat = rows;
  s.lon = cols;
  s.latitudes.assign(g.latitudes.begin() + first_row, g.latitudes.begin() + first_row + rows);
  s.longitudes.clear();
  for (int j = 0; j < cols; ++j) s.longitudes.push_back(g.longitudes[static_cast<size_t>((first_col + j) % 32)]);
  return s;
}

// The global embedding with entry (patch row a, patch column b, channel d) = 100 a + b + d / 1000.
std::map<std::string, torch::Tensor> global_weights() {
  torch::Tensor a = torch::arange(4, torch::kFloat64).view({4, 1, 1});
  torch::Tensor b = torch::arange(8, torch::kFloat64).view({1, 8, 1});
  torch::Tensor d = torch::arange(8, torch::kFloat64).view({1, 1, 8});
  return {{"embed.pos_embed", (100 * a + b + d / 1000).to(torch::kFloat32).reshape({1, 32, 8})}};
}

torch::Tensor patch(const torch::Tensor& embedding, int64_t cols, int64_t i, int64_t j) {
  return embedding.view({-1, cols, 8})[i][j];
}

TEST(GlobalToRegional, APatchAlignedRegionCutsThePositionalEmbedding) {
  FourCastNetImpl model(small(), region(4, 8, 8, 8));  // patch rows 1-2, columns 2-3
  auto weights = global_weights();
  const auto lines = model.adapt_to_grid(weights, global_grid());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("embed.pos_embed: cut from the checkpoint's 4 x 8 patches to this grid's 2 x 2"),
            std::string::npos) << lines[0];
  const torch::Tensor cut = weights.at("embed.pos_embed");
  ASSERT_EQ(cut.sizes(), model.named_parameters()["embed.pos_embed"].sizes());
  const torch::Tensor original = global_weights().at("embed.pos_embed");
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j) EXPECT_TRUE(torch::equal(patch(cut, 2, i, j), patch(original, 8, 1 + i, 2 + j)));
}

TEST(GlobalToRegional, ARegionAcrossTheSeamWrapsInLongitude) {
  FourCastNetImpl model(small(), region(0, 4, 28, 8));  // columns 28..31, 0..3: patch columns 7 and 0
  auto weights = global_weights();
  const auto lines = model.adapt_to_grid(weights, global_grid());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("cut"), std::string::npos) << lines[0];
  const torch::Tensor original = global_weights().at("embed.pos_embed");
  EXPECT_TRUE(torch::equal(patch(weights.at("embed.pos_embed"), 2, 0, 0), patch(original, 8, 0, 7)));
  EXPECT_TRUE(torch::equal(patch(weights.at("embed.pos_embed"), 2, 0, 1), patch(original, 8, 0, 0)));
}

TEST(GlobalToRegional, ARegionOffThePatchGridIsInterpolatedAndSaysSo) {
  FourCastNetImpl model(small(), region(2, 8, 8, 8));  // half a patch down: rows 0.5 and 1.5
  auto weights = global_weights();
  const auto lines = model.adapt_to_grid(weights, global_grid());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("interpolated bilinearly"), std::string::npos) << lines[0];
  const torch::Tensor original = global_weights().at("embed.pos_embed");
  const torch::Tensor expected = (patch(original, 8, 0, 2) + patch(original, 8, 1, 2)) / 2;
  EXPECT_TRUE(torch::allclose(patch(weights.at("embed.pos_embed"), 2, 0, 0), expected));
}

TEST(GlobalToRegional, TheSameGridIsLeftAloneAndAGridWithoutCoordinatesIsNamed) {
  FourCastNetImpl same(small(), global_grid());
  auto weights = global_weights();
  EXPECT_TRUE(same.adapt_to_grid(weights, global_grid()).empty());
  FourCastNetImpl model(small(), region(4, 8, 8, 8));
  ModelShape bare = global_grid();
  bare.latitudes.clear();
  try {
    model.adapt_to_grid(weights, bare);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the checkpoint's grid has no latitude coordinates"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace wxtrain::models
