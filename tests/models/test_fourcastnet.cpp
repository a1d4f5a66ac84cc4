// FourCastNet's AFNO filter: the spectral step is a circular convolution (checked against a direct
// sum), the block-diagonal complex MLP equals the reference's four-einsum formulation, hard
// thresholding drops exactly the high modes, and the model pads/crops odd grids, checkpoints
// exactly and runs under bf16 autocast. The zoo-wide checks (channel axes, blocks, pure bf16,
// memory) run for it in test_zoo.cpp.
#include <gtest/gtest.h>

#include <string>

#include "core/autocast.h"
#include "core/config.h"
#include "core/error.h"
#include "models/fourcastnet/fourcastnet.h"
#include "models/weather_model.h"
#include "tests/models/step_gradients.h"

namespace wxtrain::models {
namespace {

ModelConfig small_fourcastnet() {
  ModelConfig c;
  c.name = "fourcastnet";
  auto& o = c.options.as<FourCastNetOptions>();
  o.patch_size = 4;
  o.embed_dim = 24;
  o.depth = 2;
  o.mlp_ratio = 2.0;
  o.afno_blocks = 4;
  return c;
}

// y[b, i, j, c] = sum_{m, n} k[m, n, c] x[b, (i - m) mod h, (j - n) mod w, c], summed directly.
torch::Tensor circular_convolution(const torch::Tensor& x, const torch::Tensor& k) {
  torch::Tensor y = torch::zeros_like(x);
  for (int64_t m = 0; m < k.size(0); ++m)
    for (int64_t n = 0; n < k.size(1); ++n) y += k[m][n] * torch::roll(x, {m, n}, {1, 2});
  return y;
}

TEST(SpectralMultiply, EqualsADirectCircularConvolution) {
  // One complex weight per mode is what the AFNO filter becomes with one block and a linear MLP:
  // multiplying the ortho-normalised spectrum by rfft2(k) convolves with k. Even and odd grids
  // (an odd w is only recoverable from its w/2 + 1 modes with the size passed to irfft2).
  torch::manual_seed(3);
  for (const auto& [h, w] : std::vector<std::pair<int64_t, int64_t>>{{6, 8}, {5, 7}, {6, 5}}) {
    const torch::Tensor x = torch::randn({2, h, w, 3}, torch::kDouble);
    const torch::Tensor k = torch::randn({h, w, 3}, torch::kDouble);
    const torch::Tensor weight = torch::fft::rfft2(k, std::nullopt, {0, 1});  // unnormalised
    ASSERT_EQ(weight.sizes(), (std::vector<int64_t>{h, w / 2 + 1, 3}));
    // spectral_apply runs in fp32: compare at fp32 precision.
    const torch::Tensor spectral = spectral_multiply(x, weight.to(torch::kComplexFloat));
    const torch::Tensor direct = circular_convolution(x, k);
    EXPECT_EQ(spectral.scalar_type(), torch::kDouble);
    EXPECT_TRUE(torch::allclose(spectral, direct, 1e-4, 1e-4))
        << h << " x " << w << ": max difference " << (spectral - direct).abs().max().item<double>();
  }
}

TEST(SpectralMultiply, OnesAreTheIdentityAndBf16GoesThroughFp32) {
  torch::manual_seed(4);
  const torch::Tensor x = torch::randn({1, 6, 8, 2});
  EXPECT_TRUE(torch::allclose(spectral_multiply(x, torch::ones({6, 5, 2}, torch::kComplexFloat)), x, 1e-5, 1e-5));
  const torch::Tensor y = spectral_multiply(x.to(torch::kBFloat16), torch::ones({6, 5, 2}, torch::kComplexFloat));
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::allclose(y.to(torch::kFloat), x, 2e-2, 2e-2));
}

// The reference's AFNO2D (NVlabs/FourCastNet networks/afnonet.py) with every mode kept: four
// einsums per stage on the real and imaginary parts apart, in fp64.
torch::Tensor reference_afno(const AFNO2DImpl& f, const torch::Tensor& x) {
  const int64_t B = x.size(0), h = x.size(1), w = x.size(2), C = x.size(3);
  const int64_t nb = f.options.num_blocks(), bs = C / nb, wf = w / 2 + 1;
  const torch::Tensor w1 = f.w1.to(torch::kDouble), b1 = f.b1.to(torch::kDouble);
  const torch::Tensor w2 = f.w2.to(torch::kDouble), b2 = f.b2.to(torch::kDouble);
  const torch::Tensor modes = torch::fft::rfft2(x, std::nullopt, {1, 2}, "ortho").reshape({B, h, wf, nb, bs});
  const torch::Tensor re = torch::real(modes), im = torch::imag(modes);
  auto e = [](const torch::Tensor& a, const torch::Tensor& m) { return torch::einsum("...bi,bio->...bo", {a, m}); };
  const torch::Tensor o1r = torch::relu(e(re, w1[0]) - e(im, w1[1]) + b1[0]);
  const torch::Tensor o1i = torch::relu(e(im, w1[0]) + e(re, w1[1]) + b1[1]);
  const torch::Tensor o2r = e(o1r, w2[0]) - e(o1i, w2[1]) + b2[0];
  const torch::Tensor o2i = e(o1i, w2[0]) + e(o1r, w2[1]) + b2[1];
  torch::Tensor o = torch::softshrink(torch::stack({o2r, o2i}, -1), f.options.sparsity_threshold());
  o = torch::view_as_complex(o.contiguous()).reshape({B, h, wf, C});
  return torch::fft::irfft2(o, torch::IntArrayRef{h, w}, {1, 2}, "ortho") + x;
}

TEST(AFNO2D, MatchesTheReferenceFormulation) {
  torch::manual_seed(5);
  for (int64_t blocks : {1, 2, 6}) {
    AFNO2D filter(AFNO2DOptions(12, blocks).sparsity_threshold(0.05));
    {
      // Weights large enough that ReLU and the shrinkage both cut somewhere.
      torch::NoGradGuard no_grad;
      for (auto& p : filter->parameters()) p.normal_(0, 0.5);
    }
    const torch::Tensor x = torch::randn({2, 5, 7, 12});
    const torch::Tensor ours = filter(x);
    const torch::Tensor reference = reference_afno(*filter, x.to(torch::kDouble));
    EXPECT_TRUE(torch::allclose(ours.to(torch::kDouble), reference, 1e-4, 1e-4))
        << blocks << " blocks: max difference " << (ours.to(torch::kDouble) - reference).abs().max().item<double>();
    // The filter is not trivially the identity here.
    EXPECT_GT((ours - x).abs().max().item<double>(), 1e-2);
  }
}

TEST(AFNO2D, OneBlockLinearFilterIsAConvolution) {
  // num_blocks = 1 on one channel, biases chosen so that neither ReLU nor the shrinkage cuts (b1
  // keeps the pre-activations positive, b2 takes its image back out): the filter is then the real
  // per-mode factor w2 w1 on every mode, i.e. x + (w2 w1) x.
  AFNO2D filter(AFNO2DOptions(1, 1).sparsity_threshold(0.0));
  {
    torch::NoGradGuard no_grad;
    filter->w1.zero_()[0].fill_(0.5);
    filter->w2.zero_()[0].fill_(3.0);
    filter->b1.zero_().fill_(100.0);
    filter->b2.zero_().fill_(-300.0);  // -(w2 b1) for both parts: (3 + 0i)(100 + 100i)
  }
  torch::manual_seed(6);
  const torch::Tensor x = torch::randn({1, 6, 8, 1});
  EXPECT_TRUE(torch::allclose(filter(x), 2.5 * x, 1e-4, 1e-4))
      << (filter(x) - 2.5 * x).abs().max().item<double>();
}

TEST(AFNO2D, HardThresholdingFiltersOnlyTheLowestModes) {
  torch::manual_seed(7);
  AFNO2D filter(AFNO2DOptions(8, 2).sparsity_threshold(0.0).hard_thresholding_fraction(0.5));
  {
    torch::NoGradGuard no_grad;
    for (auto& p : filter->parameters()) p.normal_(0, 0.5);
  }
  const int64_t h = 8, w = 10;  // 5 x 6 modes; |k_h| < int(5 * 0.5) = 2, k_w < int(6 * 0.5) = 3
  const torch::Tensor x = torch::randn({2, h, w, 8});
  const torch::Tensor change = torch::fft::rfft2(filter(x) - x, std::nullopt, {1, 2}, "ortho").abs().amax({0, 3});
  for (int64_t i = 0; i < h; ++i) {
    const int64_t freq = i <= h / 2 ? i : h - i;
    for (int64_t j = 0; j < w / 2 + 1; ++j) {
      const double c = change[i][j].item<double>();
      if (freq < 2 && j < 3) EXPECT_GT(c, 1e-3) << "mode " << i << ", " << j << " is kept";
      else EXPECT_LT(c, 1e-5) << "mode " << i << ", " << j << " is dropped";
    }
  }
}

TEST(FourCastNet, ForwardShapesOnOddGrids) {
  // Patch grids with odd sides too (the rfft's halved axis), padded and cropped back.
  torch::NoGradGuard no_grad;
  for (const auto& [patch, lat, lon] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{4, 17, 23}, {4, 13, 17}, {3, 19, 7}, {1, 5, 9}}) {
    ModelConfig c = small_fourcastnet();
    c.options.as<FourCastNetOptions>().patch_size = patch;
    torch::manual_seed(0);
    auto model = std::dynamic_pointer_cast<FourCastNetImpl>(build_model(c, {5, 3, lat, lon}));
    ASSERT_TRUE(model);
    EXPECT_EQ(model->patches_lat(), (lat + patch - 1) / patch);
    EXPECT_EQ(model->patches_lon(), (lon + patch - 1) / patch);
    const torch::Tensor y = model->forward(torch::randn({2, 5, lat, lon}));
    EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 3, lat, lon})) << patch << ": " << lat << " x " << lon;
    EXPECT_TRUE(torch::isfinite(y).all().item<bool>());
  }
}

TEST(FourCastNet, CheckpointedEqualsPlainOutputsAndGradients) {
  ModelConfig c = small_fourcastnet();
  c.options.as<FourCastNetOptions>().hard_thresholding_fraction = 0.6;  // the mask too
  torch::manual_seed(8);
  WeatherModel model = build_model(c, {5, 3, 17, 23});
  testing::expect_checkpointed_equals_plain(*model, torch::randn({2, 5, 17, 23}), 1e-5, 1e-6,
                                            /*require_nonzero=*/false);
}

TEST(FourCastNet, Bf16MixedForwardKeepsTheFilterInFp32) {
  ModelConfig c = small_fourcastnet();
  torch::manual_seed(9);
  WeatherModel model = build_model(c, {5, 3, 17, 23});
  const torch::Tensor x = torch::randn({2, 5, 17, 23});
  torch::Tensor reference;
  {
    torch::NoGradGuard no_grad;
    reference = model->forward(x);
  }
  AutocastGuard autocast(c10::DeviceType::CPU, torch::kBFloat16, true);
  torch::Tensor y = model->forward(x);
  ASSERT_TRUE(torch::isfinite(y).all().item<bool>());
  EXPECT_LT((y.to(torch::kFloat) - reference).abs().max().item<double>(), 0.1 * reference.abs().max().item<double>() + 0.05);
  // The filter alone under autocast: fp32 in, fp32 out, and autocast back on afterwards.
  auto block = std::dynamic_pointer_cast<AFNOBlockImpl>(model->named_children()["block0"]);
  ASSERT_TRUE(block);
  EXPECT_EQ(block->filter(torch::randn({1, 5, 6, 24})).scalar_type(), torch::kFloat);
  EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
}

TEST(FourCastNet, ParameterCountMatchesTheArchitecture) {
  const ModelConfig c = small_fourcastnet();  // D 24, patch 4, depth 2, mlp 48, 4 blocks of 6
  const ModelShape s{5, 3, 17, 23};
  const int64_t D = 24, p = 4, hidden = 48, tokens = 5 * 6, nb = 4, bs = 6;
  const int64_t embed = 5 * p * p * D + D + tokens * D;
  const int64_t filter = 2 * (2 * nb * bs * bs + 2 * nb * bs);  // w1, b1, w2, b2: real and imaginary
  const int64_t block = 2 * D + filter + 2 * D + (D * hidden + hidden) + (hidden * D + D);
  const int64_t head = D * p * p * 3;  // no bias, no final norm
  int64_t n = 0;
  for (const auto& t : build_model(c, s)->parameters()) n += t.numel();
  EXPECT_EQ(n, embed + 2 * block + head);
}

TEST(FourCastNet, ConfigKeysAndErrors) {
  const RunConfig r = parse_config(
      "[model]\nname = \"fourcastnet\"\nembed_dim = 48\nafno_blocks = 6\nsparsity_threshold = 0.02\n"
      "hard_thresholding_fraction = 0.5\nheads = 5\n[data]\ngrid = [17, 23]\nvariables = [\"a\"]\n",
      "afno.toml");
  const auto& m = r.model.options.as<FourCastNetOptions>();
  EXPECT_EQ(m.afno_blocks, 6);
  EXPECT_DOUBLE_EQ(m.sparsity_threshold, 0.02);
  EXPECT_DOUBLE_EQ(m.hard_thresholding_fraction, 0.5);
  auto error = [](const std::string& model) {
    try {
      parse_config("[model]\nname = \"fourcastnet\"\n" + model + "[data]\ngrid = [17, 23]\nvariables = [\"a\"]\n",
                   "afno.toml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("embed_dim = 48\nafno_blocks = 5\n").find("model.afno_blocks = 5"), std::string::npos)
      << error("embed_dim = 48\nafno_blocks = 5\n");
  EXPECT_NE(error("hard_thresholding_fraction = 0\n").find("model.hard_thresholding_fraction"), std::string::npos);
  EXPECT_NE(error("sparsity_threshold = -1\n").find("model.sparsity_threshold"), std::string::npos);
  ModelConfig bad = small_fourcastnet();
  bad.options.as<FourCastNetOptions>().afno_blocks = 5;
  EXPECT_THROW(build_model(bad, {5, 3, 17, 23}), ConfigError);
}

}  // namespace
}  // namespace wxtrain::models
