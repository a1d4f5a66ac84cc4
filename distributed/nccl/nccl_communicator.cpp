// NCCL collectives for CUDA tensors (built with WXTRAIN_CUDA).
//
// Streams: each collective runs on this communicator's own high-priority stream from the c10 pool.
// Before it, that stream waits on an event recorded on the caller's current stream (so the inputs
// are ready); Work::wait() makes the caller's current stream wait on the collective's event. This is
// how a DDP bucket's all-reduce overlaps the rest of backward on the compute stream, and no host
// thread ever blocks on the GPU. The tensors' storages are recorded on the communication stream so
// the caching allocator does not hand their memory out before the collective is done.
#include "distributed/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "core/error.h"
#include "distributed/mpi_communicator.h"

namespace wxtrain::distributed {
namespace {

void check_nccl(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) throw Error(std::string("NCCL ") + what + " failed: " + ncclGetErrorString(result));
}

void check_cuda(cudaError_t result, const char* what) {
  if (result != cudaSuccess) throw Error(std::string("CUDA ") + what + " failed: " + cudaGetErrorString(result));
}

ncclDataType_t nccl_type(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat: return ncclFloat32;
    case torch::kHalf: return ncclFloat16;
    case torch::kBFloat16: return ncclBfloat16;
    case torch::kDouble: return ncclFloat64;
    case torch::kInt: return ncclInt32;
    case torch::kLong: return ncclInt64;
    default: throw Error(std::string("no NCCL type for ") + c10::toString(type));
  }
}

// Done when the event recorded after the collective on the communication stream has fired.
class NcclWork final : public Work {
 public:
  NcclWork(cudaStream_t comm_stream, c10::DeviceIndex device) : device_(device) {
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "EventCreate");
    check_cuda(cudaEventRecord(done_, comm_stream), "EventRecord");
  }
  ~NcclWork() override { cudaEventDestroy(done_); }
  void wait() override {
    c10::cuda::CUDAGuard guard(device_);
    check_cuda(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_).stream(), done_, 0), "StreamWaitEvent");
  }
  bool completed() override { return cudaEventQuery(done_) == cudaSuccess; }

 private:
  c10::DeviceIndex device_;
  cudaEvent_t done_ = nullptr;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const World& world, const torch::Device& device)
      : NcclCommunicator(std::make_shared<MpiCommunicator>(),
                         device.has_index() ? device.index() : static_cast<c10::DeviceIndex>(world.local_rank)) {}
  // Bootstrapped over `mpi` (its rank 0's ncclUniqueId broadcast to its ranks): the NCCL
  // communicator spans the same ranks, in the same order.
  NcclCommunicator(std::shared_ptr<MpiCommunicator> mpi, c10::DeviceIndex device)
      : mpi_(std::move(mpi)),
        rank_(mpi_->rank()),
        size_(mpi_->size()),
        device_(device),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device_)) {
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    c10::cuda::CUDAGuard guard(device_);
    ncclUniqueId id;
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "GetUniqueId");
    mpi_->broadcast_bytes(&id, static_cast<int>(sizeof(id)), 0);
    check_nccl(ncclCommInitRank(&comm_, size_, id, rank_), "CommInitRank");
  }
  ~NcclCommunicator() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  WorkHandle allreduce_async(torch::Tensor tensor) override {
    check(tensor, "allreduce");
    record(tensor.nbytes());
    return launch({tensor}, [&](cudaStream_t stream) {
      check_nccl(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor.scalar_type()),
                               ncclSum, comm_, stream),
                 "AllReduce");
    });
  }

  WorkHandle reduce_scatter_async(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) override {
    check(input, "reduce_scatter");
    check(output, "reduce_scatter");
    counts = resolve_counts(std::move(counts), input.numel(), output.numel(), "reduce_scatter");
    record(input.nbytes(), Kind::kReduceScatter);
    const ncclDataType_t type = nccl_type(input.scalar_type());
    return launch({input, output}, [&](cudaStream_t stream) {
      if (all_equal(counts)) {
        check_nccl(ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(), type, ncclSum, comm_, stream),
                   "ReduceScatter");
        return;
      }
      // Unequal pieces: one reduce per owner, fused into a single NCCL group.
      check_nccl(ncclGroupStart(), "GroupStart");
      int64_t offset = 0;
      for (int r = 0; r < size_; ++r) {
        if (counts[r] > 0) {
          check_nccl(ncclReduce(element(input, offset), output.data_ptr(), counts[r], type, ncclSum, r, comm_, stream),
                     "Reduce");
        }
        offset += counts[r];
      }
      check_nccl(ncclGroupEnd(), "GroupEnd");
    });
  }

  WorkHandle allgather_async(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) override {
    check(input, "allgather");
    check(output, "allgather");
    counts = resolve_counts(std::move(counts), output.numel(), input.numel(), "allgather");
    record(output.nbytes(), Kind::kAllgather);
    const ncclDataType_t type = nccl_type(output.scalar_type());
    return launch({input, output}, [&](cudaStream_t stream) {
      if (all_equal(counts)) {
        check_nccl(ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), type, comm_, stream), "AllGather");
        return;
      }
      // Unequal pieces: each rank broadcasts its piece into place, fused into one NCCL group.
      check_nccl(ncclGroupStart(), "GroupStart");
      int64_t offset = 0;
      for (int r = 0; r < size_; ++r) {
        if (counts[r] > 0) {
          void* send = r == rank_ ? input.data_ptr() : element(output, offset);
          check_nccl(ncclBroadcast(send, element(output, offset), counts[r], type, r, comm_, stream), "Broadcast");
        }
        offset += counts[r];
      }
      check_nccl(ncclGroupEnd(), "GroupEnd");
    });
  }

  WorkHandle broadcast_async(torch::Tensor tensor, int root) override {
    check(tensor, "broadcast");
    if (root < 0 || root >= size_) throw Error("broadcast: root " + std::to_string(root) + " is not a rank");
    record(tensor.nbytes());
    return launch({tensor}, [&](cudaStream_t stream) {
      check_nccl(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor.scalar_type()),
                               root, comm_, stream),
                 "Broadcast");
    });
  }

  // Host-side agreement goes over MPI: the values live on the host already.
  void barrier() override { mpi_->barrier(); }
  double max(double value) override { return mpi_->max(value); }
  double sum(double value) override { return mpi_->sum(value); }
  // The MPI communicator is split first; the sub-communicator's NCCL is bootstrapped over it (a
  // unique id per group), so no NCCL version's ncclCommSplit is needed.
  std::shared_ptr<Communicator> split(int color, int key) override {
    auto sub = std::dynamic_pointer_cast<MpiCommunicator>(mpi_->split(color, key));
    if (!sub) throw Error("split: the MPI communicator's split is not an MPI communicator");
    return std::make_shared<NcclCommunicator>(std::move(sub), device_);
  }

 private:
  void check(const torch::Tensor& tensor, const char* op) const {
    check_tensor(tensor, op);
    if (!tensor.is_cuda() || tensor.device().index() != device_) {
      throw Error(std::string(op) + ": the NCCL communicator of cuda:" + std::to_string(device_) +
                  " got a tensor on " + tensor.device().str());
    }
  }

  static bool all_equal(const std::vector<int64_t>& counts) {
    return std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts.front(); });
  }

  static void* element(const torch::Tensor& tensor, int64_t offset) {
    return static_cast<char*>(tensor.data_ptr()) + offset * tensor.element_size();
  }

  // Orders the communication stream after the caller's current stream, runs `issue` on it and
  // returns the Work that the caller's stream can wait on.
  template <typename Issue>
  WorkHandle launch(std::initializer_list<torch::Tensor> tensors, Issue&& issue) {
    c10::cuda::CUDAGuard guard(device_);
    const cudaStream_t current = c10::cuda::getCurrentCUDAStream(device_).stream();
    cudaEvent_t inputs_ready = nullptr;
    check_cuda(cudaEventCreateWithFlags(&inputs_ready, cudaEventDisableTiming), "EventCreate");
    check_cuda(cudaEventRecord(inputs_ready, current), "EventRecord");
    check_cuda(cudaStreamWaitEvent(stream_.stream(), inputs_ready, 0), "StreamWaitEvent");
    cudaEventDestroy(inputs_ready);  // released once the wait has been enqueued
    for (const torch::Tensor& t : tensors) {
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    }
    issue(stream_.stream());
    return std::make_shared<NcclWork>(stream_.stream(), device_);
  }

  std::shared_ptr<MpiCommunicator> mpi_;
  int rank_;
  int size_;
  c10::DeviceIndex device_;
  c10::cuda::CUDAStream stream_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

bool nccl_available() { return true; }

std::string nccl_version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "unknown";
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9 (X*1000 + Y*100 + Z before).
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code % 10000 / 100 : code % 1000 / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

std::shared_ptr<Communicator> make_nccl_communicator(const World& world, const torch::Device& device) {
  if (!world.mpi) throw Error("the NCCL communicator is bootstrapped over MPI: launch with mpirun or srun");
  return std::make_shared<NcclCommunicator>(world, device);
}

}  // namespace wxtrain::distributed
