// The CUDA paths, run where a GPU is (scripts/gpu_check.sh runs `ctest -L cuda`): the caching
// allocator's meter and its budget, NCCL with one rank, a training step on the device against the
// same step on the CPU, and fp16 loss scaling. On a machine without a GPU (CI) every test here is
// skipped, and says why: the CUDA-built binary is then a CPU program, which the other suites test.
#include <gtest/gtest.h>

#include <limits>

#include "core/cuda/cuda_backend.h"
#include "core/memory_meter.h"
#include "distributed/communicator.h"
#include "distributed/nccl/nccl_communicator.h"
#include "distributed/world.h"
#include "tests/trainer/storm_run.h"
#include "trainer/training_step.h"

namespace wxtrain {
namespace {

#define REQUIRE_CUDA()                                                                          \
  if (!cuda::built()) GTEST_SKIP() << "built against a LibTorch without CUDA";                 \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the CUDA paths need a GPU"

const torch::Device kGpu(torch::kCUDA, 0);
constexpr int64_t MiB = 1 << 20;

TEST(CudaMeter, CountsWhatTheCachingAllocatorHolds) {
  REQUIRE_CUDA();
  MemoryMeter& meter = memory_meter(kGpu);
  const MemorySnapshot before = meter.snapshot();
  meter.reset_peak();
  {
    torch::Tensor t = torch::empty({16 * MiB / 4}, torch::TensorOptions().dtype(torch::kFloat).device(kGpu));
    const MemorySnapshot during = meter.snapshot();
    EXPECT_EQ(during.allocated - before.allocated, 16 * MiB);  // a multiple of 512 B: no rounding
    EXPECT_GE(during.reserved, during.allocated);
  }
  const MemorySnapshot after = meter.snapshot();
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_GE(after.peak, before.allocated + 16 * MiB);
  EXPECT_GE(after.reserved, before.allocated + 16 * MiB) << "freed blocks stay cached";
  meter.release_cached();
  EXPECT_LT(meter.snapshot().reserved, after.reserved);
  EXPECT_GT(meter.capacity(), 1024 * MiB);
  EXPECT_FALSE(cuda::properties(0).name.empty());
}

TEST(CudaMeter, BudgetRaisesOutOfMemory) {
  REQUIRE_CUDA();
  MemoryMeter& meter = memory_meter(kGpu);
  meter.release_cached();
  meter.set_limit(256 * MiB);
  EXPECT_THROW(torch::empty({512 * MiB}, torch::TensorOptions().dtype(torch::kUInt8).device(kGpu)),
               c10::OutOfMemoryError);
  torch::Tensor fits = torch::empty({64 * MiB}, torch::TensorOptions().dtype(torch::kUInt8).device(kGpu));
  EXPECT_EQ(fits.numel(), 64 * MiB);
  meter.set_limit(0);
  EXPECT_EQ(meter.limit(), 0);
}

// The NCCL test brings MPI up (init_world under mpirun); MPI must also go down before the process
// exits, or mpiexec reports the rank as ended "improperly" and fails the run although every test
// passed (seen on the H100: docs/benchmarks.md, "The first GPU check"). finalize_world() is a no-op
// when MPI never started.
class FinalizeMpi : public ::testing::Environment {
 public:
  void TearDown() override { distributed::finalize_world(); }
};
const ::testing::Environment* const kFinalizeMpi = ::testing::AddGlobalTestEnvironment(new FinalizeMpi);

// One rank under `mpirun -np 1` (CTest entry cuda.nccl_np1): each collective on the device is the
// identity, and the Work makes the caller's stream wait.
TEST(NcclOneRank, CollectivesOnTheDevice) {
  REQUIRE_CUDA();
  const distributed::World world = distributed::init_world();
  if (!world.mpi) GTEST_SKIP() << "NCCL is bootstrapped over MPI: run under mpirun -np 1 (CTest cuda.nccl_np1)";
  auto comm = distributed::make_nccl_communicator(world, kGpu);
  EXPECT_EQ(comm->backend(), "nccl");
  torch::Tensor x = torch::arange(1000, torch::TensorOptions().dtype(torch::kFloat).device(kGpu));
  const torch::Tensor expected = x.clone();
  comm->allreduce_async(x)->wait();
  EXPECT_TRUE(torch::equal(x, expected));
  torch::Tensor bf16 = expected.to(torch::kBFloat16);
  comm->broadcast_async(bf16, 0)->wait();
  EXPECT_TRUE(torch::equal(bf16, expected.to(torch::kBFloat16)));
  torch::Tensor out = torch::zeros_like(x);
  comm->reduce_scatter_async(x, out, {})->wait();
  EXPECT_TRUE(torch::equal(out, expected));
  torch::Tensor gathered = torch::zeros_like(x);
  comm->allgather_async(x, gathered, {})->wait();
  EXPECT_TRUE(torch::equal(gathered, expected));
  EXPECT_FALSE(distributed::nccl_version().empty());
}

std::unique_ptr<trainer::TrainingState> state_on(const RunConfig& config, torch::Device device) {
  auto comm = distributed::make_communicator(distributed::World{}, config.distributed, device);
  return trainer::build_training_state(config, models::model_shape(config), comm, device);
}

RunConfig storm_config(const std::string& extra = "") {
  return testing_support::storm_run(::testing::TempDir() + "/cuda_step", extra);
}

// The same seed, weights and batch: the first fp32 step's loss and gradient norm on the GPU equal
// the CPU's to float rounding (cuDNN's convolutions sum in another order). TF32, which PyTorch
// allows for cuDNN's convolutions by default, is off here: it rounds inputs to 10-bit mantissas.
TEST(CudaTraining, Fp32StepMatchesTheCpu) {
  REQUIRE_CUDA();
  const bool tf32_cudnn = at::globalContext().allowTF32CuDNN(), tf32_cublas = at::globalContext().allowTF32CuBLAS();
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
  const RunConfig config = storm_config("device = \"cuda\"\n");
  auto cpu = state_on(config, torch::kCPU);
  auto gpu = state_on(config, kGpu);
  auto batches = trainer::synthetic_micro_batches(config, models::model_shape(config), 4, 1, torch::kCPU);
  std::vector<trainer::MicroBatch> on_gpu;
  for (const auto& b : batches)
    on_gpu.push_back({b.input.to(kGpu), b.forcings.to(kGpu), b.target.to(kGpu), b.target_mask.defined() ? b.target_mask.to(kGpu) : torch::Tensor()});
  MemoryMeter& meter = memory_meter(kGpu);
  const trainer::StepResult c = trainer::TrainingStep(*cpu).run(batches, 1e-3);
  const trainer::StepResult g = trainer::TrainingStep(*gpu, &meter).run(on_gpu, 1e-3);
  EXPECT_NEAR(g.loss, c.loss, 1e-4 * std::abs(c.loss));
  EXPECT_NEAR(g.grad_norm, c.grad_norm, 1e-3 * c.grad_norm);
  EXPECT_GT(g.peak_forward_backward, 0);
  at::globalContext().setAllowTF32CuDNN(tf32_cudnn);
  at::globalContext().setAllowTF32CuBLAS(tf32_cublas);
}

// fp16-mixed on the GPU: an inf in the batch skips the update and halves the scale (the fused
// _amp_ unscale found it); the next finite batch trains at the reduced scale.
TEST(CudaTraining, Fp16OverflowSkipsTheStepAndBacksOff) {
  REQUIRE_CUDA();
  const RunConfig config = storm_config("device = \"cuda\"\nprecision = \"fp16-mixed\"\n");
  auto state = state_on(config, kGpu);
  const double scale = state->scaler.scale();
  ASSERT_TRUE(state->scaler.enabled());
  auto batches = trainer::synthetic_micro_batches(config, models::model_shape(config), 4, 1, kGpu);
  torch::Tensor before = state->model->parameters().front().detach().clone();
  batches[0].input[0][0][5][5] = std::numeric_limits<float>::infinity();
  trainer::TrainingStep step(*state);
  const trainer::StepResult skipped = step.run(batches, 1e-3);
  EXPECT_FALSE(skipped.applied);
  EXPECT_DOUBLE_EQ(state->scaler.scale(), scale / 2);
  EXPECT_TRUE(torch::equal(before, state->model->parameters().front().detach()));
  auto clean = trainer::synthetic_micro_batches(config, models::model_shape(config), 4, 1, kGpu);
  const trainer::StepResult applied = step.run(clean, 1e-3);
  EXPECT_TRUE(applied.applied);
  EXPECT_DOUBLE_EQ(applied.loss_scale, scale / 2);
  EXPECT_FALSE(torch::equal(before, state->model->parameters().front().detach()));
}

}  // namespace
}  // namespace wxtrain
