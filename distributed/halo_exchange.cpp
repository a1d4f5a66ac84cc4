#include "distributed/halo_exchange.h"

#include <atomic>
#include <numeric>

#include <torch/autograd.h>

namespace wxtrain::distributed {
namespace {

std::atomic<int64_t> g_exchanges{0}, g_forward_bytes{0}, g_backward_exchanges{0}, g_backward_bytes{0};

int64_t row_numel(const torch::Tensor& t) {
  int64_t n = 1;
  for (int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
  return n;
}

class ExchangeHaloRows : public torch::autograd::Function<ExchangeHaloRows> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& send, Communicator* comm,
                               std::vector<int64_t> rows) {
    const torch::Tensor mine = send.contiguous();
    const int64_t per_row = row_numel(mine);
    std::vector<int64_t> counts;
    for (int64_t r : rows) counts.push_back(r * per_row);
    std::vector<int64_t> sizes = mine.sizes().vec();
    sizes[0] = std::accumulate(rows.begin(), rows.end(), int64_t{0});
    torch::Tensor out = torch::empty(sizes, mine.options());
    comm->allgather(mine, out, counts);
    g_exchanges.fetch_add(1, std::memory_order_relaxed);
    g_forward_bytes.fetch_add(out.numel() * out.element_size(), std::memory_order_relaxed);
    ctx->saved_data["counts"] = counts;
    ctx->saved_data["rows"] = rows[static_cast<size_t>(comm->rank())];
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);  // outlives the step (the state holds it)
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    const std::vector<int64_t> counts = ctx->saved_data["counts"].toIntVector();
    const torch::Tensor grad = grads[0].contiguous();
    std::vector<int64_t> sizes = grad.sizes().vec();
    sizes[0] = ctx->saved_data["rows"].toInt();
    torch::Tensor mine = torch::empty(sizes, grad.options());
    comm->reduce_scatter(grad, mine, counts);
    g_backward_exchanges.fetch_add(1, std::memory_order_relaxed);
    g_backward_bytes.fetch_add(grad.numel() * grad.element_size(), std::memory_order_relaxed);
    return {mine, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor exchange_halo_rows(const std::shared_ptr<Communicator>& comm, const torch::Tensor& send,
                                 const std::vector<int64_t>& rows) {
  TORCH_CHECK(send.dim() >= 1, "exchange_halo_rows: needs a tensor with a row dimension");
  if (!comm || comm->size() <= 1) return send;
  TORCH_CHECK(static_cast<int>(rows.size()) == comm->size() && rows[static_cast<size_t>(comm->rank())] == send.size(0),
              "exchange_halo_rows: ", rows.size(), " row counts for ", comm->size(), " ranks, this rank's ",
              send.size(0), " rows");
  return ExchangeHaloRows::apply(send, comm.get(), rows);
}

torch::Tensor allgather_along(const std::shared_ptr<Communicator>& comm, const torch::Tensor& x, int64_t dim,
                              const std::vector<int64_t>& sizes) {
  if (!comm || comm->size() <= 1) return x;
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  const torch::Tensor front = x.movedim(d, 0).contiguous();
  const int64_t per_row = row_numel(front);
  std::vector<int64_t> counts;
  for (int64_t s : sizes) counts.push_back(s * per_row);
  std::vector<int64_t> shape = front.sizes().vec();
  shape[0] = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  torch::Tensor out = torch::empty(shape, front.options());
  comm->allgather(front, out, counts);
  return out.movedim(0, d);
}

HaloStats halo_stats() {
  return {g_exchanges.load(), g_forward_bytes.load(), g_backward_exchanges.load(), g_backward_bytes.load()};
}

}  // namespace wxtrain::distributed
