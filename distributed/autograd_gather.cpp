#include "distributed/autograd_gather.h"

#include <torch/autograd.h>

namespace wxtrain::distributed {
namespace {

class AllgatherRows : public torch::autograd::Function<AllgatherRows> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, Communicator* comm) {
    const torch::Tensor mine = x.contiguous();
    std::vector<int64_t> sizes = mine.sizes().vec();
    const int64_t rows = sizes.empty() ? 1 : sizes[0];
    sizes[0] = rows * comm->size();
    torch::Tensor out = torch::empty(sizes, mine.options());
    comm->allgather(mine, out);
    ctx->saved_data["rank"] = static_cast<int64_t>(comm->rank());
    ctx->saved_data["rows"] = rows;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const int64_t rank = ctx->saved_data["rank"].toInt(), rows = ctx->saved_data["rows"].toInt();
    return {grads[0].narrow(0, rank * rows, rows), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor allgather_rows(const std::shared_ptr<Communicator>& comm, const torch::Tensor& x) {
  TORCH_CHECK(x.dim() >= 1, "allgather_rows: needs a tensor with a row dimension");
  if (!comm || comm->size() <= 1) return x;
  return AllgatherRows::apply(x, comm.get());
}

}  // namespace wxtrain::distributed
