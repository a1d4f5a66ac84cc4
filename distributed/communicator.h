#pragma once
// Collectives on contiguous tensors (float32, bfloat16, float16, float64, int32, int64), in place
// where the operation allows. Every collective has an async form returning a Work handle, so a DDP
// bucket can be reduced while backward keeps computing; the blocking form is async + wait().
// All ranks must issue the same collectives in the same order (as with MPI and NCCL).
//
// Backends: LocalCommunicator (world of one: collectives are identities), MpiCommunicator (CPU
// tensors, mpi_communicator.h), NcclCommunicator (CUDA tensors, nccl/; built with WXTRAIN_CUDA).
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/config.h"
#include "distributed/world.h"

namespace wxtrain::distributed {

// An issued collective. wait() blocks until its result is in the output tensor (for NCCL: until the
// caller's current CUDA stream is ordered after it) and rethrows the collective's error, if any.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool completed() = 0;
};
using WorkHandle = std::shared_ptr<Work>;

// A Work that was done when it was returned (world of one, empty tensors).
WorkHandle completed_work();

// What a communicator has sent, for tests and benchmarks ("no communication when sync=false").
struct CommStats {
  int64_t collectives = 0;  // collectives issued, scalar helpers included
  int64_t bytes = 0;        // payload bytes of those collectives (per rank, before any upcast)
  // Of `bytes`: all-gathers (their output, the whole gathered tensor) and reduce-scatters (their
  // input, the whole tensor reduced): what ZeRO-3 moves per step (bench/zero3_step.cpp).
  int64_t allgather_bytes = 0;
  int64_t reduce_scatter_bytes = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;

  // tensor <- sum over ranks of tensor.
  virtual WorkHandle allreduce_async(torch::Tensor tensor) = 0;
  // output <- this rank's piece of the sum over ranks of input. Piece r has counts[r] elements and
  // pieces lie in rank order in input (counts empty: size() equal pieces of input).
  virtual WorkHandle reduce_scatter_async(torch::Tensor input, torch::Tensor output,
                                          std::vector<int64_t> counts) = 0;
  // output <- the inputs of all ranks in rank order; rank r contributes counts[r] elements (counts
  // empty: equal pieces). In place when input is this rank's piece of output.
  virtual WorkHandle allgather_async(torch::Tensor input, torch::Tensor output,
                                     std::vector<int64_t> counts) = 0;
  // tensor <- root's tensor.
  virtual WorkHandle broadcast_async(torch::Tensor tensor, int root) = 0;
  virtual void barrier() = 0;
  // Host scalars agreed by all ranks (flags such as a SIGTERM stop or an inf in the gradients).
  virtual double max(double value) = 0;
  virtual double sum(double value) = 0;
  // A communicator over the ranks that pass the same `color`, ordered by `key` (then by rank), as
  // MPI_Comm_split does. Collective: every rank of this communicator calls it. An ensemble group
  // (distributed.ensemble_group) gathers its members over the communicator this returns.
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;

  // Blocking forms and helpers, the same for every backend.
  void allreduce(const torch::Tensor& tensor) { allreduce_async(tensor)->wait(); }
  void allreduce_mean(const torch::Tensor& tensor);  // sum, then scale by 1/size()
  void reduce_scatter(const torch::Tensor& input, const torch::Tensor& output,
                      std::vector<int64_t> counts = {}) {
    reduce_scatter_async(input, output, std::move(counts))->wait();
  }
  void allgather(const torch::Tensor& input, const torch::Tensor& output, std::vector<int64_t> counts = {}) {
    allgather_async(input, output, std::move(counts))->wait();
  }
  void broadcast(const torch::Tensor& tensor, int root = 0) { broadcast_async(tensor, root)->wait(); }
  bool any(bool flag) { return max(flag ? 1.0 : 0.0) > 0.0; }

  CommStats stats() const {
    return {collectives_.load(), bytes_.load(), allgather_bytes_.load(), reduce_scatter_bytes_.load()};
  }

 protected:
  // Checks what every backend needs (defined, contiguous, supported dtype); names the op at fault.
  static void check_tensor(const torch::Tensor& tensor, const char* op);
  // counts for reduce_scatter/allgather: validated against the tensors, or equal pieces of `whole`.
  std::vector<int64_t> resolve_counts(std::vector<int64_t> counts, int64_t whole, int64_t piece,
                                      const char* op) const;
  enum class Kind { kOther, kAllgather, kReduceScatter };
  void record(int64_t bytes, Kind kind = Kind::kOther) {
    collectives_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
    if (kind == Kind::kAllgather) allgather_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    if (kind == Kind::kReduceScatter) reduce_scatter_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> collectives_{0};
  std::atomic<int64_t> bytes_{0};
  std::atomic<int64_t> allgather_bytes_{0};
  std::atomic<int64_t> reduce_scatter_bytes_{0};
};

// The world of one: every collective is the identity (copies where output is a separate tensor).
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }
  WorkHandle allreduce_async(torch::Tensor tensor) override;
  WorkHandle reduce_scatter_async(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) override;
  WorkHandle allgather_async(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) override;
  WorkHandle broadcast_async(torch::Tensor tensor, int root) override;
  void barrier() override {}
  double max(double value) override { return value; }
  double sum(double value) override { return value; }
  std::shared_ptr<Communicator> split(int, int) override { return std::make_shared<LocalCommunicator>(); }
};

// The communicator for `device` in `world`: a world of one gets LocalCommunicator; otherwise
// distributed.backend picks it ("auto": nccl for CUDA devices, mpi for the CPU). Asking for NCCL
// (or a CUDA device) in a build without WXTRAIN_CUDA throws an Error that says how to build it.
std::shared_ptr<Communicator> make_communicator(const World& world, const DistributedConfig& config,
                                                const torch::Device& device);

}  // namespace wxtrain::distributed
