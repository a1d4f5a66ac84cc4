#pragma once
// A hook around every run of a model's block (models/weather_model.h's run_block). The model knows
// nothing of what runs around its blocks; ZeRO-3 (distributed/sharded_parameters.h) installs one to
// all-gather a block's parameters just before it runs, prefetch the next block's, and arrange the
// gather again before the block's backward. It lives in core/ because the models and the
// distributed pieces both see it and neither may depend on the other.
#include <cstddef>
#include <functional>
#include <vector>

#include <torch/torch.h>

namespace wxtrain {

class BlockRunner {
 public:
  using Fn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;
  virtual ~BlockRunner() = default;
  // Runs `run(inputs)` (the block as the model would run it, checkpointed or plain) as the block
  // with index `block` in the model's block_names(), and returns its outputs.
  virtual std::vector<torch::Tensor> run_block(size_t block, const Fn& run, const std::vector<torch::Tensor>& inputs) = 0;
};

}  // namespace wxtrain
