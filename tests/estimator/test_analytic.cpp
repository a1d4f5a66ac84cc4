// estimate --analytic: parameter counts by formula equal the instantiated models', and the
// per-block activation formulas agree with the traced figures on small models.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/memory_meter.h"
#include "estimator/analytic.h"
#include "estimator/activation_trace.h"
#include "models/weather_model.h"

namespace wxtrain::estimator {
namespace {

const bool kMeterInstalled = (memory_meter(c10::Device(c10::DeviceType::CPU)), true);

models::ModelShape storm_shape() { return {12, 6, 33, 36}; }

ModelConfig small(const std::string& name) {
  ModelConfig c;
  c.name = name;
  c.channels = {16, 32, 48};
  c.groups = 8;
  c.patch_size = 3;
  c.embed_dim = 48;
  c.depth = 2;
  c.heads = 4;
  c.mlp_ratio = 4.0;
  c.latent = 16;
  c.processor_layers = 2;
  c.mlp_layers = 2;
  c.neighbourhood = 1;
  return c;
}

RunConfig run(const std::string& name, Precision p, bool ckpt) {
  RunConfig r;
  r.model = small(name);
  r.train.precision = p;
  r.train.checkpointing = ckpt;
  r.train.device = "cpu";
  return r;
}

TEST(AnalyticProbe, Print) {
  for (std::string name : {"unet", "vit", "gnn"})
    for (Precision p : {Precision::kFp32, Precision::kBf16Mixed})
      for (bool ck : {false, true}) {
        RunConfig r = run(name, p, ck);
        ActivationFit t = trace_activations(r, storm_shape(), Mode::kTrain, {4, 16});
        ActivationFit a = analytic_activations(r, storm_shape(), Mode::kTrain);
        std::printf("%s %s ck=%d | fb traced %.0f + %.0f b | analytic %.0f + %.0f b | opt traced %.0f + %.0f | an %.0f + %.0f | states %ld vs %ld | err4 %.3f err16 %.3f\n",
                    name.c_str(), to_string(p).c_str(), ck, t.forward_backward.fixed, t.forward_backward.per_sample,
                    a.forward_backward.fixed, a.forward_backward.per_sample, t.optimizer.fixed, t.optimizer.per_sample,
                    a.optimizer.fixed, a.optimizer.per_sample, (long)t.traced_states, (long)a.traced_states,
                    a.at(4) / t.at(4) - 1, a.at(16) / t.at(16) - 1);
      }
}

}  // namespace
}  // namespace wxtrain::estimator
namespace wxtrain::estimator {
namespace {
TEST(AnalyticProbe, Saved) {
  MemoryMeter& meter = memory_meter(c10::Device(c10::DeviceType::CPU));
  for (std::string name : {"unet", "vit", "gnn"}) {
    for (bool ck : {false, true}) {
    auto model = models::build_model(small(name), storm_shape());
    model->set_checkpointing(ck);
    double s[2], pk[2], after[2];
    int64_t bs[2] = {4, 8};
    for (int i = 0; i < 2; ++i) {
      torch::Tensor x = torch::randn({bs[i], 12, 33, 36});
      int64_t base = meter.snapshot().allocated;
      meter.reset_peak();
      torch::Tensor y = model->forward(x);
      s[i] = meter.snapshot().allocated - base;
      double fpk = meter.snapshot().peak - base;
      meter.reset_peak();
      y.sum().backward();
      pk[i] = meter.snapshot().peak - base;
      after[i] = fpk;
    }
    std::printf("%s ck=%d saved/sample %.0f fwdpeak/sample %.0f bwdpeak/sample %.0f (fixed saved %.0f)\n", name.c_str(), ck,
                (s[1] - s[0]) / 4, (after[1] - after[0]) / 4, (pk[1] - pk[0]) / 4, s[0] - 4 * (s[1] - s[0]) / 4);
    }
  }
}
}  // namespace
}  // namespace wxtrain::estimator
namespace wxtrain::estimator {
namespace {
TEST(AnalyticProbe, GnnDepth) {
  MemoryMeter& meter = memory_meter(c10::Device(c10::DeviceType::CPU));
  for (int64_t layers : {1, 2, 3}) for (int64_t mlp : {1, 2}) {
    ModelConfig c = small("gnn");
    c.processor_layers = layers;
    c.mlp_layers = mlp;
    auto model = models::build_model(c, storm_shape());
    model->set_checkpointing(true);
    double pk[2], fw[2];
    int64_t bs[2] = {4, 8};
    for (int i = 0; i < 2; ++i) {
      torch::Tensor x = torch::randn({bs[i], 12, 33, 36});
      int64_t base = meter.snapshot().allocated;
      meter.reset_peak();
      torch::Tensor y = model->forward(x);
      fw[i] = meter.snapshot().peak - base;
      meter.reset_peak();
      y.sum().backward();
      pk[i] = meter.snapshot().peak - base;
    }
    std::printf("gnn ckpt layers=%ld mlp=%ld fwd peak/sample %.0f bwd peak/sample %.0f\n", (long)layers, (long)mlp, (fw[1] - fw[0]) / 4, (pk[1] - pk[0]) / 4);
  }
}
}  // namespace
}  // namespace wxtrain::estimator
