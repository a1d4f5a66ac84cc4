#include "estimator/activation_trace.h"

#include <algorithm>

#include "core/autocast.h"
#include "core/memory_meter.h"
#include "distributed/communicator.h"
#include "trainer/training_step.h"

namespace wxtrain::estimator {

RunConfig trace_config(const RunConfig& config) {
  RunConfig c = config;
  if (c.train.precision == Precision::kFp16Mixed) c.train.precision = Precision::kBf16Mixed;
  c.train.accumulation = std::min<int64_t>(c.train.accumulation, 2);
  c.distributed.zero_stage = 0;
  c.train.device = "cpu";
  c.train.freeze.clear();  // frozen parameters need no gradients: traced as trainable (safe side)
  return c;
}

StepMemory measure_step(const RunConfig& config, const models::ModelShape& shape, int64_t batch, Mode mode,
                        int64_t steps) {
  const torch::Device cpu(torch::kCPU);
  MemoryMeter& meter = memory_meter(cpu);
  const RunConfig c = trace_config(config);
  StepMemory m;
  m.batch = batch;
  const int64_t base = meter.snapshot().allocated;

  if (mode == Mode::kInference) {
    torch::NoGradGuard no_grad;
    torch::manual_seed(c.train.seed);
    auto model = models::build_model(c.model, shape);
    model->eval();
    if (c.train.precision == Precision::kBf16) model->to(torch::kBFloat16);
    for (const auto& p : model->parameters()) m.num_params += p.numel();
    m.states = meter.snapshot().allocated - base;
    const bool autocast_on = c.train.precision == Precision::kBf16Mixed;
    auto dtype = c.train.precision == Precision::kBf16 ? torch::kBFloat16 : torch::kFloat32;
    for (int64_t i = 0; i < steps; ++i) {
      torch::Tensor x = torch::randn({batch, shape.in_channels, shape.lat, shape.lon}).to(dtype);
      meter.reset_peak();
      AutocastGuard guard(torch::kCPU, torch::kBFloat16, autocast_on);
      torch::Tensor y = model->forward(x);
      m.peak_forward_backward = std::max(m.peak_forward_backward, meter.snapshot().peak - base);
    }
    return m;
  }

  auto comm = distributed::make_communicator(distributed::World{}, c.distributed, cpu);
  auto state = trainer::build_training_state(c, shape, comm, cpu);
  for (const auto& p : state->model->parameters()) m.num_params += p.numel();
  m.states = meter.snapshot().allocated - base;
  auto micro = trainer::synthetic_micro_batches(c, shape, batch, c.train.accumulation, cpu);
  trainer::TrainingStep step(*state, &meter);
  for (int64_t i = 0; i < steps; ++i) {
    trainer::StepResult r = step.run(micro, /*lr=*/1e-6);
    m.peak_forward_backward = std::max(m.peak_forward_backward, r.peak_forward_backward - base);
    m.peak_optimizer = std::max(m.peak_optimizer, r.peak_optimizer - base);
  }
  return m;
}

double ActivationFit::at(double batch) const {
  return std::max(forward_backward.at(batch), optimizer.at(batch));
}

ActivationFit trace_activations(const RunConfig& config, const models::ModelShape& shape, Mode mode,
                                int64_t b1, int64_t b2) {
  const StepMemory m1 = measure_step(config, shape, b1, mode);
  const StepMemory m2 = measure_step(config, shape, b2, mode);
  auto fit = [&](double y1, double y2) {
    Line l;
    l.per_sample = std::max(0.0, (y2 - y1) / static_cast<double>(b2 - b1));
    l.fixed = y1 - l.per_sample * static_cast<double>(b1);
    return l;
  };
  ActivationFit f;
  f.traced_states = m1.states;
  f.num_params = m1.num_params;
  f.forward_backward = fit(static_cast<double>(m1.peak_forward_backward - m1.states),
                           static_cast<double>(m2.peak_forward_backward - m2.states));
  f.optimizer = fit(static_cast<double>(m1.peak_optimizer - m1.states),
                    static_cast<double>(m2.peak_optimizer - m2.states));
  return f;
}

}  // namespace wxtrain::estimator
