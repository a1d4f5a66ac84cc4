#include "estimator/activation_trace.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "core/autocast.h"
#include "core/memory_meter.h"
#include "distributed/communicator.h"
#include "ops/group_norm_silu.h"
#include "trainer/training_step.h"

namespace wxtrain::estimator {

RunConfig trace_config(const RunConfig& config) {
  RunConfig c = config;
  if (c.train.precision == Precision::kFp16Mixed) c.train.precision = Precision::kBf16Mixed;
  c.train.accumulation = std::min<int64_t>(c.train.accumulation, 2);
  c.distributed.zero_stage = 0;
  c.distributed.backend = "auto";  // a run file written for NCCL still traces on a CPU-only laptop
  c.train.device = "cpu";
  c.train.freeze.clear();  // frozen parameters need no gradients: traced as trainable (safe side)
  return c;
}

bool uses_cpu_fusion(const RunConfig& config) { return config.train.device == "cpu"; }

BlockParams block_params(const models::WeatherModelImpl& model) {
  // As ZeRO-3 shards them (distributed/sharded_parameters.h): a parameter of no block, or of two,
  // stays whole.
  const std::vector<std::vector<torch::Tensor>> blocks = model.block_parameters();
  std::map<const void*, int> uses;
  for (const auto& block : blocks)
    for (const auto& p : block) ++uses[p.unsafeGetTensorImpl()];
  BlockParams out;
  for (const auto& p : model.parameters()) {
    auto it = uses.find(p.unsafeGetTensorImpl());
    if (it == uses.end() || it->second > 1) out.outside += p.numel();
  }
  for (const auto& block : blocks) {
    int64_t n = 0;
    for (const auto& p : block) n += uses[p.unsafeGetTensorImpl()] == 1 ? p.numel() : 0;
    out.largest = std::max(out.largest, n);
  }
  return out;
}

StepMemory measure_step(const RunConfig& config, const models::ModelShape& shape, int64_t batch, Mode mode,
                        int64_t steps) {
  const torch::Device cpu(torch::kCPU);
  const ops::CpuFusionGuard fusion(uses_cpu_fusion(config));
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
  m.blocks = block_params(*state->model);
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
  double peak = std::max(forward_backward.at(batch), optimizer.at(batch));
  for (const Line& l : small_batch) peak = std::max(peak, l.at(batch));
  return peak;
}

double ActivationFit::per_sample() const { return std::max(forward_backward.per_sample, optimizer.per_sample); }

ActivationFit trace_activations(const RunConfig& config, const models::ModelShape& shape, Mode mode,
                                const std::vector<int64_t>& batches) {
  if (batches.size() < 2) throw std::invalid_argument("trace_activations needs at least two batch sizes");
  std::vector<StepMemory> traces;
  for (int64_t b : batches) traces.push_back(measure_step(config, shape, b, mode));
  ActivationFit f;
  f.traced_states = traces.front().states;
  // A model-parallel run's step is rank 0's of its group (trainer/training_step.cpp BandGroup).
  if (mode == Mode::kTrain) f.ranks = config.distributed.model_parallel;
  f.num_params = traces.front().num_params;
  f.blocks = traces.front().blocks;
  for (size_t i = 0; i + 1 < traces.size(); ++i) {
    const StepMemory& a = traces[i];
    const StepMemory& b = traces[i + 1];
    auto fit = [&](int64_t ya, int64_t yb) {
      Line l;
      l.per_sample = std::max(0.0, static_cast<double>(yb - ya) / static_cast<double>(b.batch - a.batch));
      l.fixed = static_cast<double>(ya) - l.per_sample * static_cast<double>(a.batch);
      return l;
    };
    const Line fb = fit(a.peak_forward_backward - a.states, b.peak_forward_backward - b.states);
    const Line opt = fit(a.peak_optimizer - a.states, b.peak_optimizer - b.states);
    if (i + 2 == traces.size()) {
      f.forward_backward = fb;
      f.optimizer = opt;
    } else {
      f.small_batch.push_back(fb);
      f.small_batch.push_back(opt);
    }
  }
  return f;
}

}  // namespace wxtrain::estimator
