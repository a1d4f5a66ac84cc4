#include "distributed/communicator.h"

#include "core/error.h"
#include "distributed/mpi_communicator.h"
#include "distributed/nccl/nccl_communicator.h"

namespace wxtrain::distributed {
namespace {

class DoneWork final : public Work {
 public:
  void wait() override {}
  bool completed() override { return true; }
};

bool same_memory(const torch::Tensor& a, const torch::Tensor& b) {
  return a.data_ptr() == b.data_ptr() && a.numel() == b.numel();
}

}  // namespace

WorkHandle completed_work() {
  static WorkHandle done = std::make_shared<DoneWork>();
  return done;
}

void Communicator::allreduce_mean(const torch::Tensor& tensor) {
  allreduce(tensor);
  if (size() > 1) tensor.div_(size());
}

void Communicator::check_tensor(const torch::Tensor& tensor, const char* op) {
  if (!tensor.defined()) throw Error(std::string(op) + ": undefined tensor");
  if (!tensor.is_contiguous()) throw Error(std::string(op) + ": tensor must be contiguous");
  switch (tensor.scalar_type()) {
    case torch::kFloat:
    case torch::kBFloat16:
    case torch::kHalf:
    case torch::kDouble:
    case torch::kInt:
    case torch::kLong:
      return;
    default:
      throw Error(std::string(op) + ": unsupported dtype " + std::string(c10::toString(tensor.scalar_type())) +
                  " (expected float32, bfloat16, float16, float64, int32 or int64)");
  }
}

std::vector<int64_t> Communicator::resolve_counts(std::vector<int64_t> counts, int64_t whole, int64_t piece,
                                                  const char* op) const {
  const int n = size();
  if (counts.empty()) {
    if (whole != piece * n) {
      throw Error(std::string(op) + ": " + std::to_string(whole) + " elements do not split into " +
                  std::to_string(n) + " pieces of " + std::to_string(piece));
    }
    return std::vector<int64_t>(n, piece);
  }
  if (static_cast<int>(counts.size()) != n) {
    throw Error(std::string(op) + ": " + std::to_string(counts.size()) + " counts for " + std::to_string(n) + " ranks");
  }
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  if (total != whole || counts[rank()] != piece) {
    throw Error(std::string(op) + ": counts sum to " + std::to_string(total) + " (tensor has " +
                std::to_string(whole) + ") and give this rank " + std::to_string(counts[rank()]) +
                " elements (tensor has " + std::to_string(piece) + ")");
  }
  return counts;
}

WorkHandle LocalCommunicator::allreduce_async(torch::Tensor tensor) {
  check_tensor(tensor, "allreduce");
  return completed_work();
}

WorkHandle LocalCommunicator::reduce_scatter_async(torch::Tensor input, torch::Tensor output,
                                                   std::vector<int64_t> counts) {
  check_tensor(input, "reduce_scatter");
  check_tensor(output, "reduce_scatter");
  resolve_counts(std::move(counts), input.numel(), output.numel(), "reduce_scatter");
  if (!same_memory(input, output)) output.view(-1).copy_(input.view(-1));
  return completed_work();
}

WorkHandle LocalCommunicator::allgather_async(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) {
  check_tensor(input, "allgather");
  check_tensor(output, "allgather");
  resolve_counts(std::move(counts), output.numel(), input.numel(), "allgather");
  if (!same_memory(input, output)) output.view(-1).copy_(input.view(-1));
  return completed_work();
}

WorkHandle LocalCommunicator::broadcast_async(torch::Tensor tensor, int root) {
  check_tensor(tensor, "broadcast");
  if (root != 0) throw Error("broadcast: root " + std::to_string(root) + " is not a rank of a world of one");
  return completed_work();
}

std::shared_ptr<Communicator> make_communicator(const World& world, const DistributedConfig& config,
                                                const torch::Device& device) {
  const std::string& backend = config.backend;
  if (backend != "auto" && backend != "mpi" && backend != "nccl") {
    throw ConfigError("distributed.backend = \"" + backend + "\": expected auto, mpi or nccl");
  }
  const bool want_nccl = backend == "nccl" || (backend == "auto" && device.is_cuda());
  if (want_nccl && !nccl_available()) {
    throw Error("distributed.backend = " + backend + " on device " + device.str() +
                ": wxtrain was built against a LibTorch without CUDA, so without NCCL (build against a CUDA "
                "LibTorch, e.g. the torch wheel scripts/install_deps.sh installs)");
  }
  if (world.size <= 1) return std::make_shared<LocalCommunicator>();
  if (want_nccl) {
    if (!device.is_cuda()) {
      throw ConfigError("distributed.backend = nccl needs a CUDA device; train.device is " + device.str());
    }
    return make_nccl_communicator(world, device);
  }
  if (!device.is_cpu()) {
    throw ConfigError("distributed.backend = mpi reduces CPU tensors; train.device is " + device.str() +
                      " (use backend = \"nccl\" or \"auto\")");
  }
  if (!world.mpi) throw Error("a world of " + std::to_string(world.size) + " ranks without MPI initialised");
  return std::make_shared<MpiCommunicator>();
}

}  // namespace wxtrain::distributed
