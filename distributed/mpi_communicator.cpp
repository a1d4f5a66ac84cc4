#include "distributed/mpi_communicator.h"

#include <climits>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace wxtrain::distributed {
namespace {

class QueuedWork final : public Work {
 public:
  void finish(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = error;
      done_ = true;
    }
    cv_.notify_all();
  }
  void wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }
  bool completed() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class ProgressThread {
 public:
  ProgressThread() : thread_([this] { loop(); }) {}
  ~ProgressThread() { stop(); }

  WorkHandle submit(std::function<void()> fn) {
    auto work = std::make_shared<QueuedWork>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) throw Error("MPI collective issued after finalize_world()");
      queue_.emplace_back(std::move(fn), work);
    }
    cv_.notify_one();
    return work;
  }

  // Runs fn on the calling thread when nothing is queued or running (so the order of collectives
  // and MPI_THREAD_SERIALIZED both hold) and returns true; false when the thread is busy. Small
  // collectives take this path: the hand-off to the thread costs more than they do.
  bool try_run_inline(const std::function<void()>& fn) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_ || busy_ || !queue_.empty()) return false;
      busy_ = true;
    }
    std::exception_ptr error;
    try {
      fn();
    } catch (...) {
      error = std::current_exception();
    }
    bool queued = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = false;
      queued = !queue_.empty() || stopping_;
    }
    if (queued) cv_.notify_one();  // waking an idle thread for nothing costs more than the collective
    if (error) std::rethrow_exception(error);
    return true;
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    for (;;) {
      std::pair<std::function<void()>, std::shared_ptr<QueuedWork>> item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return !busy_ && (stopping_ || !queue_.empty()); });
        if (queue_.empty()) return;  // stopping, and everything queued has run
        item = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      std::exception_ptr error;
      try {
        item.first();
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        busy_ = false;
      }
      item.second->finish(error);
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<QueuedWork>>> queue_;
  bool stopping_ = false;
  bool busy_ = false;  // an item runs (on this thread, or inline on a caller's)
  std::thread thread_;
};

std::mutex g_progress_mutex;
std::unique_ptr<ProgressThread> g_progress;
bool g_progress_stopped = false;

void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(std::string("MPI ") + what + " failed: " + std::string(text, length));
}

int to_int_count(int64_t count, const char* op) {
  if (count > INT_MAX) {
    throw Error(std::string(op) + ": " + std::to_string(count) + " elements exceed MPI's int count limit");
  }
  return static_cast<int>(count);
}

// The MPI type that moves the tensor's bytes unchanged.
MPI_Datatype transport_type(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat: return MPI_FLOAT;
    case torch::kDouble: return MPI_DOUBLE;
    case torch::kInt: return MPI_INT32_T;
    case torch::kLong: return MPI_INT64_T;
    case torch::kBFloat16:
    case torch::kHalf: return MPI_UINT16_T;
    default: throw Error(std::string("no MPI type for ") + c10::toString(type));
  }
}

bool is_16bit_float(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf;
}

// The tensor a sum runs on: itself, or a float32 copy of a 16-bit float tensor (see header).
torch::Tensor summable(const torch::Tensor& t) { return is_16bit_float(t) ? t.to(torch::kFloat) : t; }

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> displs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
  return displs;
}

}  // namespace

namespace detail {

WorkHandle run_on_progress_thread(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(g_progress_mutex);
  if (g_progress_stopped) throw Error("MPI collective issued after finalize_world()");
  if (!g_progress) g_progress = std::make_unique<ProgressThread>();
  return g_progress->submit(std::move(fn));
}

WorkHandle run_soon(std::function<void()> fn, int64_t bytes) {
  // Below this size a collective costs less than handing it to the progress thread; gradient
  // buckets (MBs) stay asynchronous so they overlap backward.
  constexpr int64_t kInlineBytes = 512 * 1024;
  if (bytes < kInlineBytes) {
    std::unique_lock<std::mutex> lock(g_progress_mutex);
    if (g_progress_stopped) throw Error("MPI collective issued after finalize_world()");
    if (!g_progress) g_progress = std::make_unique<ProgressThread>();
    ProgressThread* thread = g_progress.get();
    lock.unlock();
    if (thread->try_run_inline(fn)) return completed_work();
  }
  return run_on_progress_thread(std::move(fn));
}

void stop_progress_thread() {
  std::lock_guard<std::mutex> lock(g_progress_mutex);
  if (g_progress) g_progress->stop();
  g_progress.reset();
  g_progress_stopped = true;
}

}  // namespace detail

MpiCommunicator::MpiCommunicator(MPI_Comm parent) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) throw Error("MpiCommunicator needs MPI: call init_world() under mpirun or srun first");
  MPI_Comm dup = MPI_COMM_NULL;
  int rank = 0, size = 1;
  detail::run_on_progress_thread([&] {
    check_mpi(MPI_Comm_dup(parent, &dup), "Comm_dup");
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    MPI_Comm_rank(dup, &rank);
    MPI_Comm_size(dup, &size);
  })->wait();
  comm_ = dup;
  rank_ = rank;
  size_ = size;
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || comm_ == MPI_COMM_NULL) return;
  MPI_Comm comm = comm_;
  try {
    detail::run_on_progress_thread([comm]() mutable { MPI_Comm_free(&comm); })->wait();
  } catch (const Error&) {
    // The progress thread is gone (finalize_world ran): MPI_Finalize frees communicators itself.
  }
}

void MpiCommunicator::check_cpu(const torch::Tensor& tensor, const char* op) const {
  check_tensor(tensor, op);
  if (!tensor.device().is_cpu()) {
    throw Error(std::string(op) + ": the MPI communicator reduces CPU tensors; got one on " + tensor.device().str());
  }
}

WorkHandle MpiCommunicator::allreduce_async(torch::Tensor tensor) {
  check_cpu(tensor, "allreduce");
  record(tensor.nbytes());
  if (tensor.numel() == 0) return completed_work();
  const int count = to_int_count(tensor.numel(), "allreduce");
  MPI_Comm comm = comm_;
  return detail::run_soon([tensor, count, comm] {
    torch::Tensor work = summable(tensor);
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, work.data_ptr(), count, transport_type(work.scalar_type()), MPI_SUM, comm),
              "Allreduce");
    if (!work.is_same(tensor)) tensor.copy_(work);
  }, tensor.nbytes());
}

WorkHandle MpiCommunicator::reduce_scatter_async(torch::Tensor input, torch::Tensor output,
                                                 std::vector<int64_t> counts) {
  check_cpu(input, "reduce_scatter");
  check_cpu(output, "reduce_scatter");
  if (input.scalar_type() != output.scalar_type()) throw Error("reduce_scatter: input and output dtypes differ");
  counts = resolve_counts(std::move(counts), input.numel(), output.numel(), "reduce_scatter");
  record(input.nbytes(), Kind::kReduceScatter);
  std::vector<int> int_counts;
  for (int64_t c : counts) int_counts.push_back(to_int_count(c, "reduce_scatter"));
  MPI_Comm comm = comm_;
  return detail::run_soon([input, output, int_counts, comm] {
    torch::Tensor send = summable(input);
    torch::Tensor receive = is_16bit_float(output) ? torch::empty({output.numel()}, send.options()) : output;
    check_mpi(MPI_Reduce_scatter(send.data_ptr(), receive.data_ptr(), int_counts.data(),
                                 transport_type(send.scalar_type()), MPI_SUM, comm),
              "Reduce_scatter");
    if (!receive.is_same(output)) output.view(-1).copy_(receive);
  }, input.nbytes());
}

WorkHandle MpiCommunicator::allgather_async(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) {
  check_cpu(input, "allgather");
  check_cpu(output, "allgather");
  if (input.scalar_type() != output.scalar_type()) throw Error("allgather: input and output dtypes differ");
  counts = resolve_counts(std::move(counts), output.numel(), input.numel(), "allgather");
  record(output.nbytes(), Kind::kAllgather);
  std::vector<int> int_counts;
  for (int64_t c : counts) int_counts.push_back(to_int_count(c, "allgather"));
  const std::vector<int> displs = displacements(int_counts);
  const auto* own_piece = static_cast<const char*>(output.data_ptr()) +
                          static_cast<int64_t>(displs[rank_]) * output.element_size();
  const bool in_place = input.data_ptr() == own_piece;
  MPI_Comm comm = comm_;
  return detail::run_soon([input, output, int_counts, displs, in_place, comm] {
    const MPI_Datatype type = transport_type(output.scalar_type());
    const void* send = in_place ? MPI_IN_PLACE : input.data_ptr();
    const int rank_count = in_place ? 0 : static_cast<int>(input.numel());
    check_mpi(MPI_Allgatherv(send, rank_count, type, output.data_ptr(), int_counts.data(), displs.data(), type, comm),
              "Allgatherv");
  }, output.nbytes());
}

WorkHandle MpiCommunicator::broadcast_async(torch::Tensor tensor, int root) {
  check_cpu(tensor, "broadcast");
  if (root < 0 || root >= size_) throw Error("broadcast: root " + std::to_string(root) + " is not a rank");
  record(tensor.nbytes());
  if (tensor.numel() == 0) return completed_work();
  const int count = to_int_count(tensor.numel(), "broadcast");
  MPI_Comm comm = comm_;
  return detail::run_soon([tensor, count, root, comm] {
    check_mpi(MPI_Bcast(tensor.data_ptr(), count, transport_type(tensor.scalar_type()), root, comm), "Bcast");
  }, tensor.nbytes());
}

void MpiCommunicator::barrier() {
  record(0);
  MPI_Comm comm = comm_;
  detail::run_soon([comm] {
    check_mpi(MPI_Barrier(comm), "Barrier");
  }, 0)->wait();
}

double MpiCommunicator::scalar_allreduce(double value, MPI_Op op) {
  record(sizeof(double));
  double result = value;
  MPI_Comm comm = comm_;
  detail::run_soon([&result, op, comm] {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, &result, 1, MPI_DOUBLE, op, comm), "Allreduce");
  }, sizeof(double))->wait();
  return result;
}

std::shared_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  MPI_Comm comm = comm_;
  MPI_Comm part = MPI_COMM_NULL;
  detail::run_on_progress_thread([comm, color, key, &part] {
    check_mpi(MPI_Comm_split(comm, color, key, &part), "Comm_split");
  })->wait();
  // The new communicator duplicates `part`, which is freed once that is done.
  auto sub = std::make_shared<MpiCommunicator>(part);
  detail::run_on_progress_thread([&part] { MPI_Comm_free(&part); })->wait();
  return sub;
}

double MpiCommunicator::max(double value) { return scalar_allreduce(value, MPI_MAX); }
double MpiCommunicator::sum(double value) { return scalar_allreduce(value, MPI_SUM); }

void MpiCommunicator::broadcast_bytes(void* data, int bytes, int root) {
  record(bytes);
  MPI_Comm comm = comm_;
  detail::run_on_progress_thread([data, bytes, root, comm] {
    check_mpi(MPI_Bcast(data, bytes, MPI_BYTE, root, comm), "Bcast");
  })->wait();
}

}  // namespace wxtrain::distributed
