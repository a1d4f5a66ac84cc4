#pragma once
// Collectives on CPU tensors over MPI.
//
// Threading: every MPI call after MPI_Init is made by one progress thread per process, fed by a
// FIFO queue. An async collective is queued and returns at once, so the caller (the autograd
// engine running backward) keeps computing while the progress thread sits in MPI; the queue keeps
// collectives in issue order, which is what MPI requires of all ranks. One thread is also why
// MPI_THREAD_SERIALIZED is enough (world.cpp).
//
// bfloat16 / float16 sums: MPI has no 16-bit float type. Sums are done by upcasting to float32,
// reducing with MPI_FLOAT and rounding once back (a custom MPI_Op on 16-bit data would round after
// every pairwise addition, so the result would depend on the number of ranks and on the
// algorithm). The cost is twice the bytes on the wire for 16-bit sums; broadcast and allgather
// move 16-bit data as is.
#include <functional>

#include <mpi.h>

#include "distributed/communicator.h"

namespace wxtrain::distributed {

class MpiCommunicator final : public Communicator {
 public:
  // A duplicate of `parent` (MPI_COMM_WORLD by default), so its traffic never matches another's.
  explicit MpiCommunicator(MPI_Comm parent = MPI_COMM_WORLD);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  WorkHandle allreduce_async(torch::Tensor tensor) override;
  WorkHandle reduce_scatter_async(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) override;
  WorkHandle allgather_async(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) override;
  WorkHandle broadcast_async(torch::Tensor tensor, int root) override;
  void barrier() override;
  double max(double value) override;
  double sum(double value) override;
  std::shared_ptr<Communicator> split(int color, int key) override;

  // Raw bytes broadcast from root (the NCCL bootstrap sends its ncclUniqueId this way).
  void broadcast_bytes(void* data, int bytes, int root);

  MPI_Comm comm() const { return comm_; }

 private:
  void check_cpu(const torch::Tensor& tensor, const char* op) const;
  double scalar_allreduce(double value, MPI_Op op);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

namespace detail {
// Queues `fn` on the process's MPI progress thread (started on first use).
WorkHandle run_on_progress_thread(std::function<void()> fn);
// As run_on_progress_thread, but a collective of fewer than 512 KiB runs at once on the calling
// thread when the progress thread is idle (returning completed work).
WorkHandle run_soon(std::function<void()> fn, int64_t bytes);
// Drains the queue and joins the thread; finalize_world() calls it before MPI_Finalize.
void stop_progress_thread();
}  // namespace detail

}  // namespace wxtrain::distributed
