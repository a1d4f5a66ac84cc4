// ops/bf16_gemm.h: on a CPU without native bf16, the bf16 mm/addmm/bmm/baddbmm are computed in fp32
// and rounded once; they equal the fp32 product rounded to bf16, agree with ATen's own bf16 kernel to
// bf16 round-off, leave other dtypes alone, and keep a GPU-standing step's fp32 workspace uncounted.
#include <ATen/ops/mm_cpu_dispatch.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/autocast.h"
#include "core/memory_meter.h"
#include "ops/bf16_gemm.h"
#include "ops/conv2d.h"
#include "ops/cpu_fusion.h"

namespace wxtrain::ops {
namespace {

torch::Tensor bf(const torch::Tensor& t) { return t.to(torch::kBFloat16); }
torch::Tensor f32(const torch::Tensor& t) { return t.to(torch::kFloat); }

// Restores the fp32 path whatever a test does.
struct Fp32PathGuard {
  explicit Fp32PathGuard(bool on) { set_bf16_gemm_in_fp32(on); }
  ~Fp32PathGuard() { set_bf16_gemm_in_fp32(true); }
};

TEST(Bf16Gemm, InstalledExactlyWhereOneDnnHasNoBf16) {
  EXPECT_EQ(install_bf16_gemm_in_fp32(), !cpu_bf16_convolution_uses_onednn());
  EXPECT_EQ(bf16_gemm_in_fp32(), !cpu_bf16_convolution_uses_onednn());
}

TEST(Bf16Gemm, EachProductIsTheFp32ProductRoundedOnce) {
  if (!install_bf16_gemm_in_fp32()) GTEST_SKIP() << "oneDNN runs bf16 GEMMs here: ATen's kernels";
  torch::manual_seed(0);
  const torch::Tensor a = bf(torch::randn({37, 64})), b = bf(torch::randn({64, 29})), c = bf(torch::randn({37, 29}));
  const torch::Tensor ba = bf(torch::randn({3, 17, 40})), bb = bf(torch::randn({3, 40, 11}));
  const torch::Tensor bc = bf(torch::randn({3, 17, 11}));
  // Summed in another order than MKL's sgemm, the fp32 reference may round to the neighbouring bf16
  // value: at most one bf16 ulp (2^-8 relative) of the largest entry apart.
  const auto expect_rounded = [](const torch::Tensor& ours, const torch::Tensor& fp32, const char* what) {
    EXPECT_EQ(ours.scalar_type(), torch::kBFloat16) << what;
    const double scale = fp32.abs().max().item<double>();
    EXPECT_LE((f32(ours) - f32(bf(fp32))).abs().max().item<double>(), scale / 256.0) << what;
  };
  expect_rounded(torch::mm(a, b), torch::mm(f32(a), f32(b)), "mm");
  expect_rounded(torch::addmm(c, a, b, 0.5, 2.0), torch::addmm(f32(c), f32(a), f32(b), 0.5, 2.0), "addmm");
  expect_rounded(torch::bmm(ba, bb), torch::bmm(f32(ba), f32(bb)), "bmm");
  expect_rounded(torch::baddbmm(bc, ba, bb, 1.0, 0.25), torch::baddbmm(f32(bc), f32(ba), f32(bb), 1.0, 0.25),
                 "baddbmm");
}

TEST(Bf16Gemm, AutocastLinearMatchesAtenBf16KernelWithGradients) {
  if (!install_bf16_gemm_in_fp32()) GTEST_SKIP() << "oneDNN runs bf16 GEMMs here: ATen's kernels";
  torch::manual_seed(1);
  torch::nn::Linear linear(48, 24);
  const torch::Tensor input = torch::randn({5, 7, 48});
  const auto run = [&](bool fp32_path) {
    const Fp32PathGuard path(fp32_path);
    linear->zero_grad();
    torch::Tensor x = input.clone().requires_grad_(true);
    torch::Tensor y;
    {
      AutocastGuard autocast(torch::kCPU, torch::kBFloat16, true);
      y = torch::matmul(linear->forward(x), linear->weight);  // addmm / mm, then a 3-D matmul
    }
    EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
    f32(y).square().sum().backward();
    return std::vector<torch::Tensor>{f32(y.detach()), x.grad(), linear->weight.grad().clone(),
                                      linear->bias.grad().clone()};
  };
  const auto ours = run(true), aten = run(false);
  const char* names[] = {"output", "input grad", "weight grad", "bias grad"};
  for (size_t i = 0; i < ours.size(); ++i) {
    const double scale = aten[i].abs().max().item<double>();
    EXPECT_LT((ours[i] - aten[i]).abs().max().item<double>(), 0.02 * scale) << names[i];
  }
}

TEST(Bf16Gemm, OtherDtypesAreAtensOwn) {
  install_bf16_gemm_in_fp32();
  torch::manual_seed(2);
  const torch::Tensor a = torch::randn({9, 13}), b = torch::randn({13, 5});
  EXPECT_TRUE(torch::equal(torch::mm(a, b), at::cpu::mm(a, b)));
  const torch::Tensor ad = a.to(torch::kDouble), bd = b.to(torch::kDouble);
  EXPECT_EQ(torch::mm(ad, bd).scalar_type(), torch::kDouble);
}

TEST(Bf16Gemm, GpuStandingStepCountsNoHostWorkspace) {
  if (!install_bf16_gemm_in_fp32()) GTEST_SKIP() << "oneDNN runs bf16 GEMMs here: ATen's kernels";
  MemoryMeter& meter = memory_meter(torch::kCPU);
  const torch::Tensor a = bf(torch::randn({256, 128})), b = bf(torch::randn({128, 192}));
  const int64_t output = 256 * 192 * 2;
  for (const bool fusion : {false, true}) {
    const CpuFusionGuard guard(fusion);
    const PeakScope scope(meter);
    torch::Tensor y = torch::mm(a, b);
    if (!fusion) EXPECT_EQ(scope.peak_increase(), output) << "the bf16 output alone";
    else EXPECT_GT(scope.peak_increase(), output) << "a CPU run counts its fp32 copies";
  }
}

}  // namespace
}  // namespace wxtrain::ops
