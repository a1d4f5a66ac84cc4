#include <gtest/gtest.h>

#include <cmath>

#include "core/config.h"
#include "core/memory_meter.h"
#include "estimator/estimate.h"
#include "estimator/gpu_catalog.h"
#include "estimator/model_states.h"

using namespace wxtrain;
using namespace wxtrain::estimator;

namespace {

RunConfig small_run(const std::string& model, const std::vector<std::string>& overrides = {}) {
  const std::string text = "[model]\n" + model +
                           "\n[data]\nvariables = [\"p\", \"t\", \"u\", \"v\", \"u500\", \"v500\"]\ngrid = [33, 36]\n"
                           "history = 2\n[train]\nbatch_size = 8\n";
  return parse_config(text, "estimate_test.toml", overrides);
}

const char* kUnet = "name = \"unet\"\nchannels = [16, 32, 64]\ngroups = 8";
const char* kVit = "name = \"vit\"\npatch_size = 3\nembed_dim = 64\ndepth = 2\nheads = 4";
const char* kGnn = "name = \"gnn\"\nlatent = 32\nprocessor_layers = 2";

}  // namespace

// ZeRO (Rajbhandari et al. 2020), Figure 1: 7.5B parameters, mixed-precision Adam (K = 12), 64
// devices: 120 GB, 31.4 GB, 16.6 GB and 1.9 GB of model states per device for stages 0-3.
TEST(ModelStates, ReproducesTheZeroPaperFigure) {
  const StateLayout layout = state_layout(Precision::kBf16, "adam", 0.0);
  EXPECT_EQ(layout.param_bytes, 2);
  EXPECT_EQ(layout.optimizer_bytes, 12);
  const double expected_gb[] = {120.0, 31.4, 16.6, 1.9};
  for (int stage = 0; stage <= 3; ++stage) {
    const double gb = model_states(7'500'000'000LL, layout, stage, 64).total() / 1e9;
    // The paper prints one decimal: stage 3 is 16 x 7.5e9 / 64 = 1.875 GB, shown as 1.9.
    EXPECT_NEAR(std::round(gb * 10) / 10, expected_gb[stage], 0.01 * expected_gb[stage]) << "stage " << stage << ": " << gb;
  }
}

// ZeRO-3 as wxtrain runs it: each rank keeps 1/N of the blocks' parameters, those outside every
// block whole, and holds the running block and the prefetched one whole.
TEST(ModelStates, Zero3AddsTwoGatheredBlocksAndKeepsOutsideParametersWhole) {
  const StateLayout layout = state_layout(Precision::kFp32, "adamw", 0.0);
  const BlockParams blocks{300, 100};  // largest block, outside every block
  const ModelStates s = model_states(1000, layout, 3, 4, blocks);
  EXPECT_DOUBLE_EQ(s.gathered, 2 * 300 * 4.0);
  EXPECT_DOUBLE_EQ(s.params, 900 * 4.0 / 4 + 100 * 4.0 + 2 * 300 * 4.0);
  EXPECT_DOUBLE_EQ(s.grads, 1000 * 4.0 / 4);
  EXPECT_DOUBLE_EQ(s.optimizer, 1000 * 8.0 / 4);
  // A world of one runs stage 3 as stage 0: nothing is gathered.
  EXPECT_DOUBLE_EQ(model_states(1000, layout, 3, 1, blocks).total(), model_states(1000, layout, 0, 1).total());
}

TEST(ModelStates, OptimizerBytesFollowTheOptimizer) {
  EXPECT_EQ(state_layout(Precision::kFp32, "adamw", 0).optimizer_bytes, 8);
  EXPECT_EQ(state_layout(Precision::kBf16Mixed, "adam", 0).optimizer_bytes, 8);
  EXPECT_EQ(state_layout(Precision::kFp32, "sgd", 0.9).optimizer_bytes, 4);
  EXPECT_EQ(state_layout(Precision::kFp32, "sgd", 0.0).optimizer_bytes, 0);
  EXPECT_EQ(state_layout(Precision::kBf16, "sgd", 0.0).optimizer_bytes, 4);  // master weights only
}

TEST(Estimate, StatesAreCountedOnTheInstantiatedModelExactly) {
  memory_meter(torch::Device(torch::kCPU));
  for (const char* model : {kUnet, kVit}) {  // no buffers in these two: states are params+grads+optimizer
    RunConfig config = small_run(model);
    Estimate e = estimate(config, models::model_shape(config), {});
    auto built = models::build_model(config.model, models::model_shape(config));
    int64_t n = 0;
    for (const auto& p : built->parameters()) n += p.numel();
    // Beyond params, grads and Adam's two moments the trainer holds only the loss's latitude
    // weights (one float per grid row) and channel weights (one per predicted channel), which the
    // estimate carries with the parameters.
    const int64_t lat_weights = 4 * (config.data.lat + models::model_shape(config).out_channels);
    EXPECT_EQ(e.states.num_params, n);
    EXPECT_DOUBLE_EQ(e.states.params, 4.0 * n + lat_weights);
    EXPECT_DOUBLE_EQ(e.states.grads, 4.0 * n);
    EXPECT_DOUBLE_EQ(e.states.optimizer, 8.0 * n);
    EXPECT_EQ(e.activations.traced_states, 16 * n + lat_weights) << "the trainer allocated more than the states it should";
  }
}

// The accuracy bar on a subset small enough for CI (bench/estimate_accuracy.cpp runs the
// full table on the storm configs): predicted peak vs the peak the counting allocator measures on
// a real training step at that batch.
TEST(Estimate, PredictedPeakMatchesMeasuredTrainingStep) {
  memory_meter(torch::Device(torch::kCPU));
  std::vector<double> errors;
  for (const char* model : {kUnet, kVit, kGnn}) {
    for (const char* precision : {"fp32", "bf16-mixed"}) {
      for (const char* ckpt : {"false", "true"}) {
        RunConfig config = small_run(model, {std::string("train.precision=") + precision,
                                             std::string("train.checkpointing=") + ckpt});
        const auto shape = models::model_shape(config);
        Estimate e = estimate(config, shape, {});
        for (int64_t b : {1, 3, 12}) {
          const double predicted = e.breakdown(b, std::nullopt).total();
          const double measured = static_cast<double>(measure_step(config, shape, b, Mode::kTrain).peak());
          const double err = (predicted - measured) / measured;
          errors.push_back(std::abs(err));
          EXPECT_LE(std::abs(err), 0.08) << config.model.name << " " << precision << " ckpt " << ckpt << " b " << b;
          EXPECT_GE(err, -0.03) << "under-estimate: " << config.model.name << " " << precision << " ckpt " << ckpt
                                << " b " << b;
        }
      }
    }
  }
  std::sort(errors.begin(), errors.end());
  EXPECT_LE(errors[errors.size() / 2], 0.03) << "median error";
}

TEST(Estimate, AccumulationAndZeroShardingChangeWhatTheyShould) {
  RunConfig config = small_run(kUnet);
  const auto shape = models::model_shape(config);
  Estimate one = estimate(config, shape, {});
  EstimateOptions two_ranks;
  two_ranks.world_size = 2;
  RunConfig zero2 = config;
  zero2.distributed.zero_stage = 2;
  Estimate sharded = estimate(zero2, shape, two_ranks);
  EXPECT_DOUBLE_EQ(sharded.states.grads, one.states.grads / 2);
  EXPECT_DOUBLE_EQ(sharded.states.optimizer, one.states.optimizer / 2);
  EXPECT_DOUBLE_EQ(sharded.states.params, one.states.params);
  // Four micro-batches hold more inputs than one, but far less than a 4x larger batch.
  RunConfig accum = config;
  accum.train.accumulation = 4;
  Estimate a = estimate(accum, shape, {});
  const double base = one.breakdown(8, std::nullopt).total();
  EXPECT_GT(a.breakdown(8, std::nullopt).total(), base);
  EXPECT_LT(a.breakdown(8, std::nullopt).total(), one.breakdown(32, std::nullopt).total());
}

TEST(Estimate, MaxBatchIsTheLargestThatFits) {
  RunConfig config = small_run(kVit);
  Estimate e = estimate(config, models::model_shape(config), {});
  const auto t4 = *find_gpu("T4");
  const int64_t b = e.max_batch(t4.memory_bytes, t4);
  ASSERT_GT(b, 0);
  EXPECT_LE(e.breakdown(b, t4).total(), static_cast<double>(t4.memory_bytes));
  EXPECT_GT(e.breakdown(b + 1, t4).total(), static_cast<double>(t4.memory_bytes));
  // Less memory than the overhead alone: nothing fits.
  EXPECT_EQ(e.max_batch(256LL << 20, t4), 0);
}

// What estimate's "try ..." line lists and tune-batch re-estimates: what the run does not use yet,
// in one order, ZeRO's next stage only where ranks share the states.
TEST(Estimate, MemorySaversAreWhatTheRunDoesNotUseYet) {
  auto settings = [](const std::vector<MemorySaver>& savers) {
    std::vector<std::string> out;
    for (const MemorySaver& s : savers) out.push_back(s.setting);
    return out;
  };
  const RunConfig plain = small_run(kUnet, {"data.rollout_steps=2"});
  EXPECT_EQ(settings(memory_savers(plain, 1)),
            (std::vector<std::string>{"train.checkpointing = true", "train.rollout_checkpointing = true",
                                      "train.precision = \"bf16\""}));
  const std::vector<MemorySaver> four_ranks = memory_savers(plain, 4);
  ASSERT_EQ(four_ranks.size(), 4u);
  EXPECT_EQ(four_ranks[0].config.train.checkpointing, true);
  EXPECT_EQ(four_ranks[2].config.train.precision, Precision::kBf16);
  EXPECT_EQ(four_ranks[3].setting, "distributed.zero_stage = 1");
  EXPECT_EQ(four_ranks[3].config.distributed.zero_stage, 1);
  EXPECT_TRUE(four_ranks[3].states_only);
  EXPECT_FALSE(four_ranks[0].states_only);
  EXPECT_EQ(ways_to_save_memory(plain, 8),
            "train.checkpointing = true, train.rollout_checkpointing = true, train.precision = \"bf16\", a smaller "
            "batch, or distributed.zero_stage with more ranks");

  const RunConfig saving = small_run(kUnet, {"train.checkpointing=true", "train.precision=bf16",
                                             "distributed.zero_stage=2"});
  EXPECT_EQ(settings(memory_savers(saving, 4)), (std::vector<std::string>{"distributed.zero_stage = 3"}));
  EXPECT_EQ(ways_to_save_memory(saving, 1), "distributed.zero_stage with more ranks");

  // A forecast (estimate --mode inference) runs no backward and holds no gradients or optimizer
  // state: checkpointing and ZeRO would change nothing, only the precision and the batch do.
  EXPECT_EQ(ways_to_save_memory(plain, 8, Mode::kInference),
            "train.precision = \"bf16\", a smaller batch, or a GPU with more memory");
  EXPECT_EQ(ways_to_save_memory(saving, 1, Mode::kInference), "a GPU with more memory");
}

TEST(GpuCatalog, HasTheCardsUsersRentAndFindsThemLoosely) {
  for (const char* name : {"T4", "RTX3080", "RTX4060Ti", "RTX4090", "RTX6000Ada", "A10G", "L4", "L40S", "V100",
                           "A100-40", "A100-80", "H100", "H100-PCIe", "H100-NVL", "GH200", "H200", "B200", "MI250X",
                           "MI300X"})
    EXPECT_TRUE(find_gpu(name).has_value()) << name;
  EXPECT_EQ(find_gpu("a100 80gb")->name, "A100-80");
  EXPECT_EQ(find_gpu("rtx-4090")->name, "RTX4090");
  EXPECT_EQ(find_gpu("H100 80GB")->name, "H100");
  EXPECT_EQ(find_gpu("h100 nvl")->name, "H100-NVL");
  EXPECT_FALSE(find_gpu("GTX 9999").has_value());
  // Every board says which architecture it is, so the overhead model can pick its figures.
  for (const auto& g : gpu_catalog()) EXPECT_GT(g.compute_capability, 0) << g.name;
  EXPECT_EQ(find_gpu("A100-80")->compute_capability, 80);
  EXPECT_EQ(find_gpu("L40S")->compute_capability, 89);
  EXPECT_EQ(find_gpu("H200")->compute_capability, 90);
  EXPECT_EQ(find_gpu("B200")->compute_capability, 100);
  EXPECT_TRUE(find_gpu("MI300X")->rocm);
  // `wxtrain estimate` prices its one-GPU column on the last entry: a CUDA board.
  EXPECT_FALSE(gpu_catalog().back().rocm);
}

// The catalog holds cudaMemGetInfo's total, which is what the caching allocator can get; nvidia-smi's
// Total is larger by what the driver reserves (H100 81559 vs 81008 MiB, H200 143771 vs 143156,
// B200 183359 vs 182631).
TEST(GpuCatalog, MemoryIsWhatCudaMemGetInfoReportsNotNvidiaSmisTotal) {
  constexpr int64_t MiB = 1 << 20;
  EXPECT_EQ(find_gpu("H100")->memory_bytes, 81008 * MiB);
  EXPECT_EQ(find_gpu("H200")->memory_bytes, 143156 * MiB);
  EXPECT_EQ(find_gpu("B200")->memory_bytes, 182631 * MiB);
  EXPECT_NEAR(find_gpu("H200")->memory_bytes / 1e9, 150.1, 0.05);
  // Where only nvidia-smi's Total is known the catalog takes 1 GiB off it, more than the largest gap
  // measured (768 MiB, A100 80GB: 81920 vs 81152).
  EXPECT_EQ(find_gpu("H100-NVL")->memory_bytes, (95830 - 1024) * MiB);
  EXPECT_EQ(find_gpu("GH200")->memory_bytes, (97871 - 1024) * MiB);

  // What that is worth to a user: a ViT step that nvidia-smi's H100 total would take at a larger batch.
  RunConfig config = small_run(kVit);
  Estimate e = estimate(config, models::model_shape(config), {});
  const GpuSpec h100 = *find_gpu("H100");
  GpuSpec smi_total = h100;
  smi_total.memory_bytes = 81559 * MiB;
  EXPECT_GT(e.max_batch(smi_total.memory_bytes, smi_total), e.max_batch(h100.memory_bytes, h100));
}

// Near the H100's boundary: the batch one past the largest an H100 takes does not fit it and fits an
// H200, whose cuBLAS workspace and context are the same sm_90 figures.
TEST(GpuCatalog, H200FitsABatchThatH100DoesNot) {
  RunConfig config = small_run(kUnet);
  const auto shape = models::model_shape(config);
  Estimate e = estimate(config, shape, {});
  const GpuSpec h100 = *find_gpu("H100"), h200 = *find_gpu("H200");
  const int64_t h100_max = e.max_batch(h100.memory_bytes, h100);
  ASSERT_GT(h100_max, 0);
  EstimateOptions at_boundary;
  at_boundary.batch = h100_max + 1;
  Estimate past = estimate(config, shape, at_boundary);
  const GpuFit on_h100 = past.fit(h100), on_h200 = past.fit(h200);
  EXPECT_FALSE(on_h100.fits);
  EXPECT_TRUE(on_h200.fits);
  EXPECT_EQ(on_h100.max_batch, h100_max);
  EXPECT_GT(on_h200.max_batch, h100_max);
  // Same architecture and the same peak, so the same overhead: only the memory differs.
  EXPECT_DOUBLE_EQ(on_h100.at_batch.overhead, on_h200.at_batch.overhead);
}

// GPUs per model (estimate, "GPUs per model"): on a device that one rank does not fit, the smallest
// distributed.model_parallel whose per-rank figure (whole states, activations / P, the GPU's
// overhead) fits, and one rank fewer does not; the model's ability to shard is said by name.
TEST(Estimate, GpusPerModelIsTheSmallestGroupThatFits) {
  RunConfig config = small_run(kVit, {"train.batch_size=64"});
  EstimateOptions options;
  options.analytic = true;
  Estimate e = estimate(config, models::model_shape(config), options);
  GpuSpec device{"custom", "custom", 0, false, 90};
  const Breakdown one = model_parallel_breakdown(e, 64, 1, device);
  // A device that holds what a rank of a group of three holds: it takes several ranks, and what
  // they hold is the rule.
  device.memory_bytes = static_cast<int64_t>(std::ceil(model_parallel_breakdown(e, 64, 3, device).total()));
  ASSERT_GT(one.total(), static_cast<double>(device.memory_bytes));
  const ModelParallelFit fit = model_parallel_fit(e, device);
  ASSERT_GT(fit.ranks, 1);
  EXPECT_LE(fit.per_rank.total(), static_cast<double>(device.memory_bytes));
  EXPECT_GT(model_parallel_breakdown(e, 64, fit.ranks - 1, device).total(), static_cast<double>(device.memory_bytes));
  EXPECT_DOUBLE_EQ(fit.per_rank.params, one.params);  // the states stay whole on every rank of the group
  EXPECT_NEAR(fit.per_rank.activations, one.activations / static_cast<double>(fit.ranks), 1.0);
  // Smaller than the states: no group size helps.
  GpuSpec tiny{"tiny", "tiny", static_cast<int64_t>(one.params), false, 90};
  EXPECT_EQ(model_parallel_fit(e, tiny).ranks, 0);
  EXPECT_FALSE(model_can_shard(config));
  EXPECT_TRUE(model_can_shard(small_run(kGnn)));
}
