// wxtrain's fused CPU ops against LibTorch's unfused chains (which a GPU runs): GroupNorm + SiLU
// (values and all three gradients, in fp32, under bf16 autocast's dtypes and in pure bf16), the
// gnn's edge gather, the oneDNN GEMMs and the U-Net's resampling.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <ATen/Parallel.h>

#include "core/autocast.h"
#include "ops/cpu_gemm.h"
#include "ops/edge_gather.h"
#include "ops/group_norm_silu.h"
#include "ops/resample.h"

namespace wxtrain::ops {
namespace {

struct Result {
  torch::Tensor y, dx, dweight, dbias;
};

// y = group_norm_silu(x, norm) and the gradients of sum(y * probe), fused or not. y goes on in x's
// dtype, as the next conv (under autocast) takes it, so both paths see the same rounded gradient.
Result run(const torch::Tensor& x_in, torch::nn::GroupNorm& norm, const torch::Tensor& probe, bool fused) {
  CpuFusionGuard guard(fused);
  EXPECT_EQ(group_norm_silu_is_fused(x_in, norm), fused);
  torch::Tensor x = x_in.detach().clone().requires_grad_(true);
  norm->weight.mutable_grad() = torch::Tensor();
  norm->bias.mutable_grad() = torch::Tensor();
  torch::Tensor y = group_norm_silu(x, norm);
  (y.to(x_in.scalar_type()).to(torch::kFloat) * probe).sum().backward();
  return {y.detach(), x.grad(), norm->weight.grad().clone(), norm->bias.grad().clone()};
}

torch::nn::GroupNorm make_norm(int64_t groups, int64_t channels) {
  torch::manual_seed(3);
  torch::nn::GroupNorm norm(groups, channels);
  torch::NoGradGuard no_grad;
  norm->weight.uniform_(0.5, 1.5);  // not the identity, so a mix-up of channels shows
  norm->bias.uniform_(-0.5, 0.5);
  return norm;
}

double max_relative(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor a64 = a.to(torch::kDouble), b64 = b.to(torch::kDouble);
  return ((a64 - b64).abs().max() / b64.abs().max().clamp_min(1e-30)).item<double>();
}

struct Case {
  std::vector<int64_t> shape;
  int64_t groups;
};

TEST(GroupNormSiLU, MatchesLibTorchInFp32) {
  for (const Case& c : {Case{{4, 32, 9, 11}, 8}, Case{{2, 6, 5}, 3}, Case{{3, 8, 4, 4}, 1}, Case{{2, 8, 6, 6}, 8},
                        Case{{1, 16, 36, 36}, 4}}) {
    SCOPED_TRACE(::testing::PrintToString(c.shape) + " groups " + std::to_string(c.groups));
    auto norm = make_norm(c.groups, c.shape[1]);
    const torch::Tensor x = torch::randn(c.shape) * 3 + 1, probe = torch::randn(c.shape);
    const Result fused = run(x, norm, probe, true), plain = run(x, norm, probe, false);
    EXPECT_LT(max_relative(fused.y, plain.y), 1e-5);
    EXPECT_LT(max_relative(fused.dx, plain.dx), 1e-4);
    EXPECT_LT(max_relative(fused.dweight, plain.dweight), 1e-4);
    EXPECT_LT(max_relative(fused.dbias, plain.dbias), 1e-4);
  }
}

// A conv output with a large mean: the two-pass statistics keep the variance exact.
TEST(GroupNormSiLU, LargeMeanDoesNotCancel) {
  auto norm = make_norm(4, 8);
  const torch::Tensor x = torch::randn({2, 8, 10, 10}) + 1e4, probe = torch::randn({2, 8, 10, 10});
  const torch::Tensor x64 = x.to(torch::kDouble);
  const torch::Tensor reference = torch::silu(torch::group_norm(x64, 4, norm->weight.detach().to(torch::kDouble),
                                                                norm->bias.detach().to(torch::kDouble), 1e-5));
  EXPECT_LT(max_relative(run(x, norm, probe, true).y, reference), 1e-3);
}

// Under bf16 autocast the conv hands a bf16 tensor; the unfused chain casts it up, normalises and
// activates in fp32, and the next conv rounds the result to bf16. The fused op returns that
// rounding directly, and its input gradient in bf16 as the chain's cast back would.
TEST(GroupNormSiLU, Bf16InputMatchesTheUnfusedChainRounded) {
  auto norm = make_norm(8, 32);
  const torch::Tensor x = (torch::randn({4, 32, 12, 12}) * 2).to(torch::kBFloat16), probe = torch::randn({4, 32, 12, 12});
  const Result fused = run(x, norm, probe, true), plain = run(x, norm, probe, false);
  ASSERT_EQ(fused.y.scalar_type(), torch::kBFloat16);
  ASSERT_EQ(fused.dx.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(plain.y.scalar_type(), torch::kFloat);  // what the chain hands on before the cast
  const torch::Tensor rounded = plain.y.to(torch::kBFloat16).to(torch::kFloat);
  // Equal but where fp32 rounding differences cross a bf16 rounding boundary: one bf16 step.
  const double step = 1.0 / 128;
  EXPECT_LE(((fused.y.to(torch::kFloat) - rounded).abs() / rounded.abs().clamp_min(1e-3)).max().item<double>(), step);
  EXPECT_GT(fused.y.to(torch::kFloat).eq(rounded).to(torch::kDouble).mean().item<double>(), 0.99);
  EXPECT_LT(max_relative(fused.dx, plain.dx), 1e-2);
  EXPECT_LT(max_relative(fused.dweight, plain.dweight), 1e-4);  // fp32 accumulation on both sides
  EXPECT_LT(max_relative(fused.dbias, plain.dbias), 1e-4);
}

// Pure bf16 training: bf16 input and bf16 affine parameters; the gradients come back in bf16.
TEST(GroupNormSiLU, PureBf16ParametersGetBf16Gradients) {
  auto norm = make_norm(4, 16);
  const torch::Tensor x = torch::randn({2, 16, 8, 8}), probe = torch::randn({2, 16, 8, 8});
  const Result reference = run(x, norm, probe, true);
  norm->to(torch::kBFloat16);
  const Result fused = run(x.to(torch::kBFloat16), norm, probe, true);
  EXPECT_EQ(fused.dweight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(fused.dbias.scalar_type(), torch::kBFloat16);
  EXPECT_LT(max_relative(fused.y, reference.y), 3e-2);
  EXPECT_LT(max_relative(fused.dweight, reference.dweight), 3e-2);
}

// A NaN from a diverging conv must reach the loss (the trainer stops on it), in its own sample only.
TEST(GroupNormSiLU, NaNPropagatesWithinItsSampleAndGroup) {
  auto norm = make_norm(2, 4);
  torch::Tensor x = torch::randn({2, 4, 5, 5});
  x[1][3][2][2] = std::nanf("");
  torch::Tensor y = group_norm_silu(x, norm).detach();
  EXPECT_TRUE(y[1].slice(0, 2, 4).isnan().all().item<bool>());  // sample 1, group 1
  EXPECT_FALSE(y[1].slice(0, 0, 2).isnan().any().item<bool>());
  EXPECT_FALSE(y[0].isnan().any().item<bool>());
}

TEST(GroupNormSiLU, FusionGuardRestoresThePreviousSetting) {
  auto norm = make_norm(2, 4);
  const torch::Tensor x = torch::randn({1, 4, 3, 3});
  EXPECT_TRUE(cpu_fusion_enabled());
  {
    CpuFusionGuard off(false);
    EXPECT_FALSE(group_norm_silu_is_fused(x, norm));
    {
      CpuFusionGuard on(true);
      EXPECT_TRUE(group_norm_silu_is_fused(x, norm));
    }
    EXPECT_FALSE(cpu_fusion_enabled());
  }
  EXPECT_TRUE(cpu_fusion_enabled());
  EXPECT_FALSE(group_norm_silu_is_fused(x.to(torch::kDouble), norm));  // double takes LibTorch's path
}

// bench/fusion_ab's switch: one fusion off, the others and the CPU step's autocast policy unchanged,
// the previous setting back when the scope ends.
TEST(GroupNormSiLU, FusionOffGuardTurnsOffItsFusionOnly) {
  auto norm = make_norm(2, 4);
  const torch::Tensor x = torch::randn({1, 4, 3, 3});
  {
    FusionOffGuard other(Fusion::kGatherEdges);
    EXPECT_FALSE(cpu_fusion_enabled(Fusion::kGatherEdges));
    EXPECT_TRUE(group_norm_silu_is_fused(x, norm));
    {
      FusionOffGuard off(Fusion::kGroupNormSilu);
      EXPECT_FALSE(group_norm_silu_is_fused(x, norm));
      EXPECT_TRUE(cpu_fusion_enabled());
    }
    EXPECT_TRUE(group_norm_silu_is_fused(x, norm));
  }
  EXPECT_TRUE(cpu_fusion_enabled(Fusion::kGatherEdges));
}

// The gnn's edge inputs a[senders] + b[receivers] + c, with c shared by the batch (the first layer)
// or per sample (later layers): in fp32 the same additions in the same order, so equal bit for bit,
// values and gradients; in bf16 summed in fp32 and rounded once.
TEST(GatherEdges, EqualsTheUnfusedGatherAndSum) {
  torch::manual_seed(5);
  // Odd width: the vector remainder. 3 x 301 edge rows on two threads: a task boundary mid-sample.
  const int64_t batch = 3, nodes = 7, width = 37, edges = 301;
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  const torch::Tensor senders = torch::randint(nodes, {edges}, torch::kLong);
  const torch::Tensor receivers = torch::randint(nodes, {edges}, torch::kLong);
  for (const bool shared_c : {true, false}) {
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      SCOPED_TRACE(std::string(shared_c ? "shared c, " : "per-sample c, ") + c10::toString(dtype));
      const torch::Tensor a0 = torch::randn({batch, nodes, width}).to(dtype);
      const torch::Tensor b0 = torch::randn({batch, nodes, width}).to(dtype);
      const torch::Tensor c0 = (shared_c ? torch::randn({edges, width}) : torch::randn({batch, edges, width})).to(dtype);
      const torch::Tensor probe = torch::randn({batch, edges, width});
      auto run = [&](bool fused) {
        CpuFusionGuard guard(fused);
        torch::Tensor a = a0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true),
                      c = c0.clone().requires_grad_(true);
        torch::Tensor out = gather_edges(a, b, c, senders, receivers);
        (out.to(torch::kFloat) * probe).sum().backward();
        return std::vector<torch::Tensor>{out.detach(), a.grad(), b.grad(), c.grad()};
      };
      const auto fused = run(true), plain = run(false);
      ASSERT_EQ(fused[0].sizes(), plain[0].sizes());
      ASSERT_EQ(fused[0].scalar_type(), dtype);
      if (dtype == torch::kFloat) {
        for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(torch::equal(fused[i], plain[i])) << "tensor " << i;
      } else {
        EXPECT_LT(max_relative(fused[0], plain[0]), 1.0 / 64);
        for (size_t i = 1; i < fused.size(); ++i) EXPECT_LT(max_relative(fused[i], plain[i]), 1e-2) << "tensor " << i;
      }
    }
  }
  at::set_num_threads(threads);
}

// ---- fp32 GEMMs through oneDNN (Debian's libdnnl) (ops/cpu_gemm.h) ----

std::string grad_fn_name(const torch::Tensor& t) { return t.grad_fn() ? t.grad_fn()->name() : "none"; }

TEST(OneDnnLinear, MatchesAtLinearWithAndWithoutBias) {
  if (!onednn_sgemm_available()) GTEST_SKIP() << "no libdnnl.so.2 (Debian's libdnnl2): ATen's path is the only one";
  torch::manual_seed(7);
  const int64_t M = 37, K = 19, N = 23;
  // The input is a transposed view (not contiguous), as a permuted activation can be.
  const torch::Tensor x0 = torch::randn({K, M}).t(), w0 = torch::randn({N, K}), b0 = torch::randn({N});
  const torch::Tensor probe = torch::randn({M, N});
  for (const bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "bias" : "no bias");
    auto run = [&](bool onednn) {
      CpuFusionGuard guard(onednn);
      torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true),
                    b = with_bias ? b0.clone().requires_grad_(true) : torch::Tensor();
      torch::Tensor y = linear_2d(x, w, b);
      EXPECT_EQ(grad_fn_name(y).find("Linear") != std::string::npos && grad_fn_name(y).find("Fp32") != std::string::npos,
                onednn)
          << grad_fn_name(y);
      (y * probe).sum().backward();
      return std::vector<torch::Tensor>{y.detach(), x.grad(), w.grad(), with_bias ? b.grad() : torch::zeros({1})};
    };
    const auto fast = run(true), plain = run(false);
    for (size_t i = 0; i < fast.size(); ++i) EXPECT_LT(max_relative(fast[i], plain[i]), 1e-5) << "tensor " << i;
  }
}

TEST(OneDnnLinear, FrozenWeightGetsNoGradientAndAutocastKeepsAtenPath) {
  if (!onednn_sgemm_available()) GTEST_SKIP() << "no libdnnl.so.2 (Debian's libdnnl2): ATen's path is the only one";
  torch::manual_seed(8);
  const torch::Tensor w = torch::randn({5, 4}), b = torch::randn({5});  // frozen: no requires_grad
  torch::Tensor x = torch::randn({6, 4}).requires_grad_(true);
  linear_2d(x, w, b).sum().backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_LT(max_relative(x.grad(), torch::ones({6, 5}).mm(w)), 1e-6);
  EXPECT_FALSE(w.grad().defined());
  // Under bf16 autocast the product belongs to autocast (a bf16 GEMM), not to the fp32 path.
  AutocastGuard autocast(c10::DeviceType::CPU, torch::kBFloat16, true);
  const torch::Tensor y = linear_2d(x, w, b);
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(grad_fn_name(y).find("Fp32"), std::string::npos) << grad_fn_name(y);
}

TEST(OneDnnMatmul, AttentionProductsOnPermutedViewsMatchMatmul) {
  if (!onednn_sgemm_available()) GTEST_SKIP() << "no libdnnl.so.2 (Debian's libdnnl2): ATen's path is the only one";
  torch::manual_seed(9);
  const int threads = at::get_num_threads();
  at::set_num_threads(2);  // batch items split between threads
  const int64_t B = 3, N = 7, heads = 2, hd = 5;
  const torch::Tensor qkv0 = torch::randn({B, N, 3 * heads * hd});
  const torch::Tensor probe = torch::randn({B, heads, N, hd});
  auto run = [&](bool onednn) {
    CpuFusionGuard guard(onednn);
    torch::Tensor qkv = qkv0.clone().requires_grad_(true);
    auto parts = qkv.view({B, N, 3, heads, hd}).permute({2, 0, 3, 1, 4}).unbind(0);  // strided, as in models/vit/vit.cpp
    torch::Tensor scores = scaled_matmul(parts[0], parts[1].transpose(-2, -1), 0.25);
    torch::Tensor out = scaled_matmul(torch::softmax(scores, -1), parts[2]);
    EXPECT_EQ(grad_fn_name(out).find("Fp32") != std::string::npos, onednn) << grad_fn_name(out);
    (out * probe).sum().backward();
    return std::vector<torch::Tensor>{scores.detach(), out.detach(), qkv.grad()};
  };
  const auto fast = run(true), plain = run(false);
  for (size_t i = 0; i < fast.size(); ++i) {
    ASSERT_EQ(fast[i].sizes(), plain[i].sizes()) << "tensor " << i;
    EXPECT_LT(max_relative(fast[i], plain[i]), 1e-5) << "tensor " << i;
  }
  at::set_num_threads(threads);
}

TEST(OneDnnMatmul, BroadcastOperandIsCopiedNotMisread) {
  if (!onednn_sgemm_available()) GTEST_SKIP() << "no libdnnl.so.2 (Debian's libdnnl2): ATen's path is the only one";
  torch::manual_seed(10);
  // Stride 0 in a matrix dimension is neither row- nor column-major: the op must copy it.
  const torch::Tensor a = torch::randn({2, 1, 6}).expand({2, 4, 6}), b = torch::randn({2, 6, 3});
  const torch::Tensor c = scaled_matmul(a, b, 2.0);
  EXPECT_LT(max_relative(c, torch::matmul(a, b) * 2), 1e-6);
}

// ---- 2x resampling (ops/resample.h) ----

TEST(MaxPool2x2, EqualsAtenBitForBitWithTiesAndNaN) {
  torch::manual_seed(12);
  const int threads = at::get_num_threads();
  at::set_num_threads(2);  // planes split between threads
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    // Values from {-2..2}: most windows hold ties, where the first maximum must win.
    torch::Tensor x0 = torch::randint(-2, 3, {3, 5, 6, 8}).to(dtype);
    x0[1][2][3][5] = std::nan("");
    x0[2][0][0][0] = -std::numeric_limits<float>::infinity();
    const torch::Tensor probe = torch::randn({3, 5, 3, 4}).to(dtype);
    auto run = [&](bool fused) {
      CpuFusionGuard guard(fused);
      torch::Tensor x = x0.clone().requires_grad_(true);
      torch::Tensor y = max_pool_2x2(x);
      EXPECT_EQ(grad_fn_name(y).find("MaxPool2x2") != std::string::npos, fused) << grad_fn_name(y);
      (y * probe).sum().backward();
      return std::vector<torch::Tensor>{y.detach(), x.grad()};
    };
    const auto fused = run(true), plain = run(false);
    for (size_t i = 0; i < fused.size(); ++i) {
      ASSERT_EQ(fused[i].sizes(), plain[i].sizes());
      EXPECT_TRUE(torch::equal(fused[i].nan_to_num(7), plain[i].nan_to_num(7))) << "tensor " << i;
    }
    EXPECT_TRUE(std::isnan(fused[0][1][2][1][2].item<float>()));
  }
  at::set_num_threads(threads);
  // Odd sizes: ATen's floor semantics, not the kernel.
  EXPECT_EQ(max_pool_2x2(torch::randn({1, 2, 5, 7})).sizes(), (std::vector<int64_t>{1, 2, 2, 3}));
}

TEST(Upsample2xConcat, EqualsUpsampleThenCat) {
  torch::manual_seed(13);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const torch::Tensor coarse0 = torch::randn({2, 3, 4, 5}).to(dtype), skip0 = torch::randn({2, 2, 8, 10}).to(dtype);
    const torch::Tensor probe = torch::randn({2, 5, 8, 10});
    auto run = [&](bool fused) {
      CpuFusionGuard guard(fused);
      torch::Tensor coarse = coarse0.clone().requires_grad_(true), skip = skip0.clone().requires_grad_(true);
      torch::Tensor y = upsample_2x_concat(coarse, skip);
      EXPECT_EQ(grad_fn_name(y).find("Upsample2xConcat") != std::string::npos, fused) << grad_fn_name(y);
      (y.to(torch::kFloat) * probe).sum().backward();
      return std::vector<torch::Tensor>{y.detach(), coarse.grad(), skip.grad()};
    };
    const auto fused = run(true), plain = run(false);
    for (size_t i = 0; i < fused.size(); ++i) ASSERT_EQ(fused[i].sizes(), plain[i].sizes()) << "tensor " << i;
    EXPECT_TRUE(torch::equal(fused[0], plain[0]));
    EXPECT_TRUE(torch::equal(fused[2], plain[2]));
    if (dtype == torch::kFloat) {
      EXPECT_TRUE(torch::equal(fused[1], plain[1]));  // ATen's summation order
    } else {
      // Four bf16 gradients summed in fp32 and rounded once, against ATen rounding after each add.
      EXPECT_LT(max_relative(fused[1], plain[1]), 2e-2);
      const torch::Tensor exact = torch::nn::functional::avg_pool2d(
          (probe.narrow(1, 0, 3).to(dtype).to(torch::kFloat)), torch::nn::functional::AvgPool2dFuncOptions(2)) * 4;
      EXPECT_TRUE(torch::equal(fused[1], exact.to(dtype)));
    }
  }
}

}  // namespace
}  // namespace wxtrain::ops
