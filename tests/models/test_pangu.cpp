// Pangu-Weather's 3D Earth-specific transformer: window attention (windows, the shifted windows'
// roll and mask, the Earth-specific bias) equals full attention over the whole volume under an
// explicit mask built here from coordinates alone; the padding, windowing and patch layouts invert
// exactly; the input's upper-air volume is the newest state's first V x Z channels; checkpointing
// changes nothing; bf16 autocast runs; the parameter count follows the architecture. The zoo-wide
// checks (channel axes, blocks, pure bf16, memory) run for it in test_zoo.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "core/autocast.h"
#include "core/config.h"
#include "core/error.h"
#include "core/memory_meter.h"
#include "models/pangu/pangu.h"
#include "models/registry.h"
#include "ops/cpu_fusion.h"
#include "models/weather_model.h"
#include "tests/models/step_gradients.h"

namespace wxtrain::models {
namespace {

ModelConfig small_pangu() {
  ModelConfig c;
  c.name = "pangu";
  auto& o = c.options.as<PanguOptions>();
  o.patch_size = 2;
  o.level_patch = 2;
  o.embed_dim = 12;
  o.mlp_ratio = 2.0;
  o.window = {2, 3, 4};
  o.stage_depths = {2, 2, 2, 2};
  o.stage_heads = {2, 4, 4, 2};
  o.upper_variables = 2;
  o.levels = 3;  // odd: the level patch pads
  return c;
}

// Two states of 8 prognostic channels (2 upper-air variables x 3 levels, then 2 surface), one
// forcing: 17 inputs, 8 outputs, on a grid no patch or window divides.
ModelShape small_shape() {
  ModelShape s{2 * 8 + 1, 8, 13, 19};
  s.state_channels = 8;
  s.history = 2;
  return s;
}

// ---- the structural test ----

// Full attention over every token of the padded volume at once: softmax(q k^T / sqrt(d) + M) v with
// the block's own weights, M built token pair by token pair from coordinates. A pair may attend
// when both tokens fall into the same window of the rolled volume and, for a shifted block, on the
// same side of every level and latitude edge the roll wrapped around (longitude is periodic); its
// bias is the table entry of (query level, key level, query lat, key lat, lon offset) for the
// query's window type. Everything else is -inf.
torch::Tensor full_attention_reference(EarthSpecificBlockImpl& block, const torch::Tensor& x) {
  const Extent3 grid = block.options.grid(), win = block.options.window(), pad = block.padded, s = block.shift;
  const int64_t B = x.size(0), C = x.size(4), heads = block.options.heads(), hd = C / heads;
  const int64_t L = pad[0] * pad[1] * pad[2];
  const torch::Tensor volume =
      torch::constant_pad_nd(x, {0, 0, 0, pad[2] - grid[2], 0, pad[1] - grid[1], 0, pad[0] - grid[0]});
  const torch::Tensor tokens = volume.reshape({B, L, C});
  const torch::Tensor qkv = torch::nn::functional::linear(tokens, block.attn->qkv->weight, block.attn->qkv->bias)
                                .view({B, L, 3, heads, hd})
                                .permute({2, 0, 3, 1, 4});  // [3, B, heads, L, hd]
  const torch::Tensor table = block.attn->earth_bias.detach();  // [rows, types, heads]
  const int64_t n_lat_windows = pad[1] / win[1];

  struct Where {
    int64_t window[3], offset[3], side[2], type;
  };
  std::vector<Where> where(static_cast<size_t>(L));
  for (int64_t z = 0; z < pad[0]; ++z)
    for (int64_t h = 0; h < pad[1]; ++h)
      for (int64_t w = 0; w < pad[2]; ++w) {
        Where& t = where[static_cast<size_t>((z * pad[1] + h) * pad[2] + w)];
        const int64_t p[3] = {z, h, w};
        for (int d = 0; d < 3; ++d) {
          const int64_t rolled = ((p[d] - s[d]) % pad[d] + pad[d]) % pad[d];  // torch::roll by -shift
          t.window[d] = rolled / win[d];
          t.offset[d] = rolled % win[d];
          if (d < 2) t.side[d] = s[d] > 0 && rolled >= pad[d] - s[d];
        }
        t.type = t.window[0] * n_lat_windows + t.window[1];
      }
  torch::Tensor mask = torch::full({heads, L, L}, -std::numeric_limits<float>::infinity());
  auto m = mask.accessor<float, 3>();
  auto bias = table.accessor<float, 3>();
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < L; ++j) {
      const Where &a = where[static_cast<size_t>(i)], &b = where[static_cast<size_t>(j)];
      bool together = a.side[0] == b.side[0] && a.side[1] == b.side[1];
      for (int d = 0; d < 3; ++d) together = together && a.window[d] == b.window[d];
      if (!together) continue;
      const int64_t level = a.offset[0] + b.offset[0] * win[0];
      const int64_t lat = a.offset[1] + b.offset[1] * win[1];
      const int64_t lon = a.offset[2] - b.offset[2] + win[2] - 1;
      const int64_t row = (level * win[1] * win[1] + lat) * (2 * win[2] - 1) + lon;
      for (int64_t k = 0; k < heads; ++k) m[k][i][j] = bias[row][a.type][k];
    }
  const torch::Tensor scores = torch::matmul(qkv[0], qkv[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(hd)) + mask;
  const torch::Tensor out = torch::matmul(torch::softmax(scores, -1), qkv[2]).transpose(1, 2).reshape({B, L, C});
  const torch::Tensor projected = torch::nn::functional::linear(out, block.attn->proj->weight, block.attn->proj->bias);
  return projected.view({B, pad[0], pad[1], pad[2], C})
      .slice(1, 0, grid[0])
      .slice(2, 0, grid[1])
      .slice(3, 0, grid[2]);
}

TEST(PanguAttention, WindowAttentionEqualsFullAttentionWithAnExplicitMask) {
  torch::NoGradGuard no_grad;
  struct Case {
    Extent3 grid, window;
  };
  // Padding in every dimension (3 -> 4 levels, 5 -> 6 lat, 10 -> 12 lon), and a grid a window
  // divides with a single level window (no shift along levels).
  for (const Case& k : {Case{{3, 5, 10}, {2, 3, 4}}, Case{{2, 6, 8}, {2, 3, 4}}}) {
    for (bool shifted : {false, true}) {
      torch::manual_seed(11);
      EarthSpecificBlock block(EarthBlockOptions(8, 2, k.grid, k.window).shifted(shifted));
      block->attn->earth_bias.normal_(0, 1.0);  // a bias large enough to move the result
      const torch::Tensor x = torch::randn({2, k.grid[0], k.grid[1], k.grid[2], 8});
      const torch::Tensor windowed = block->attention(x);
      const torch::Tensor full = full_attention_reference(*block, x);
      const std::string what = "grid (" + std::to_string(k.grid[0]) + ", " + std::to_string(k.grid[1]) + ", " +
                               std::to_string(k.grid[2]) + ") shifted " + std::to_string(shifted);
      ASSERT_EQ(windowed.sizes(), x.sizes()) << what;
      EXPECT_TRUE(torch::allclose(windowed, full, 1e-5, 1e-5))
          << what << ": max difference " << (windowed - full).abs().max().item<double>();
      if (shifted) {
        // The shift is real: every dimension with more than one window moves by half a window, and
        // the mask cuts pairs apart (one wrapped lat edge at least).
        EXPECT_EQ(block->shift[1], 1) << what;
        EXPECT_EQ(block->shift[2], 2) << what;
        EXPECT_EQ(block->shift[0], k.grid[0] > k.window[0] ? 1 : 0) << what;
        ASSERT_TRUE(block->shift_mask.defined()) << what;
        EXPECT_GT(torch::isinf(block->shift_mask).sum().item<int64_t>(), 0) << what;
      }
    }
  }
}

TEST(PanguAttention, ShiftingChangesTheResultAndTheBiasMatters) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(12);
  EarthSpecificBlock plain(EarthBlockOptions(8, 2, {3, 5, 10}, {2, 3, 4}));
  torch::manual_seed(12);
  EarthSpecificBlock shifted(EarthBlockOptions(8, 2, {3, 5, 10}, {2, 3, 4}).shifted(true));
  const torch::Tensor x = torch::randn({1, 3, 5, 10, 8});
  EXPECT_GT((plain->attention(x) - shifted->attention(x)).abs().max().item<double>(), 1e-3);
  const torch::Tensor before = plain->attention(x);
  plain->attn->earth_bias.add_(torch::randn_like(plain->attn->earth_bias));
  EXPECT_GT((plain->attention(x) - before).abs().max().item<double>(), 1e-3);
}

TEST(PanguAttention, BiasIsSharedAlongLongitudeOnly) {
  // Two windows of the same type (same level and latitude window, different longitude) get the
  // same bias; the table index depends on the longitude offset alone, on levels and latitudes by
  // their absolute positions.
  const Extent3 window{2, 3, 4};
  const torch::Tensor index = earth_position_index(window).view({24, 24});
  auto at = [&](int64_t z, int64_t h, int64_t w) { return (z * 3 + h) * 4 + w; };
  // Same longitude offset, same level/lat positions: same entry.
  EXPECT_EQ(index[at(1, 2, 0)][at(0, 1, 1)].item<int64_t>(), index[at(1, 2, 2)][at(0, 1, 3)].item<int64_t>());
  // Shifting both in latitude changes it (absolute, not relative, in latitude).
  EXPECT_NE(index[at(0, 0, 0)][at(0, 1, 0)].item<int64_t>(), index[at(0, 1, 0)][at(0, 2, 0)].item<int64_t>());
  EXPECT_EQ(index.min().item<int64_t>(), 0);
  EXPECT_EQ(index.max().item<int64_t>(), 2 * 2 * 3 * 3 * 7 - 1);
  // Every (level pair, lat pair, lon offset) row is used.
  EXPECT_EQ(std::get<0>(at::_unique(index.flatten())).numel(), 2 * 2 * 3 * 3 * 7);
}

TEST(PanguAttention, WindowAttentionNeverHoldsTheVolumesScores) {
  // 2 x 24 x 96 = 4608 tokens: full attention's scores would be heads x 4608^2 floats (340 MB);
  // the windows' are heads x 4608 x 144 (10.6 MB). The block's forward peak stays near the latter.
  MemoryMeter& meter = memory_meter(c10::Device(c10::DeviceType::CPU));
  const Extent3 grid{2, 24, 96}, window{2, 6, 12};
  const int64_t heads = 4, L = grid[0] * grid[1] * grid[2], N = window[0] * window[1] * window[2];
  EarthSpecificBlock block(EarthBlockOptions(32, heads, grid, window).shifted(true));
  const torch::Tensor x = torch::randn({1, grid[0], grid[1], grid[2], 32});
  torch::NoGradGuard no_grad;
  int64_t peak = 0;
  {
    PeakScope scope(meter);
    const torch::Tensor y = block->forward(x);
    peak = scope.peak_increase();
  }
  const double windows = 4.0 * heads * L * N, full = 4.0 * heads * L * L;
  std::cout << "[ pangu ] block forward on " << L << " tokens: peak " << peak << " bytes; window scores "
            << windows << ", full scores " << full << "\n";
  EXPECT_GT(peak, windows);  // the scores are there (the meter counts this process's tensors)
  EXPECT_LT(peak, 5 * windows);  // scores, their softmax, the windows and their copies
  EXPECT_LT(peak, full / 8);
}

// The CPU's attention is ATen's math path spelled out (window_attention_math). In a GPU-standing
// step (CPU fusions off, estimator/activation_trace.cpp) under bf16 autocast it follows CUDA's
// autocast policy: the softmax runs in fp32 and keeps its fp32 output, the LayerNorms hand on
// fp32, so a block's output is fp32; the CPU's own step keeps the softmax and the stream in bf16.
TEST(PanguAttention, MathPathIsATensAndFollowsCudasAutocastInAGpuStandingStep) {
  torch::manual_seed(21);
  const int64_t B = 2, heads = 6, N = 24, hd = 4;
  const torch::Tensor q = torch::randn({B, heads, N, hd}), k = torch::randn({B, heads, N, hd}),
                      v = torch::randn({B, heads, N, hd});
  // A bias with -inf off the diagonal in places (never a whole row, as the shift mask).
  torch::Tensor additive = torch::randn({1, heads, N, N});
  additive = additive.masked_fill((torch::rand({1, heads, N, N}) < 0.3) & ~torch::eye(N, torch::kBool),
                                  -std::numeric_limits<float>::infinity());
  const torch::Tensor aten = std::get<0>(at::_scaled_dot_product_attention_math(q, k, v, additive));
  for (const bool fused : {false, true}) {
    ops::CpuFusionGuard fusion(fused);
    const torch::Tensor ours = window_attention_math(q, k, v, additive);
    // Unfused it is ATen's path; fused (oneDNN's products, one softmax pass) it rounds differently.
    const double tolerance = fused ? 1e-5 : 1e-6;
    EXPECT_TRUE(torch::allclose(ours, aten, tolerance, tolerance))
        << "fused " << fused << ": max difference " << (ours - aten).abs().max().item<double>();
  }

  // What the forward leaves alive: the GPU-standing step keeps the fp32 softmax and its bf16 copy
  // where the CPU's keeps one bf16 softmax, 4 bytes more per score, and the scaled copies of q and
  // k its product saves, where the CPU's product saves q and k themselves (alive anyway).
  MemoryMeter& meter = memory_meter(c10::Device(c10::DeviceType::CPU));
  auto kept = [&](bool fused) {
    ops::CpuFusionGuard fusion(fused);
    AutocastGuard autocast(c10::DeviceType::CPU, torch::kBFloat16, true);
    const torch::Tensor qb = q.to(torch::kBFloat16).requires_grad_(), kb = k.to(torch::kBFloat16).requires_grad_(),
                        vb = v.to(torch::kBFloat16).requires_grad_(), ab = additive.to(torch::kBFloat16);
    const int64_t before = meter.snapshot().allocated;
    const torch::Tensor out = window_attention_math(qb, kb, vb, ab);
    EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
    return meter.snapshot().allocated - before;
  };
  const double scores = static_cast<double>(B * heads * N * N);
  const double scaled_q_and_k = 2.0 * 2 * static_cast<double>(q.numel());  // bf16
  EXPECT_NEAR(static_cast<double>(kept(false) - kept(true)), 4 * scores + scaled_q_and_k, 0.02 * 4 * scores);

  // A block's output: fp32 in the GPU-standing step (its norms' fp32 outputs join the residual
  // sums), bf16 in the CPU's step.
  EarthSpecificBlock block(EarthBlockOptions(8, 2, {3, 5, 10}, {2, 3, 4}).shifted(true));
  const torch::Tensor x = torch::randn({1, 3, 5, 10, 8}).to(torch::kBFloat16);
  for (const bool fused : {false, true}) {
    ops::CpuFusionGuard fusion(fused);
    AutocastGuard autocast(c10::DeviceType::CPU, torch::kBFloat16, true);
    EXPECT_EQ(block->forward(x).scalar_type(), fused ? torch::kBFloat16 : torch::kFloat) << "fused " << fused;
  }
}

// The fused softmax (the CPU fusions' path) against ATen's scores * scale + bias and softmax:
// values and both gradients, in fp32 and in bf16 (against the fp32 reference: it rounds once,
// where ATen's bf16 path rounds the sum and then the softmax), -inf entries giving exact zeros,
// the bias's gradient summed over the batch.
TEST(PanguAttention, FusedSoftmaxEqualsATensPath) {
  torch::manual_seed(23);
  const int64_t B = 3, T = 2, heads = 2, N = 37;  // N not a multiple of any vector width
  const double scale = 0.3;
  const torch::Tensor scores = torch::randn({B, T, heads, N, N}) * 3;
  torch::Tensor bias = torch::randn({1, T, heads, N, N});
  bias = bias.masked_fill((torch::rand({1, T, heads, N, N}) < 0.3) & ~torch::eye(N, torch::kBool),
                          -std::numeric_limits<float>::infinity());
  const torch::Tensor upstream = torch::randn({B, T, heads, N, N});
  auto run = [&](bool fused, torch::Dtype dtype) {
    auto leaf = [&](const torch::Tensor& t) { return t.to(dtype, false, /*copy=*/true).requires_grad_(); };
    const torch::Tensor s = leaf(scores), b = leaf(bias);
    const torch::Tensor y = fused ? scaled_biased_softmax(s, b, scale) : torch::softmax(s * scale + b, -1);
    EXPECT_EQ(y.scalar_type(), dtype);
    (y.to(torch::kFloat) * upstream).sum().backward();
    EXPECT_EQ(b.grad().sizes(), b.sizes());
    return std::vector<torch::Tensor>{y.to(torch::kFloat), s.grad().to(torch::kFloat), b.grad().to(torch::kFloat)};
  };
  const auto reference = run(false, torch::kFloat);
  const char* names[] = {"softmax", "scores' gradient", "bias's gradient"};
  for (const torch::Dtype dtype : {torch::kFloat, torch::kBFloat16}) {
    const auto fused = run(true, dtype);
    for (size_t i = 0; i < 3; ++i) {
      const double scale_of = reference[i].abs().max().item<double>();
      const double tolerance = dtype == torch::kFloat ? 1e-5 : 1e-2 * scale_of;
      EXPECT_TRUE(torch::allclose(fused[i], reference[i], dtype == torch::kFloat ? 1e-5 : 1e-2, tolerance))
          << names[i] << " in " << dtype << ": max difference " << (fused[i] - reference[i]).abs().max().item<double>();
    }
    // Masked entries are exact zeros, and so are their gradients.
    const torch::Tensor masked = torch::isinf(bias).expand_as(scores);
    EXPECT_EQ(fused[0].masked_select(masked).abs().max().item<double>(), 0.0) << dtype;
    EXPECT_EQ(fused[1].masked_select(masked).abs().max().item<double>(), 0.0) << dtype;
  }
}

// ---- padding, windows and patches invert ----

TEST(PanguLayout, PaddingAndWindowsRoundTrip) {
  torch::manual_seed(13);
  const torch::Tensor x = torch::randn({2, 3, 5, 10, 4});
  const torch::Tensor padded = pad_volume(x, {2, 3, 4});
  EXPECT_EQ(padded.sizes(), (std::vector<int64_t>{2, 4, 6, 12, 4}));
  EXPECT_TRUE(torch::equal(crop_volume(padded, {3, 5, 10}), x));
  EXPECT_EQ(padded.slice(1, 3).abs().sum().item<double>(), 0.0);  // zeros, not copies
  EXPECT_EQ(padded.slice(3, 10).abs().sum().item<double>(), 0.0);
  const torch::Tensor windows = window_partition(padded, {2, 3, 4});
  EXPECT_EQ(windows.sizes(), (std::vector<int64_t>{2 * 3, 2 * 2, 24, 4}));
  // Window (b=1, lon window 2, level window 1, lat window 0), token (1, 2, 3) is volume (3, 2, 11).
  EXPECT_TRUE(torch::equal(windows[1 * 3 + 2][1 * 2 + 0][(1 * 3 + 2) * 4 + 3], padded[1][3][2][11]));
  EXPECT_TRUE(torch::equal(window_reverse(windows, {2, 3, 4}, 2, {4, 6, 12}), padded));
}

TEST(PanguLayout, EmbeddingAndRecoveryInvertOnAnOddGrid) {
  // With identity weights the patch embedding and the head's patch recovery are each other's
  // inverse: every grid value comes back in its own channel, level and point after the padding
  // to whole (level, lat, lon) patches and the crop.
  torch::NoGradGuard no_grad;
  const int64_t V = 2, Z = 3, Cs = 3, pz = 2, p = 2, lat = 5, lon = 7;
  const int64_t upper_width = V * pz * p * p, surface_width = Cs * p * p, D = upper_width;  // 16 >= 12
  PanguEmbed embed(V, Cs, D, pz, p);
  embed->upper->weight.copy_(torch::eye(D));
  embed->upper->bias.zero_();
  embed->surface->weight.copy_(torch::eye(D, surface_width));
  embed->surface->bias.zero_();
  PanguHead head(2 * D, V, Z, Cs, pz, p, lat, lon);
  // The head reads [skip, x]: recover from the skip half.
  head->upper->weight.copy_(torch::eye(upper_width, 2 * D));
  head->surface->weight.copy_(torch::eye(surface_width, 2 * D));
  torch::manual_seed(14);
  const torch::Tensor upper = torch::randn({2, V, Z, lat, lon}), surface = torch::randn({2, Cs, lat, lon});
  const torch::Tensor tokens = embed(upper, surface);
  EXPECT_EQ(tokens.sizes(), (std::vector<int64_t>{2, 1 + 2, 3, 4, D}));  // surface level + ceil(3/2) levels
  const torch::Tensor out = head(torch::zeros_like(tokens), tokens);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{2, V * Z + Cs, lat, lon}));
  EXPECT_TRUE(torch::allclose(out.slice(1, 0, V * Z), upper.reshape({2, V * Z, lat, lon})));
  EXPECT_TRUE(torch::allclose(out.slice(1, V * Z), surface));
}

TEST(PanguLayout, DownAndUpSamplingKeepOddGrids) {
  torch::NoGradGuard no_grad;
  PanguDownSample down(6);
  PanguUpSample up(12, 6);
  const torch::Tensor x = torch::randn({2, 3, 7, 9, 6});
  const torch::Tensor coarse = down(x);
  EXPECT_EQ(coarse.sizes(), (std::vector<int64_t>{2, 3, 4, 5, 12}));
  EXPECT_EQ(up(coarse, 7, 9).sizes(), x.sizes());
}

TEST(PanguLayout, TheNewestStatesUpperAirFormsTheVolume) {
  torch::manual_seed(0);
  auto model = std::dynamic_pointer_cast<PanguImpl>(build_model(small_pangu(), small_shape()));
  ASSERT_TRUE(model);
  // Channel c holds the value c everywhere.
  const torch::Tensor x = torch::arange(17, torch::kFloat).view({1, 17, 1, 1}).expand({1, 17, 13, 19});
  const auto parts = model->split_input(x);
  ASSERT_EQ(parts[0].sizes(), (std::vector<int64_t>{1, 2, 3, 13, 19}));
  for (int64_t v = 0; v < 2; ++v)
    for (int64_t z = 0; z < 3; ++z)  // the newest state starts at channel 8; variable-major
      EXPECT_EQ(parts[0][0][v][z][0][0].item<float>(), 8 + v * 3 + z) << v << ", " << z;
  // The surface-like rest, in input order: the older state whole, the newest's surface, the forcing.
  ASSERT_EQ(parts[1].size(1), 17 - 6);
  const std::vector<float> rest{0, 1, 2, 3, 4, 5, 6, 7, 14, 15, 16};
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(parts[1][0][static_cast<int64_t>(i)][0][0].item<float>(), rest[i]);
  EXPECT_EQ(model->tokens(), (Extent3{1 + 2, 7, 10}));
  EXPECT_EQ(model->coarse_tokens(), (Extent3{1 + 2, 4, 5}));
}

// ---- the model ----

TEST(Pangu, ForwardShapesWithAndWithoutUpperAir) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(1);
  WeatherModel model = build_model(small_pangu(), small_shape());
  const torch::Tensor y = model->forward(torch::randn({2, 17, 13, 19}));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 8, 13, 19}));
  EXPECT_TRUE(torch::isfinite(y).all().item<bool>());
  ModelConfig flat = small_pangu();
  flat.options.as<PanguOptions>().upper_variables = flat.options.as<PanguOptions>().levels = 0;  // surface only
  const torch::Tensor y2 = build_model(flat, small_shape())->forward(torch::randn({2, 17, 13, 19}));
  EXPECT_EQ(y2.sizes(), (std::vector<int64_t>{2, 8, 13, 19}));
  // Every output an upper-air variable: no surface head.
  ModelShape all_upper = small_shape();
  all_upper.out_channels = 6;
  all_upper.state_channels = 6;
  all_upper.in_channels = 2 * 6 + 1;
  EXPECT_EQ(build_model(small_pangu(), all_upper)->forward(torch::randn({1, 13, 13, 19})).sizes(),
            (std::vector<int64_t>{1, 6, 13, 19}));
}

TEST(Pangu, CheckpointedEqualsPlainOutputsAndGradients) {
  torch::manual_seed(8);
  WeatherModel model = build_model(small_pangu(), small_shape());
  const auto plain = testing::expect_checkpointed_equals_plain(*model, torch::randn({2, 17, 13, 19}), 1e-4, 1e-5);
  // The input gradient reaches the upper-air volume through the checkpointed embedding (its
  // agreement with the plain step is part of the whole input gradient's, compared above).
  EXPECT_GT(plain[1].narrow(1, 8, 6).abs().sum().item<double>(), 0.0);
}

TEST(Pangu, Bf16MixedForwardAndBackward) {
  torch::manual_seed(9);
  WeatherModel model = build_model(small_pangu(), small_shape());
  const torch::Tensor x = torch::randn({2, 17, 13, 19});
  torch::Tensor reference;
  {
    torch::NoGradGuard no_grad;
    reference = model->forward(x);
  }
  torch::Tensor y;
  {
    AutocastGuard autocast(c10::DeviceType::CPU, torch::kBFloat16, true);
    y = model->forward(x);
  }
  ASSERT_TRUE(torch::isfinite(y).all().item<bool>());
  EXPECT_LT((y.to(torch::kFloat) - reference).abs().max().item<double>(), 0.1 * reference.abs().max().item<double>() + 0.05);
  y.to(torch::kFloat).square().mean().backward();
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_EQ(item.value().grad().scalar_type(), torch::kFloat) << item.key();
    EXPECT_TRUE(torch::isfinite(item.value().grad()).all().item<bool>()) << item.key();
  }
}

TEST(Pangu, PositionIndicesStayInt64WhenTheModelIsCast) {
  torch::manual_seed(2);
  WeatherModel model = build_model(small_pangu(), small_shape());
  auto block = std::dynamic_pointer_cast<PanguImpl>(model)->blocks()[1];
  const torch::Tensor index = block->attn->position_index.clone();
  model->to(torch::kBFloat16);
  EXPECT_EQ(block->attn->position_index.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(block->attn->position_index, index));
  EXPECT_EQ(block->shift_mask.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(block->attn->earth_bias.scalar_type(), torch::kBFloat16);
  torch::NoGradGuard no_grad;
  EXPECT_EQ(model->forward(torch::randn({1, 17, 13, 19}, torch::kBFloat16)).scalar_type(), torch::kBFloat16);
  model->to(torch::Device(torch::kCPU), torch::kFloat);
  EXPECT_EQ(block->attn->position_index.scalar_type(), torch::kLong);
}

TEST(Pangu, ParameterCountMatchesTheArchitecture) {
  const ModelConfig c = small_pangu();  // D 12, patch (2, 2, 2), window (2, 3, 4), depths 2 x 4
  const int64_t D = 12, V = 2, Cs = 17 - 6, Cso = 8 - 6, p = 2, pz = 2;
  auto block = [](int64_t dim, int64_t heads, int64_t types, const Extent3& w) {
    const int64_t hidden = 2 * dim;
    const int64_t table = w[0] * w[0] * w[1] * w[1] * (2 * w[2] - 1) * types * heads;
    return (dim * 3 * dim + 3 * dim) + (dim * dim + dim) + table + 2 * dim + (dim * hidden + hidden) +
           (hidden * dim + dim) + 2 * dim;
  };
  // Tokens: 3 levels (surface + ceil(3/2)), 7 x 10; coarse 4 x 5. Windows (2, 3, 4) fit both.
  // Types: level windows x lat windows = ceil(3/2) x ceil(7/3) = 2 x 3 fine, 2 x ceil(4/3) = 2 x 2 coarse.
  const int64_t fine = block(D, 2, 6, {2, 3, 4}), coarse = block(2 * D, 4, 4, {2, 3, 4});
  const int64_t embed = (V * pz * p * p * D + D) + (Cs * p * p * D + D);
  const int64_t down = 2 * 4 * D + 4 * D * 2 * D;
  const int64_t up = 2 * D * 4 * D + 2 * D + D * D;
  const int64_t head = 2 * D * V * pz * p * p + V + 2 * D * Cso * p * p + Cso;
  int64_t n = 0;
  for (const auto& t : build_model(c, small_shape())->parameters()) n += t.numel();
  EXPECT_EQ(n, embed + 2 * fine + down + 4 * coarse + up + 2 * fine + head);
}

TEST(Pangu, PublishedConfigurationHas64MillionParameters) {
  // Bi et al. 2023's model built for real (no forward): 5 upper-air variables x 13 levels, 4
  // surface variables and 3 constant masks on 721 x 1440, the pseudocode's sizes. The authors give
  // "about 256 million parameters in total" for four such models (arXiv:2211.02556, abstract).
  ModelConfig c;
  c.name = "pangu";
  auto& o = c.options.as<PanguOptions>();
  o.upper_variables = 5;
  o.levels = 13;
  o.level_patch = 2;
  o.patch_size = 4;
  o.embed_dim = 192;
  o.window = {2, 6, 12};
  o.stage_depths = {2, 6, 6, 2};
  o.stage_heads = {6, 12, 12, 6};
  ModelShape s{5 * 13 + 4 + 3, 5 * 13 + 4, 721, 1440};
  s.state_channels = 5 * 13 + 4;
  auto model = std::dynamic_pointer_cast<PanguImpl>(build_model(c, s));
  ASSERT_TRUE(model);
  EXPECT_EQ(model->tokens(), (Extent3{8, 181, 360}));
  EXPECT_EQ(model->coarse_tokens(), (Extent3{8, 91, 180}));
  // Window types: 4 level windows x 31 (181 -> 186) latitude windows; 4 x 16 (91 -> 96).
  EXPECT_EQ(model->blocks().front()->attn->earth_bias.size(1), 124);
  EXPECT_EQ(model->blocks()[2]->attn->earth_bias.size(1), 64);
  int64_t n = 0;
  for (const auto& t : model->parameters()) n += t.numel();
  EXPECT_EQ(n, 64'220'169);
}

TEST(Pangu, BlockNamesInForwardOrder) {
  const ModelConfig c = small_pangu();
  EXPECT_EQ(build_model(c, small_shape())->block_names(),
            (std::vector<std::string>{"embed", "layer1_block0", "layer1_block1", "downsample", "layer2_block0",
                                      "layer2_block1", "layer3_block0", "layer3_block1", "upsample", "layer4_block0",
                                      "layer4_block1", "head"}));
}

// ---- configuration ----

TEST(Pangu, ConfigKeysAndErrors) {
  const RunConfig r = parse_config(
      "[model]\nname = \"pangu\"\nembed_dim = 24\nupper_variables = 2\nlevels = 2\nlevel_patch = 1\n"
      "window = [1, 4, 8]\nstage_depths = [2, 4, 4, 2]\nstage_heads = [3, 6, 6, 3]\n"
      "[data]\ngrid = [17, 23]\nvariables = [\"u_500\", \"u_850\", \"v_500\", \"v_850\", \"p\"]\n",
      "pangu.toml");
  const auto& m = r.model.options.as<PanguOptions>();
  EXPECT_EQ(m.upper_variables, 2);
  EXPECT_EQ(m.levels, 2);
  EXPECT_EQ(m.level_patch, 1);
  EXPECT_EQ(m.window, (std::vector<int64_t>{1, 4, 8}));
  EXPECT_EQ(m.stage_depths, (std::vector<int64_t>{2, 4, 4, 2}));
  EXPECT_EQ(m.stage_heads, (std::vector<int64_t>{3, 6, 6, 3}));
  const ModelShape shape = model_shape(r);
  EXPECT_EQ(shape.state_channels, 5);
  EXPECT_EQ(shape.history, 2);
  EXPECT_NO_THROW(build_model(r.model, shape));

  auto error = [](const std::string& model, const std::string& variables = "[\"a\", \"b\", \"c\"]") {
    try {
      const RunConfig bad = parse_config("[model]\nname = \"pangu\"\n" + model + "[data]\ngrid = [17, 23]\nvariables = " +
                                             variables + "\n",
                                         "pangu.toml");
      build_model(bad.model, model_shape(bad));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto expect_error = [&](const std::string& model, const std::string& needle) {
    const std::string what = error(model);
    EXPECT_NE(what.find(needle), std::string::npos) << model << " -> " << what;
  };
  expect_error("window = [2, 6]\n", "model.window");
  expect_error("stage_depths = [2, 6, 2]\n", "model.stage_depths");
  expect_error("stage_heads = [5, 8, 8, 4]\n", "model.stage_heads");
  expect_error("upper_variables = 2\n", "model.levels");
  expect_error("window = [2, 0, 12]\n", "model.window");
  // The layout must fit the data: 2 x 2 upper-air channels in a 3-channel state.
  expect_error("upper_variables = 2\nlevels = 2\n", "model.upper_variables x model.levels");
  ModelConfig c = small_pangu();
  c.options.as<PanguOptions>().stage_heads = {5, 4, 4, 2};
  EXPECT_THROW(build_model(c, small_shape()), ConfigError);
}

// ---- fine-tuning a model of the whole grid on a region of it ----

// A model of a 24 x 20 grid and one of rows 6..17 of it: tokens 12 (fine) and 6 (coarse) rows in
// windows of 3 against 6 and 3.
TEST(PanguRegion, BiasTablesOfARegionComeFromTheLatitudeBandsThatCoverIt) {
  const ModelConfig c = small_pangu();
  ModelShape global{9, 8, 24, 20};
  global.state_channels = 8;
  ModelShape region = global;
  region.lat = 12;
  auto trained = std::dynamic_pointer_cast<PanguImpl>(build_model(c, global));
  auto regional = std::dynamic_pointer_cast<PanguImpl>(build_model(c, region));
  GridPlacement placement{24, 20, {}, {}};
  for (int64_t r = 6; r < 18; ++r) placement.rows.push_back(r);
  for (int64_t col = 0; col < 20; ++col) placement.cols.push_back(col);

  // Fine stage: 4 trained latitude windows (token rows 0-2, 3-5, 6-8, 9-11), 2 regional ones whose
  // centres (grid rows 3 and 9 of the region: 9 and 15 of the globe) fall in windows 1 and 2.
  std::string how;
  const torch::Tensor fine = trained->blocks()[0]->attn->earth_bias;  // [rows, 2 level x 4 lat windows, heads]
  ASSERT_EQ(fine.size(1), 8);
  const torch::Tensor fitted = regional->fit_to_grid("layer1_block0.attn.earth_bias", fine, placement, &how);
  ASSERT_TRUE(fitted.defined());
  ASSERT_EQ(fitted.sizes(), regional->blocks()[0]->attn->earth_bias.sizes());
  for (int64_t z = 0; z < 2; ++z) {
    EXPECT_TRUE(torch::equal(fitted.select(1, z * 2 + 0), fine.select(1, z * 4 + 1)));
    EXPECT_TRUE(torch::equal(fitted.select(1, z * 2 + 1), fine.select(1, z * 4 + 2)));
  }
  EXPECT_EQ(how, "Earth-specific bias: 2 latitude windows from the trained grid's 4 (windows 1, 2)");
  // Coarse stage: 2 trained windows of 3 coarse token rows (12 grid rows each), one regional window
  // centred on token row 1 = grid row 6 of the region, 12 of the globe: window 1.
  const torch::Tensor coarse = trained->blocks()[2]->attn->earth_bias;
  const torch::Tensor coarse_fitted = regional->fit_to_grid("layer2_block0.attn.earth_bias", coarse, placement, &how);
  ASSERT_TRUE(coarse_fitted.defined());
  for (int64_t z = 0; z < 2; ++z) EXPECT_TRUE(torch::equal(coarse_fitted.select(1, z), coarse.select(1, z * 2 + 1)));
  // The masks are the region's own; other tensors and an unknown placement are not the grid's.
  const torch::Tensor mask = regional->fit_to_grid("layer1_block1.shift_mask", trained->blocks()[1]->shift_mask, placement, &how);
  ASSERT_TRUE(mask.defined());
  EXPECT_TRUE(torch::equal(mask, regional->blocks()[1]->shift_mask));
  EXPECT_FALSE(regional->fit_to_grid("layer1_block0.attn.qkv.weight", fine, placement, &how).defined());
  EXPECT_FALSE(regional->fit_to_grid("layer1_block0.attn.earth_bias", fine, GridPlacement{}, &how).defined());
}

// ---- PhysicsNeMo's Pangu (pangu_reference.cpp; forward and gradients: test_pangu_reference.cpp) ----

const ReferenceModel& physicsnemo_pangu() { return find_model("pangu").references.at(0); }

// The reference's arguments for a grid whose padding is uneven everywhere (pangu_fixture.py's).
nlohmann::json small_reference_args() {
  return {{"img_size", {37, 70}}, {"patch_size", {2, 4, 4}}, {"embed_dim", 16}, {"num_heads", {2, 4, 4, 2}},
          {"window_size", {2, 6, 8}}};
}

std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(PanguReferenceMapping, ArgumentsBecomeTheOptionsThatReproduceIt) {
  const auto [config, shape] = physicsnemo_pangu().from_reference_args(small_reference_args());
  const auto& o = config.options.as<PanguOptions>();
  EXPECT_EQ(config.name, "pangu");
  EXPECT_EQ(o.patch_size, 4);
  EXPECT_EQ(o.level_patch, 2);
  EXPECT_EQ(o.upper_variables, 5);
  EXPECT_EQ(o.levels, 13);
  EXPECT_EQ(o.stage_depths, (std::vector<int64_t>{2, 6, 6, 2}));
  EXPECT_EQ(o.block_norm, "pre");
  EXPECT_EQ(o.padding, "centered");
  EXPECT_EQ(o.window_shift, (std::vector<int64_t>{1, 3, 6}));
  EXPECT_FALSE(o.fit_window);
  EXPECT_EQ(o.shift_mask, "all_edges");
  EXPECT_EQ(shape.in_channels, 72);
  EXPECT_EQ(shape.out_channels, 69);
  EXPECT_EQ(shape.lat, 37);
  EXPECT_EQ(shape.lon, 70);
  EXPECT_EQ(physicsnemo_pangu().to_reference_args(config, shape), small_reference_args());
  // The published defaults fill what a file leaves out.
  const auto [published, published_shape] = physicsnemo_pangu().from_reference_args(nlohmann::json::object());
  EXPECT_EQ(published.options.as<PanguOptions>().embed_dim, 192);
  EXPECT_EQ(published_shape.lat, 721);
  EXPECT_EQ(find_model("pangu").parameter_count(published, published_shape), 64'220'169);
}

TEST(PanguReferenceMapping, ArgumentsWeCannotHonourAreRefusedByName) {
  auto refused = [](nlohmann::json change, const std::string& needle) {
    nlohmann::json args = small_reference_args();
    for (const auto& [k, v] : change.items()) args[k] = v;
    const std::string what = config_error([&] { physicsnemo_pangu().from_reference_args(args); });
    EXPECT_NE(what.find(needle), std::string::npos) << change.dump() << " -> " << what;
  };
  refused({{"drop_path", 0.1}}, "'drop_path'");
  refused({{"patch_size", {1, 4, 4}}}, "'patch_size' = [1,4,4]");
  refused({{"patch_size", {2, 4, 2}}}, "square");
  refused({{"img_size", {35, 70}}}, "'img_size' = [35,70]");  // PatchEmbed3D pads 3 rows, PatchEmbed2D 1
  refused({{"window_size", {2, 3, 12}}}, "'window_size'");    // its fixed roll of 3 latitudes needs 4
  refused({{"embed_dim", "16"}}, "'embed_dim'");
  refused({{"num_heads", {3, 4, 4, 2}}}, "model.stage_heads");  // 16 wide, 3 heads

  // Ours as the reference: anything its code fixes, named by our key.
  // References, not a structured binding: the lambdas below capture them (C++17 cannot capture bindings).
  auto reference_args = physicsnemo_pangu().from_reference_args(small_reference_args());
  ModelConfig& config = reference_args.first;
  ModelShape& shape = reference_args.second;
  config.options.as<PanguOptions>().block_norm = "post";
  EXPECT_NE(config_error([&] { physicsnemo_pangu().to_reference_args(config, shape); }).find("model.block_norm"),
            std::string::npos);
  ModelConfig ours = small_pangu();
  EXPECT_NE(config_error([&] { physicsnemo_pangu().to_reference_args(ours, small_shape()); }).find("model.upper_variables"),
            std::string::npos);
}

TEST(PanguReferenceMapping, EveryTensorIsAccountedForBothWays) {
  // References, not a structured binding: the lambdas below capture them (C++17 cannot capture bindings).
  const auto reference_args = physicsnemo_pangu().from_reference_args(small_reference_args());
  const ModelConfig& config = reference_args.first;
  const ModelShape& shape = reference_args.second;
  WeatherModel model = build_model(config, shape);
  StateDict ours;
  for (const auto& item : model->named_parameters()) ours[item.key()] = item.value().detach();
  for (const auto& item : model->named_buffers()) ours[item.key()] = item.value();
  // The estimator's formulas know these options: the coarse grid's 5 x 9 tokens padded to windows
  // of 6 x 8 that it does not fill (6 x 16), one mask per longitude window.
  int64_t parameters = 0;
  double buffer_bytes = 0;
  for (const auto& t : model->parameters()) parameters += t.numel();
  for (const auto& t : model->buffers())
    buffer_bytes += static_cast<double>(t.numel()) * (t.scalar_type() == torch::kLong ? 8 : 4);
  EXPECT_EQ(find_model("pangu").parameter_count(config, shape), parameters);
  EXPECT_EQ(find_model("pangu").buffer_bytes(config, shape, 4), buffer_bytes);

  const StateDict reference = physicsnemo_pangu().to_reference_state(ours, config, shape);
  EXPECT_EQ(reference.size(), 247u);  // PhysicsNeMo's state_dict at any size: 223 parameters, 16 + 8 buffers
  EXPECT_EQ(reference.at("patchrecovery3d.conv.weight").sizes(), (std::vector<int64_t>{32, 5, 2, 4, 4}));
  EXPECT_EQ(reference.at("layer1.blocks.1.attn_mask").sizes(), (std::vector<int64_t>{3, 8, 96, 96}));
  const StateDict back = physicsnemo_pangu().from_reference_state(reference, config, shape);
  ASSERT_EQ(back.size(), ours.size());
  for (const auto& [name, t] : ours) EXPECT_TRUE(torch::equal(back.at(name), t)) << name;

  StateDict extra = reference;
  extra["layer1.blocks.0.attn.relative_position_bias"] = torch::zeros({3});
  EXPECT_NE(config_error([&] { physicsnemo_pangu().from_reference_state(extra, config, shape); })
                .find("'layer1.blocks.0.attn.relative_position_bias'"),
            std::string::npos);
  StateDict missing = reference;
  missing.erase("upsample.linear2.weight");
  EXPECT_NE(config_error([&] { physicsnemo_pangu().from_reference_state(missing, config, shape); })
                .find("'upsample.linear2.weight'"),
            std::string::npos);
  StateDict wrong_mask = reference;
  wrong_mask["layer2.blocks.3.attn_mask"] = torch::zeros_like(reference.at("layer2.blocks.3.attn_mask"));
  EXPECT_NE(config_error([&] { physicsnemo_pangu().from_reference_state(wrong_mask, config, shape); })
                .find("'layer2.blocks.3.attn_mask' differs"),
            std::string::npos);
  StateDict wrong_shape = reference;
  wrong_shape["layer1.blocks.0.attn.earth_position_bias_table"] = torch::zeros({3, 2, 1});
  EXPECT_NE(config_error([&] { physicsnemo_pangu().from_reference_state(wrong_shape, config, shape); })
                .find("'layer1.blocks.0.attn.earth_position_bias_table' is [3,2,1]"),
            std::string::npos);
}

}  // namespace
}  // namespace wxtrain::models
