// The GPU check's measurements (scripts/gpu_check.sh runs them and writes the report; docs/gpu_check.md):
// what the estimator predicts and what the training step and tune-batch's probes really take on
// cuda:0. Every mode prints one JSON object (or key=value line) per case on stdout.
//
//   gpu_check device
//       the device, its memory, the CUDA runtime and driver, as JSON
//   gpu_check accuracy --config FILE [--precision fp32] [--checkpointing off] [--batches 1,2,4,8,16,32,64]
//                      [--steps 3]
//       per batch: the estimator's per-rank total for this device (GPU overhead included, as
//       `wxtrain estimate` prints it) against what real training steps hold: the caching allocator's
//       peak reserved bytes plus the CUDA context (cudaMemGetInfo's total - free, less reserved), with
//       the peak allocated bytes beside it. Each batch starts from an emptied cache.
//   gpu_check fit --config FILE [--precision P] [--checkpointing off] [--gpus A10G,L4,A100-40,T4]
//                 [--steps 2] [--max-batch 65536]
//       per catalog GPU smaller than this one: the estimate's largest batch for it (`wxtrain estimate
//       --gpu`) against the largest batch that trains with the caching allocator capped, through
//       MemoryMeter::set_limit (the per-process memory fraction), to that GPU's memory less the CUDA
//       context measured here (a context the cap does not cover), found exactly by tune-batch's
//       search. A predicted batch above the real one is a predicted fit that runs out of memory.
//   gpu_check throughput --config FILE --precision P [--batch 8] [--warmup 3] [--steps 20] [--reps 5]
//       samples/s of the real TrainingStep on cuda:0 (bench/peer/train_peer.py --device cuda is the peer)
//   gpu_check preset --preset NAME [--mode train|inference] [--precision P] [--checkpointing off]
//                    [--at 1,sure,max] [--set key=value]... [--steps 4] [--warmup 1]
//       a published model at its real grid ([model] preset, docs/estimator.md "Presets"), one JSON
//       line per batch as soon as it is measured: the estimate's per-rank total for this GPU (what
//       `wxtrain estimate` prints: the analytic formulas where a trace would be too large) against
//       the caching allocator's peak allocated and reserved bytes and the CUDA context of real
//       steps (training steps, or forward passes under no_grad for --mode inference), and the
//       samples/s of the steps after the first `warmup`. --at takes batch sizes and "sure" / "max":
//       the largest batch the estimate is sure of / allows on this GPU. --set changes the run
//       (data.rollout_steps=4; the CPU plumbing test shrinks the model with it).
//   gpu_check describe --config FILE | --preset NAME [--set key=value]...
//       what the peer needs to build the same model (as train_throughput --describe)
//
// --gpus also takes sizes ("12GiB") for caps that are no catalog GPU. --device cpu runs every mode
// on the CPU's counting allocator instead (no context, reserved = allocated + the CPU cache): a test
// of the check's plumbing on a machine without a GPU, whose numbers mean nothing.
//
// The run file's train.device is set to "cuda" (the estimate is then for a GPU: the CPU trace runs
// without wxtrain's fused CPU kernels, as the GPU step does). The storm configs read their NetCDF
// files for the grid and latitudes; the batches themselves are synthetic.
//
// Exit codes: 0 measured (the report judges the numbers), 1 an error, 2 a usage error, 3 no CUDA
// device: no GPU, no driver, or a build against a LibTorch without CUDA (message "no CUDA device").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <torch/version.h>

#include "autotune/batch_search.h"
#include "core/autocast.h"
#include "core/config.h"
#include "core/model_presets.h"
#include "core/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/memory_meter.h"
#include "core/units.h"
#include "data/dataset.h"
#include "distributed/communicator.h"
#include "distributed/world.h"
#include "estimator/estimate.h"
#include "trainer/training_step.h"
#include "npy_writer.h"
#include "step_bench_args.h"

namespace {

using namespace wxtrain;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

// cuda:0; the CPU only for --device cpu (the plumbing test).
torch::Device g_device(torch::kCUDA, 0);
bool on_cpu() { return g_device.is_cpu(); }

// ---- the device's figures: cuda:0 through core/cuda/cuda_backend.h; --device cpu (the plumbing
// test) takes the counting allocator's in their place.

cuda::DeviceMemory mem_get_info() {
  if (!on_cpu()) return cuda::memory_info(0);
  MemoryMeter& meter = memory_meter(torch::Device(torch::kCPU));
  return {meter.capacity() - meter.snapshot().reserved, meter.capacity()};
}

// The caching allocator's reserved peak (the CPU meter keeps no reserved peak: its current value).
int64_t peak_reserved() { return on_cpu() ? memory_meter(g_device).snapshot().reserved : cuda::peak_reserved(0); }

void synchronize() {
  if (!on_cpu()) cuda::synchronize(0);
}

json versions() {
  if (on_cpu()) return json::object();
  const cuda::DeviceProperties p = cuda::properties(0);
  return {{"cuda_runtime", p.runtime_version}, {"cuda_driver", p.driver_version},
          {"capability", std::to_string(p.compute_capability / 10) + "." + std::to_string(p.compute_capability % 10)},
          {"multiprocessors", p.multiprocessors}};
}

// ---- arguments

struct Args {
  std::string mode;
  std::string config;
  std::string precision = "fp32";
  bool checkpointing = false;
  std::vector<int64_t> batches = {1, 2, 4, 8, 16, 32, 64};
  std::vector<std::string> gpus = {"A10G", "L4", "A100-40", "T4"};
  int64_t batch = 8;
  int warmup = -1;  // per mode: throughput 3, preset 1
  int steps = -1;  // per mode: accuracy 3, fit 2, throughput 20
  int reps = 5;
  int64_t max_batch = 65536;
  bool cpu = false;  // --device cpu
  std::string buffers;  // describe: the model's buffers as .npy files in this directory
  std::string preset;   // preset, describe: a published model instead of --config
  std::string run_mode = "train";          // preset: train | inference
  std::vector<std::string> at = {"1"};     // preset: batch sizes, "sure", "max"
  std::vector<std::string> overrides;      // preset, describe: --set key=value
};

const char* kUsage =
    "gpu_check device\n"
    "       gpu_check accuracy --config FILE [--precision fp32|bf16-mixed] [--checkpointing on|off] [--batches 1,2,4]"
    " [--steps N]\n"
    "       gpu_check fit --config FILE [--precision P] [--checkpointing on|off] [--gpus A10G,L4,A100-40,T4]"
    " [--steps N] [--max-batch N]\n"
    "       gpu_check throughput --config FILE --precision P [--batch N] [--warmup N] [--steps N] [--reps N]\n"
    "       gpu_check preset --preset NAME [--mode train|inference] [--precision P] [--checkpointing on|off]"
    " [--at 1,sure,max] [--set key=value]... [--steps N] [--warmup N]\n"
    "       gpu_check describe --config FILE | --preset NAME [--set key=value]... [--buffers DIR]\n"
    "       (every mode: [--device cuda|cpu]; cpu tests the plumbing only)";

template <typename T>
std::vector<T> split(const std::string& text, T (*convert)(const std::string&)) {
  std::vector<T> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(convert(item));
  return out;
}

Args parse_args(int argc, char** argv) {
  Args a;
  if (argc < 2) bench::bench_usage(kUsage, "a mode is required");
  a.mode = argv[1];
  if (a.mode == "-h" || a.mode == "--help") {
    std::printf("usage: %s\n", kUsage);
    std::exit(0);
  }
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) bench::bench_usage(kUsage, arg + " needs a value");
      return argv[++i];
    };
    try {
      if (arg == "--config") a.config = value();
      else if (arg == "--precision") a.precision = value();
      else if (arg == "--checkpointing") {
        const std::string v = value();
        if (v != "on" && v != "off") bench::bench_usage(kUsage, "--checkpointing on|off");
        a.checkpointing = v == "on";
      } else if (arg == "--batches") a.batches = split<int64_t>(value(), [](const std::string& s) { return static_cast<int64_t>(std::stoll(s)); });
      else if (arg == "--gpus") a.gpus = split<std::string>(value(), [](const std::string& s) { return s; });
      else if (arg == "--batch") a.batch = std::stoll(value());
      else if (arg == "--warmup") a.warmup = std::stoi(value());
      else if (arg == "--steps") a.steps = std::stoi(value());
      else if (arg == "--reps") a.reps = std::stoi(value());
      else if (arg == "--max-batch") a.max_batch = std::stoll(value());
      else if (arg == "--buffers") a.buffers = value();
      else if (arg == "--preset") a.preset = value();
      else if (arg == "--mode") a.run_mode = value();
      else if (arg == "--at") a.at = split<std::string>(value(), [](const std::string& s) { return s; });
      else if (arg == "--set") a.overrides.push_back(value());
      else if (arg == "--device") {
        const std::string v = value();
        if (v != "cuda" && v != "cpu") bench::bench_usage(kUsage, "--device cuda|cpu");
        a.cpu = v == "cpu";
      }
      else bench::bench_usage(kUsage, "unknown argument '" + arg + "'");
    } catch (const std::logic_error&) {  // stoi/stoll
      bench::bench_usage(kUsage, arg + ": not a number");
    }
  }
  const std::vector<std::string> modes = {"device", "accuracy", "fit", "throughput", "preset", "describe"};
  if (std::find(modes.begin(), modes.end(), a.mode) == modes.end()) bench::bench_usage(kUsage, "unknown mode '" + a.mode + "'");
  if (a.mode == "preset" && a.preset.empty()) bench::bench_usage(kUsage, "preset: --preset is required");
  if (a.mode != "device" && a.config.empty() && a.preset.empty()) bench::bench_usage(kUsage, "--config is required");
  if (!a.config.empty() && !a.preset.empty()) bench::bench_usage(kUsage, "--config or --preset, not both");
  if (a.run_mode != "train" && a.run_mode != "inference") bench::bench_usage(kUsage, "--mode train|inference");
  for (const std::string& at : a.at) {
    if (at == "sure" || at == "max") continue;
    if (at.empty() || at.find_first_not_of("0123456789") != std::string::npos || std::stoll(at) < 1)
      bench::bench_usage(kUsage, "--at: '" + at + "' is neither a positive batch size nor sure or max");
  }
  if (a.precision != "fp32" && a.precision != "bf16-mixed" && a.precision != "fp16-mixed" && a.precision != "bf16")
    bench::bench_usage(kUsage, "--precision fp32|bf16-mixed|fp16-mixed|bf16");
  if (a.batches.empty() || a.batch < 1 || a.reps < 1 || a.warmup < -1 || a.max_batch < 1)
    bench::bench_usage(kUsage, "batches, reps and --max-batch must be positive");
  for (int64_t b : a.batches)
    if (b < 1) bench::bench_usage(kUsage, "--batches must be positive");
  if (a.steps < 0) a.steps = a.mode == "accuracy" ? 3 : a.mode == "preset" ? 4 : a.mode == "fit" ? 2 : 20;
  if (a.warmup < 0) a.warmup = a.mode == "preset" ? 1 : 3;
  if (a.mode == "preset" && a.warmup >= a.steps) bench::bench_usage(kUsage, "preset: --warmup must be below --steps");
  if (a.steps < 1) bench::bench_usage(kUsage, "--steps must be positive");
  return a;
}

// ---- the run

struct Run {
  RunConfig config;
  models::ModelShape shape;
  std::vector<double> latitudes;
};

Run load_run(const Args& a) {
  Run r;
  std::vector<std::string> overrides = {"train.precision=" + a.precision,
                                        std::string("train.checkpointing=") + (a.checkpointing ? "true" : "false"),
                                        "train.device=cuda"};  // the estimate is for a GPU, even with --device cpu
  overrides.insert(overrides.end(), a.overrides.begin(), a.overrides.end());
  if (!a.preset.empty()) {
    // A published model with its paper's grid and channels: no data to read, the batches are
    // synthetic and the latitudes those of the preset's regular grid (uniform weights: the same memory).
    r.config = parse_config("[model]\npreset = \"" + a.preset + "\"\n", "preset " + a.preset, overrides);
    r.shape = models::model_shape(r.config);
    return r;
  }
  r.config = load_config(a.config, overrides);
  // The grid and latitudes from the data, as in training; fixed in the config from here on so the
  // estimator does not open the files again.
  const data::Dataset dataset(r.config.data);
  data::take_grid(r.config, dataset);  // and its coordinates: graphcast's mesh where the data lies
  r.shape = models::model_shape(r.config);
  if (dataset.has_coordinates()) r.latitudes = dataset.lat();
  return r;
}

json case_json(const Run& run, const Args& a, const char* kind) {
  return {{"kind", kind}, {"config", run.config.path}, {"model", run.config.model.name}, {"precision", a.precision},
          {"checkpointing", a.checkpointing}};
}

// Real training steps at `batch` on cuda:0 from an emptied cache (an optional cap on reserved bytes):
// what the process holds at the end and at its peaks.
struct Measured {
  int64_t batch = 0;
  bool oom = false;
  int64_t baseline_allocated = 0;  // allocated before (the cuBLAS workspaces of earlier steps)
  int64_t peak_allocated = 0;
  int64_t peak_reserved = 0;
  int64_t context = 0;             // device memory in use beyond the allocator's reserve: context, kernels, handles
  int64_t total() const { return peak_reserved + context; }
  double loss = 0;
  double seconds = 0;
};

Measured measure_steps(const Run& run, int64_t batch, int steps, int64_t cap = 0) {
  MemoryMeter& meter = memory_meter(g_device);
  meter.release_cached();
  Measured m;
  m.batch = batch;
  m.baseline_allocated = meter.snapshot().allocated;
  const auto t0 = Clock::now();
  meter.set_limit(cap);
  meter.reset_peak();
  try {
    auto comm = distributed::make_communicator(distributed::World{}, run.config.distributed, g_device);
    auto state = trainer::build_training_state(run.config, run.shape, comm, g_device, run.latitudes);
    auto micro = trainer::synthetic_micro_batches(run.config, run.shape, batch, run.config.train.accumulation, g_device);
    trainer::TrainingStep step(*state);
    for (int i = 0; i < steps; ++i) m.loss = step.run(micro, run.config.train.lr).loss;
    synchronize();
    const MemorySnapshot s = meter.snapshot();
    const cuda::DeviceMemory d = mem_get_info();
    m.context = (d.total - d.free) - s.reserved;  // while everything is still held
  } catch (const c10::OutOfMemoryError&) {
    m.oom = true;
  }
  m.peak_allocated = meter.snapshot().peak;
  m.peak_reserved = peak_reserved();
  meter.set_limit(0);
  meter.release_cached();
  m.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return m;
}

// This GPU as the estimator describes one: cudaMemGetInfo's total and the compute capability (which
// picks the per-architecture context and cuBLAS workspace figures).
estimator::GpuSpec this_gpu() {
  if (on_cpu()) return {"device", "cpu (plumbing test)", mem_get_info().total, false, 0};
  const cuda::DeviceProperties p = cuda::properties(0);
  return {"device", p.name, mem_get_info().total, false, p.compute_capability};
}

json breakdown_json(const estimator::Estimate& e, const estimator::Breakdown& b, const estimator::GpuSpec& gpu) {
  const estimator::GpuOverhead o = estimator::gpu_overhead(b.allocated(), e.libraries, gpu);
  return {{"params", b.params},
          {"grads", b.grads},
          {"optimizer", b.optimizer},
          {"activations", b.activations},
          {"allocated", b.allocated()},
          {"overhead", {{"cuda_context", o.cuda_context},
                        {"cublas_workspace", o.cublas_workspace},
                        {"cublaslt_workspace", o.cublaslt_workspace},
                        {"allocator_reserve", o.allocator_reserve},
                        {"total", b.overhead}}},
          {"total", b.total()}};
}

int run_device() {
  const cuda::DeviceMemory d = mem_get_info();
  json j = {{"kind", "device"}, {"name", this_gpu().label}, {"total_bytes", d.total}, {"free_bytes", d.free},
            {"torch", TORCH_VERSION}, {"cpu_threads", at::get_num_threads()}};
  j.update(versions());
  // The catalog entry the estimator would use for this GPU, if any.
  for (const auto& g : estimator::gpu_catalog())
    if (!g.rocm && std::llabs(g.memory_bytes - d.total) < 512LL * 1024 * 1024) j["catalog_match"] = g.name;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

int run_accuracy(const Args& a) {
  const Run run = load_run(a);
  const estimator::Estimate e = estimator::estimate(run.config, run.shape, {});
  const estimator::GpuSpec gpu = this_gpu();
  std::vector<int64_t> batches = a.batches;
  std::sort(batches.begin(), batches.end());
  for (int64_t b : batches) {
    const Measured m = measure_steps(run, b, a.steps);
    const estimator::Breakdown p = e.breakdown(b, gpu);
    json j = case_json(run, a, "accuracy");
    j["batch"] = b;
    j["gpu"] = gpu.label;
    j["estimate_method"] = e.method;
    j["predicted"] = breakdown_json(e, p, gpu);
    j["measured"] = {{"oom", m.oom},
                     {"baseline_allocated", m.baseline_allocated},
                     {"peak_allocated", m.peak_allocated},
                     {"peak_reserved", m.peak_reserved},
                     {"context", m.context},
                     {"total", m.total()},
                     {"loss", m.loss},
                     {"seconds", m.seconds}};
    if (!m.oom) {
      j["error_total"] = (p.total() - static_cast<double>(m.total())) / static_cast<double>(m.total());
      j["error_allocated"] = (p.allocated() - static_cast<double>(m.peak_allocated)) / static_cast<double>(m.peak_allocated);
    }
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

int run_fit(const Args& a) {
  const Run run = load_run(a);
  const estimator::Estimate e = estimator::estimate(run.config, run.shape, {});
  const int64_t device_total = mem_get_info().total;
  struct Target {
    estimator::GpuSpec gpu;
    int64_t predicted = 0;
    int64_t sure = 0;  // the largest batch the estimate is sure of (error_band.h)
  };
  std::vector<Target> targets;
  for (const auto& name : a.gpus) {
    auto g = estimator::find_gpu(name);
    if (!g) {  // a size: a cap that is no catalog GPU (the architecture-independent overhead figures)
      const auto bytes = parse_bytes(name);
      if (!bytes || *bytes <= 0)
        throw Error("--gpus: '" + name + "' is neither a GPU (" + estimator::gpu_names() + ") nor a size such as 12GiB");
      g = estimator::GpuSpec{name, name, *bytes, false, 0};
    }
    json j = case_json(run, a, "fit");
    j["gpu"] = g->name;
    j["gpu_memory"] = g->memory_bytes;
    if (g->rocm || g->memory_bytes >= device_total) {
      j["skipped"] = g->rocm ? "an AMD GPU" : "not smaller than this device";
      std::printf("%s\n", j.dump().c_str());
      continue;
    }
    // The capped steps run on this GPU, with its context and its cuBLAS workspaces: the estimate to
    // compare is for that memory on this GPU's architecture (the first check took the smaller GPU's
    // own figures, up to 200 MiB less context than was measured).
    estimator::GpuSpec capped = *g;
    capped.compute_capability = this_gpu().compute_capability;
    targets.push_back({capped, e.max_batch(capped.memory_bytes, capped), e.sure_max_batch(capped.memory_bytes, capped)});
  }
  if (targets.empty()) return 0;

  // The context (and the kernels of this model) first, uncapped, at the largest predicted batch that
  // fits this device: the cap below covers only the caching allocator.
  int64_t warm = 1;
  for (const auto& t : targets) warm = std::max(warm, std::min(t.predicted, a.max_batch));
  Measured w = measure_steps(run, warm, 1);
  while (w.oom && warm > 1) w = measure_steps(run, warm /= 2, 1);
  if (w.oom) throw Error("even batch 1 runs out of memory on the whole device");
  const int64_t context = w.context;

  for (const auto& t : targets) {
    const auto t0 = Clock::now();
    const int64_t cap = t.gpu.memory_bytes - context;
    autotune::SearchOptions so;
    so.target = cap;  // a probe that does not run out of memory passes: allocated <= reserved <= cap
    so.budget = cap;
    so.max_batch = a.max_batch;
    so.start = std::clamp<int64_t>(t.predicted, 1, a.max_batch);
    so.slope = e.activations.per_sample();
    const autotune::ProbeFn probe = [&](int64_t batch) {
      const Measured m = measure_steps(run, batch, a.steps, cap);
      autotune::Probe p;
      p.batch = batch;
      p.oom = m.oom;
      p.passed = !m.oom;
      p.peak = m.peak_allocated;
      p.seconds = m.seconds;
      p.leaked = 0;
      return p;
    };
    const autotune::SearchResult found = autotune::secant_search(so, probe);
    json j = case_json(run, a, "fit");
    j["gpu"] = t.gpu.name;
    j["gpu_memory"] = t.gpu.memory_bytes;
    j["context"] = context;
    j["cap"] = cap;
    j["predicted_max"] = t.predicted;
    j["sure_max"] = t.sure;
    j["predicted_total"] = e.breakdown(std::max<int64_t>(t.predicted, 1), t.gpu).total();
    j["real_max"] = found.batch;
    j["max_batch_bound"] = a.max_batch;
    j["probes"] = json::array();
    std::optional<bool> predicted_oom;
    for (const auto& p : found.probes) {
      j["probes"].push_back({{"batch", p.batch}, {"oom", p.oom}, {"peak_allocated", p.peak}, {"seconds", p.seconds}});
      if (p.batch == t.predicted) predicted_oom = p.oom;
    }
    // The search is exact below max_batch, so a predicted batch above the real largest one would
    // have run out of memory (and did, when it was probed).
    const bool verifiable = t.predicted <= a.max_batch;
    j["predicted_fit_ooms"] = verifiable && t.predicted > found.batch;
    j["sure_fit_ooms"] = t.sure > found.batch;
    if (predicted_oom) j["predicted_probe_oom"] = *predicted_oom;
    if (!verifiable) j["unverified"] = "the predicted batch is above --max-batch";
    j["seconds"] = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

int run_throughput(const Args& a) {
  const Run run = load_run(a);
  auto comm = distributed::make_communicator(distributed::World{}, run.config.distributed, g_device);
  auto state = trainer::build_training_state(run.config, run.shape, comm, g_device, run.latitudes);
  int64_t params = 0;
  for (const auto& p : state->model->parameters()) params += p.numel();
  const auto batches = trainer::synthetic_micro_batches(run.config, run.shape, a.batch, 1, g_device);
  trainer::TrainingStep step(*state);
  const double lr = run.config.train.lr;
  double last_loss = 0;
  for (int i = 0; i < a.warmup; ++i) last_loss = step.run(batches, lr).loss;
  synchronize();
  std::vector<double> rates;
  for (int r = 0; r < a.reps; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < a.steps; ++i) last_loss = step.run(batches, lr).loss;
    synchronize();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    rates.push_back(static_cast<double>(a.steps * a.batch) / seconds);
  }
  // The line train_throughput and the peer print.
  std::printf("impl=wxtrain device=%s model=%s precision=%s batch=%lld params=%lld threads=%d loss=%.5g reps=",
              on_cpu() ? "cpu" : "cuda", run.config.model.name.c_str(), a.precision.c_str(), static_cast<long long>(a.batch),
              static_cast<long long>(params), at::get_num_threads(), last_loss);
  for (size_t i = 0; i < rates.size(); ++i) std::printf("%s%.2f", i ? "," : "", rates[i]);
  std::printf(" samples_per_s=%.3f\n", bench::median(rates));
  return 0;
}

// Real steps of a preset at `batch` on the device from an emptied cache: training steps (or forward
// passes under no_grad), the memory at their peaks and the samples/s of those after `warmup`.
struct PresetMeasured {
  Measured memory;
  double samples_per_s = 0;
};

PresetMeasured measure_preset(const Run& run, int64_t batch, const Args& a, bool inference) {
  if (!inference) {
    // The training step as the accuracy stage measures it, with the clock on the later steps.
    PresetMeasured pm;
    MemoryMeter& meter = memory_meter(g_device);
    meter.release_cached();
    pm.memory.batch = batch;
    pm.memory.baseline_allocated = meter.snapshot().allocated;
    meter.reset_peak();
    const auto t0 = Clock::now();
    try {
      auto comm = distributed::make_communicator(distributed::World{}, run.config.distributed, g_device);
      auto state = trainer::build_training_state(run.config, run.shape, comm, g_device, run.latitudes);
      auto micro = trainer::synthetic_micro_batches(run.config, run.shape, batch, run.config.train.accumulation, g_device);
      trainer::TrainingStep step(*state);
      Clock::time_point timed;
      for (int i = 0; i < a.steps; ++i) {
        if (i == a.warmup) {
          synchronize();
          timed = Clock::now();
        }
        pm.memory.loss = step.run(micro, run.config.train.lr).loss;
      }
      synchronize();
      pm.samples_per_s = static_cast<double>((a.steps - a.warmup) * batch) /
                         std::chrono::duration<double>(Clock::now() - timed).count();
      const cuda::DeviceMemory d = mem_get_info();
      pm.memory.context = (d.total - d.free) - meter.snapshot().reserved;
    } catch (const c10::OutOfMemoryError&) {
      pm.memory.oom = true;
    }
    pm.memory.peak_allocated = meter.snapshot().peak;
    pm.memory.peak_reserved = peak_reserved();
    meter.release_cached();
    pm.memory.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return pm;
  }
  // Inference: the forecast's forward pass, as `estimate --mode inference` estimates it.
  PresetMeasured pm;
  MemoryMeter& meter = memory_meter(g_device);
  meter.release_cached();
  pm.memory.batch = batch;
  meter.reset_peak();
  const auto t0 = Clock::now();
  try {
    torch::NoGradGuard no_grad;
    torch::manual_seed(run.config.train.seed);
    auto model = models::build_model(run.config.model, run.shape);
    model->eval();
    model->to(g_device);
    const Precision p = run.config.train.precision;
    if (p == Precision::kBf16) model->to(torch::kBFloat16);
    const auto dtype = p == Precision::kBf16 ? torch::kBFloat16 : torch::kFloat32;
    torch::Tensor x = torch::randn({batch, run.shape.in_channels, run.shape.lat, run.shape.lon},
                                   torch::TensorOptions().device(g_device).dtype(dtype));
    const bool autocast_on = p == Precision::kBf16Mixed || p == Precision::kFp16Mixed;
    const auto half = p == Precision::kFp16Mixed ? torch::kHalf : torch::kBFloat16;
    Clock::time_point timed;
    for (int i = 0; i < a.steps; ++i) {
      if (i == a.warmup) {
        synchronize();
        timed = Clock::now();
      }
      AutocastGuard guard(g_device.type(), half, autocast_on);
      torch::Tensor y = model->forward(x);
    }
    synchronize();
    pm.samples_per_s =
        static_cast<double>((a.steps - a.warmup) * batch) / std::chrono::duration<double>(Clock::now() - timed).count();
    const cuda::DeviceMemory d = mem_get_info();
    pm.memory.context = (d.total - d.free) - meter.snapshot().reserved;
  } catch (const c10::OutOfMemoryError&) {
    pm.memory.oom = true;
  }
  pm.memory.peak_allocated = meter.snapshot().peak;
  pm.memory.peak_reserved = peak_reserved();
  meter.release_cached();
  pm.memory.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return pm;
}

int run_preset(const Args& a) {
  const Run run = load_run(a);
  const bool inference = a.run_mode == "inference";
  estimator::EstimateOptions options;
  options.mode = inference ? estimator::Mode::kInference : estimator::Mode::kTrain;
  const estimator::Estimate e = estimator::estimate(run.config, run.shape, options);
  const estimator::GpuSpec gpu = this_gpu();
  for (const std::string& at : a.at) {
    const int64_t batch = at == "max" ? e.max_batch(gpu.memory_bytes, gpu)
                          : at == "sure" ? e.sure_max_batch(gpu.memory_bytes, gpu)
                                         : std::stoll(at);
    json j = case_json(run, a, "preset");
    j["preset"] = a.preset;
    j["mode"] = a.run_mode;
    j["rollout_steps"] = run.config.max_rollout();
    j["overrides"] = a.overrides;
    j["at"] = at;
    j["batch"] = batch;
    j["gpu"] = gpu.label;
    j["estimate_method"] = e.method;
    j["error_band"] = {{"family", e.band.family}, {"under", e.band.under}, {"over", e.band.over}};
    if (batch < 1) {  // the estimate says batch 1 does not fit: nothing to measure
      j["skipped"] = "the estimate fits no batch on this GPU";
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
      continue;
    }
    const estimator::Breakdown p = e.breakdown(batch, gpu);
    j["predicted"] = breakdown_json(e, p, gpu);
    const PresetMeasured pm = measure_preset(run, batch, a, inference);
    const Measured& m = pm.memory;
    j["measured"] = {{"oom", m.oom},
                     {"peak_allocated", m.peak_allocated},
                     {"peak_reserved", m.peak_reserved},
                     {"context", m.context},
                     {"total", m.total()},
                     {"loss", m.loss},
                     {"samples_per_s", pm.samples_per_s},
                     {"timed_steps", a.steps - a.warmup},
                     {"seconds", m.seconds}};
    // (On the CPU an inference pass may reserve nothing beyond its start: no ratio then.)
    if (!m.oom && m.total() > 0)
      j["error_total"] = (p.total() - static_cast<double>(m.total())) / static_cast<double>(m.total());
    if (!m.oom && m.peak_allocated > 0)
      j["error_allocated"] = (p.allocated() - static_cast<double>(m.peak_allocated)) / static_cast<double>(m.peak_allocated);
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);  // each case is kept as soon as it is measured: a lost machine keeps what it did
  }
  return 0;
}

int run_describe(const Args& a) {
  const Run run = load_run(a);
  torch::manual_seed(run.config.train.seed);
  const auto model = models::build_model(run.config.model, run.shape);
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  json j = {{"model", run.config.model.name}, {"params", params}, {"threads", at::get_num_threads()},
                  {"in_channels", run.shape.in_channels}, {"out_channels", run.shape.out_channels},
                  {"lat", run.shape.lat}, {"lon", run.shape.lon}, {"rollout_steps", run.config.data.rollout_steps},
                  {"state_channels", run.shape.state_channels}, {"history", run.shape.history},
                  {"latitudes", run.latitudes}, {"buffers", model->named_buffers().keys()}};
  // A preset's [model] keys, for the peer's run file (the script adds the --set model.* values).
  if (!a.preset.empty())
    if (const ModelPreset* preset = find_model_preset(a.preset)) j["preset_model_toml"] = preset->model_toml;
  // GraphCast's graph and Pangu's tables, for the peer to run on (train_peer.py --buffers).
  if (!a.buffers.empty()) bench::write_buffers(*model, a.buffers);
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The estimator traces the step on the CPU under wxtrain's counting allocator, installed first.
  memory_meter(torch::Device(torch::kCPU));
  const Args args = parse_args(argc, argv);
  if (args.cpu) g_device = torch::Device(torch::kCPU);
  if (const std::string why = args.cpu ? "" : cuda::unavailable_reason(0); !why.empty()) {
    std::fprintf(stderr, "gpu_check: no CUDA device (%s)\n", why.c_str());
    return 3;
  }
  try {
    if (args.mode == "device") return run_device();
    if (args.mode == "accuracy") return run_accuracy(args);
    if (args.mode == "fit") return run_fit(args);
    if (args.mode == "throughput") return run_throughput(args);
    if (args.mode == "preset") return run_preset(args);
    return run_describe(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_check %s: %s\n", args.mode.c_str(), e.what());
    return 1;
  }
}
