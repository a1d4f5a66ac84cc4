// ops/checkpoint: a checkpointed block gives the gradients of the plain block, with random ops,
// several outputs, inputs that need no gradient, and under autocast.
#include <gtest/gtest.h>

#include "core/autocast.h"
#include "ops/checkpoint.h"

namespace wxtrain::ops {
namespace {

struct Net {
  torch::nn::Linear a{nullptr}, b{nullptr};
  Net() {
    torch::manual_seed(3);
    a = torch::nn::Linear(8, 16);
    b = torch::nn::Linear(16, 8);
  }
  std::vector<torch::Tensor> params() const {
    auto p = a->parameters();
    for (const auto& t : b->parameters()) p.push_back(t);
    return p;
  }
  void zero_grad() {
    for (auto& p : params()) p.mutable_grad() = torch::Tensor();
  }
};

// Two outputs, dropout in between: the recompute must replay the same mask.
BlockFn make_block(const Net& net) {
  auto a = net.a.ptr();
  auto b = net.b.ptr();
  return [a, b](const std::vector<torch::Tensor>& in) {
    torch::Tensor hidden = torch::dropout(torch::silu(a->forward(in[0])), 0.5, /*train=*/true);
    return std::vector<torch::Tensor>{b->forward(hidden) + in[1], hidden.sum(-1)};
  };
}

std::vector<torch::Tensor> grads(Net& net, bool checkpointed, bool input_requires_grad, bool autocast) {
  net.zero_grad();
  torch::manual_seed(11);
  torch::Tensor x = torch::randn({4, 8}).requires_grad_(input_requires_grad);
  torch::Tensor skip = torch::randn({4, 8}).requires_grad_(true);
  {
    // Backward runs inside the autocast scope, as a training step may do it.
    AutocastGuard guard(c10::DeviceType::CPU, torch::kBFloat16, autocast);
    const BlockFn fn = make_block(net);
    torch::manual_seed(5);
    std::vector<torch::Tensor> out = checkpointed ? checkpoint(fn, {x, skip}, net.params()) : fn({x, skip});
    (out[0].to(torch::kFloat).square().sum() + out[1].to(torch::kFloat).sum()).backward();
  }
  std::vector<torch::Tensor> g;
  for (const auto& p : net.params()) g.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  g.push_back(skip.grad().clone());
  if (input_requires_grad) g.push_back(x.grad().clone());
  return g;
}

void expect_same(const std::vector<torch::Tensor>& plain, const std::vector<torch::Tensor>& recomputed,
                 double tol) {
  ASSERT_EQ(plain.size(), recomputed.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(plain[i].defined()) << i;
    ASSERT_TRUE(recomputed[i].defined()) << "gradient " << i << " missing after the recompute";
    EXPECT_TRUE(torch::allclose(plain[i], recomputed[i], tol, tol))
        << "gradient " << i << ": max difference " << (plain[i] - recomputed[i]).abs().max().item<double>();
  }
}

TEST(Checkpoint, SameGradientsWithDropoutAndTwoOutputs) {
  Net net;
  expect_same(grads(net, false, true, false), grads(net, true, true, false), 1e-6);
}

TEST(Checkpoint, InputWithoutGradientStillTrainsTheParameters) {
  Net net;
  expect_same(grads(net, false, false, false), grads(net, true, false, false), 1e-6);
}

TEST(Checkpoint, SameGradientsUnderAutocastWithBackwardInsideTheScope) {
  // The forward runs without grad mode; a bf16 copy of a weight cached there has no history, and a
  // recompute that reused it would give the parameters no gradient.
  Net net;
  expect_same(grads(net, false, true, true), grads(net, true, true, true), 1e-3);
}

TEST(Checkpoint, AutocastStateIsRestoredAfterBackward) {
  Net net;
  grads(net, true, true, true);
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  EXPECT_TRUE(at::autocast::is_autocast_cache_enabled());
}

TEST(Checkpoint, RandomStreamContinuesAsWithoutCheckpointing) {
  // The replay restores the forward's RNG state for the recompute only.
  Net net;
  grads(net, false, true, false);
  const torch::Tensor after_plain = torch::randn({4});
  grads(net, true, true, false);
  const torch::Tensor after_checkpointed = torch::randn({4});
  EXPECT_TRUE(torch::equal(after_plain, after_checkpointed));
}

}  // namespace
}  // namespace wxtrain::ops
