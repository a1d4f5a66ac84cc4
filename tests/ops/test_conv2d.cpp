// ops::conv2d (ops/conv2d.h): the bf16 convolution computed in fp32 on CPUs whose oneDNN has no
// bf16 gives what ATen's bf16 convolution gives, to bf16 round-off, and keeps the GPU-standing
// step's host-only workspace out of the counting allocator.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/autocast.h"
#include "core/memory_meter.h"
#include "ops/conv2d.h"
#include "ops/cpu_fusion.h"

namespace wxtrain::ops {
namespace {

struct Result {
  torch::Tensor y, gx, gw, gb;
};

Result run(torch::nn::Conv2d& conv, const torch::Tensor& input, bool through_ops) {
  torch::Tensor x = input.clone().requires_grad_(true);
  conv->zero_grad();
  torch::Tensor y;
  {
    AutocastGuard autocast(torch::kCPU, torch::kBFloat16, true);
    y = through_ops ? conv2d(conv, x) : conv->forward(x);
  }
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  y.to(torch::kFloat).square().sum().backward();
  return {y.detach().to(torch::kFloat), x.grad(), conv->weight.grad().clone(),
          conv->bias.defined() ? conv->bias.grad().clone() : torch::Tensor()};
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, const char* what) {
  // bf16 keeps 8 significant bits: the two paths round at different points.
  const double scale = b.abs().max().item<double>();
  EXPECT_LT((a - b).abs().max().item<double>(), 0.03 * scale) << what;
}

TEST(Conv2d, Bf16InFp32MatchesAtenToBf16RoundOff) {
  torch::manual_seed(0);
  for (const bool bias : {false, true}) {
    torch::nn::Conv2d conv(torch::nn::Conv2dOptions(6, 8, 3).padding(1).bias(bias));
    const torch::Tensor input = torch::randn({3, 6, 10, 12});
    {
      AutocastGuard autocast(torch::kCPU, torch::kBFloat16, true);
      EXPECT_EQ(conv2d_computes_bf16_in_fp32(conv, input), !cpu_bf16_convolution_uses_onednn());
    }
    const Result ours = run(conv, input, true), aten = run(conv, input, false);
    expect_close(ours.y, aten.y, "output");
    expect_close(ours.gx, aten.gx, "input grad");
    expect_close(ours.gw, aten.gw, "weight grad");
    if (bias) expect_close(ours.gb, aten.gb, "bias grad");
    EXPECT_EQ(ours.gw.scalar_type(), torch::kFloat);  // through autocast's cast, as with ATen's
  }
}

TEST(Conv2d, Fp32IsLeftToAten) {
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(4, 4, 3).padding(1).bias(false));
  EXPECT_FALSE(conv2d_computes_bf16_in_fp32(conv, torch::randn({2, 4, 8, 8})));
}

TEST(Conv2d, GpuStandingStepCountsNoHostWorkspace) {
  if (cpu_bf16_convolution_uses_onednn()) GTEST_SKIP() << "oneDNN runs bf16 convolutions here: ATen's path";
  MemoryMeter& meter = memory_meter(torch::kCPU);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(16, 16, 3).padding(1).bias(false));
  const torch::Tensor x = torch::randn({4, 16, 32, 32}).to(torch::kBFloat16);
  const torch::Tensor w = conv->weight.detach().to(torch::kBFloat16);
  conv->weight.set_data(w);
  const int64_t output = 4 * 16 * 32 * 32 * 2;
  for (const bool fusion : {false, true}) {
    const CpuFusionGuard guard(fusion);
    torch::NoGradGuard no_grad;
    const PeakScope scope(meter);
    torch::Tensor y = conv2d(conv, x);
    if (!fusion) EXPECT_EQ(scope.peak_increase(), output) << "the bf16 output alone";
    else EXPECT_GT(scope.peak_increase(), output) << "a CPU run counts its fp32 copies";
  }
}

}  // namespace
}  // namespace wxtrain::ops
