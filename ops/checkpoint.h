#pragma once
// Activation checkpointing: run a block without keeping its intermediate activations, and
// recompute it in backward. Implemented as a torch::autograd::Function whose inputs are the
// block's inputs *and* its parameters, so parameter gradients flow back through the engine like any
// other (accumulate-grad hooks, and so DDP's bucketed all-reduce, fire as usual) and the block's
// first input need not require grad. The recompute restores the RNG and autocast state of the
// forward, so gradients equal those of the plain run.
#include <functional>
#include <vector>

#include <torch/torch.h>

namespace wxtrain::ops {

using BlockFn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

// Runs fn(inputs) and arranges for it to be recomputed in backward. `params` are the tensors fn
// reads that need gradients (usually block->parameters()).
std::vector<torch::Tensor> checkpoint(const BlockFn& fn, const std::vector<torch::Tensor>& inputs,
                                      const std::vector<torch::Tensor>& params);

}  // namespace wxtrain::ops
