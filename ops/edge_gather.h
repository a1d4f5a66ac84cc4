#pragma once
// The first layer of the gnn's edge MLP, summed per edge: out[:, k] = a[:, senders[k]] +
// b[:, receivers[k]] + c[:, k], where a and b are the sender and receiver projections of the node
// latents ([batch, nodes, width]) and c the projection of the edge latents ([batch, edges, width],
// or [edges, width] shared by the batch).
//
// Unfused that is two index_selects, an in-place add and a broadcast add: four [batch, edges,
// width] passes and two temporaries. Fused (ops/kernels/, CPU with fusion on, fp32 or bf16) it
// is one pass; in fp32 the result is bit for bit the unfused one (the same additions in the same
// order), in bf16 it sums in fp32 and rounds once. The backward is the same index_adds and batch
// sum as the unfused graph's.
#include <torch/torch.h>

#include "ops/cpu_fusion.h"

namespace wxtrain::ops {

torch::Tensor gather_edges(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c,
                           const torch::Tensor& senders, const torch::Tensor& receivers);

}  // namespace wxtrain::ops
