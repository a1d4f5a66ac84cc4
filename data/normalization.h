#pragma once
// Per-variable mean and standard deviation, computed once from the training split and stored in
// checkpoints (by variable name) so that fine-tuning and forecasting see the same scaling.
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace wxtrain::data {

class Dataset;

class Normalization {
 public:
  Normalization() = default;
  // mean and std are float32 [V]; names give their order.
  Normalization(std::vector<std::string> names, torch::Tensor mean, torch::Tensor std);

  // Streams over time slices [begin, end) of the dataset (the training split), skipping masked
  // (NaN) points; sums in double so long datasets do not lose precision. A variable with zero
  // spread gets std 1 so that normalising never divides by zero.
  static Normalization compute(const Dataset& dataset, int64_t time_begin, int64_t time_end);
  // Leaves values unchanged (mean 0, std 1): for callers that want raw units through the loader.
  static Normalization identity(const std::vector<std::string>& names);

  // x is [..., V, lat, lon]. normalize also turns masked (NaN) points into 0, the field's mean,
  // so they carry no signal into the model.
  torch::Tensor normalize(const torch::Tensor& x) const;
  torch::Tensor denormalize(const torch::Tensor& x) const;

  const std::vector<std::string>& names() const { return names_; }
  const torch::Tensor& mean() const { return mean_; }
  const torch::Tensor& std() const { return std_; }
  int64_t num_variables() const { return static_cast<int64_t>(names_.size()); }

  // Keys "norm/mean/<name>", "norm/std/<name>" (0-d float32) and "norm/index/<name>" (0-d int64,
  // the channel), so a checkpoint records which statistics belong to which variable.
  std::map<std::string, torch::Tensor> to_map() const;
  // Reads what to_map wrote (other keys are ignored). Throws DataError when no statistics are
  // present or a variable lacks its mean or std.
  static Normalization from_map(const std::map<std::string, torch::Tensor>& map);

 private:
  torch::Tensor broadcastable(const torch::Tensor& stat, const torch::Tensor& x) const;

  std::vector<std::string> names_;
  torch::Tensor mean_, std_;
};

}  // namespace wxtrain::data
