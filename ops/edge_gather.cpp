#include "ops/edge_gather.h"

#include <ATen/Parallel.h>

#include "ops/bf16_data.h"
#include "ops/kernels/fused_kernels.h"

namespace wxtrain::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Edges per task: enough rows to amortise the task, few enough for both cores to share a batch.
constexpr int64_t kEdgeGrain = 256;

class GatherEdges : public torch::autograd::Function<GatherEdges> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a_in, const torch::Tensor& b_in,
                               const torch::Tensor& c_in, const torch::Tensor& senders_in,
                               const torch::Tensor& receivers_in) {
    const torch::Tensor a = a_in.contiguous(), b = b_in.contiguous(), c = c_in.contiguous();
    const torch::Tensor senders = senders_in.contiguous(), receivers = receivers_in.contiguous();
    const int64_t batch = a.size(0), nodes = a.size(1), width = a.size(2), edges = senders.size(0);
    const bool shared_c = c.dim() == 2;  // [edges, width], the same for every sample
    torch::Tensor out = torch::empty({batch, edges, width}, a.options());
    const int64_t* s = senders.data_ptr<int64_t>();
    const int64_t* r = receivers.data_ptr<int64_t>();
    const bool bf16 = a.scalar_type() == torch::kBFloat16;
    at::parallel_for(0, batch * edges, kEdgeGrain, [&](int64_t begin, int64_t end) {
      while (begin < end) {  // split the range at sample boundaries
        const int64_t n = begin / edges, k0 = begin % edges, k1 = std::min(edges, k0 + (end - begin));
        const int64_t node_offset = n * nodes * width, c_offset = (shared_c ? 0 : n * edges * width) + k0 * width;
        const int64_t out_offset = (n * edges + k0) * width;
        if (bf16) {
          kernels::edge_gather_sum_bf16(bf16_data(a) + node_offset, bf16_data(b) + node_offset, bf16_data(c) + c_offset,
                                        s + k0, r + k0, bf16_data(out) + out_offset, k1 - k0, width);
        } else {
          kernels::edge_gather_sum(a.data_ptr<float>() + node_offset, b.data_ptr<float>() + node_offset,
                                   c.data_ptr<float>() + c_offset, s + k0, r + k0, out.data_ptr<float>() + out_offset,
                                   k1 - k0, width);
        }
        begin += k1 - k0;
      }
    });
    ctx->save_for_backward({senders, receivers});
    ctx->saved_data["nodes"] = nodes;
    ctx->saved_data["shared_c"] = shared_c;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const torch::Tensor& grad = grad_outputs[0];
    if (!grad.defined()) return {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    const auto saved = ctx->get_saved_variables();
    const int64_t nodes = ctx->saved_data["nodes"].toInt();
    const std::vector<int64_t> node_shape = {grad.size(0), nodes, grad.size(2)};
    torch::Tensor da = torch::zeros(node_shape, grad.options()).index_add_(1, saved[0], grad);
    torch::Tensor db = torch::zeros(node_shape, grad.options()).index_add_(1, saved[1], grad);
    torch::Tensor dc = ctx->saved_data["shared_c"].toBool() ? grad.sum(0) : grad;
    return {da, db, dc, torch::Tensor(), torch::Tensor()};
  }
};

bool fusable(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c, const torch::Tensor& senders,
             const torch::Tensor& receivers) {
  const auto t = a.scalar_type();
  return cpu_fusion_enabled() && a.device().is_cpu() && (t == torch::kFloat || t == torch::kBFloat16) &&
         b.scalar_type() == t && c.scalar_type() == t && a.dim() == 3 && a.sizes() == b.sizes() &&
         (c.dim() == 2 || (c.dim() == 3 && c.size(0) == a.size(0))) && c.size(-1) == a.size(2) &&
         senders.scalar_type() == torch::kLong && receivers.scalar_type() == torch::kLong && senders.dim() == 1 &&
         receivers.sizes() == senders.sizes() && c.size(-2) == senders.size(0);
}

}  // namespace

torch::Tensor gather_edges(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c,
                           const torch::Tensor& senders, const torch::Tensor& receivers) {
  if (fusable(a, b, c, senders, receivers)) return GatherEdges::apply(a, b, c, senders, receivers);
  // index_select's backward needs no saved output, so the second gather can add in place.
  torch::Tensor pre = a.index_select(1, senders);
  pre.add_(b.index_select(1, receivers));
  return pre + c;
}

}  // namespace wxtrain::ops
