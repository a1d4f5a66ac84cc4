#pragma once
// Per-channel mean and standard deviation, computed once from the training split and stored in
// checkpoints (by channel name) so that fine-tuning and forecasting see the same scaling. The
// channels are the dataset's (every role), then its static fields, then its computed forcings.
// For the dataset's channels it also keeps the standard deviation of one-step differences (the
// residual normalisation: the model's tendency is scaled by it, as GraphCast does).
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "data/missing_values.h"

namespace wxtrain::data {

class Dataset;

class Normalization {
 public:
  Normalization() = default;
  // mean and std are float32 [V]; names give their order.
  Normalization(std::vector<std::string> names, torch::Tensor mean, torch::Tensor std);

  // Streams over time slices [begin, end) of the dataset (the training split), skipping masked
  // (NaN) points; sums in double so long datasets do not lose precision. A variable with zero
  // spread gets std 1 so that normalising never divides by zero. One-step differences are taken
  // between consecutive states exactly one time step apart (a gap breaks the pair); static fields
  // over their grid points; computed forcings at up to 64 training times spread over the split.
  static Normalization compute(const Dataset& dataset, int64_t time_begin, int64_t time_end);
  // The statistics of `names`, in that order (a sample's prognostic part, its forcings, ...).
  // Throws DataError naming the first channel that has none.
  Normalization subset(const std::vector<std::string>& names) const;
  // Standard deviation of one-step differences per channel, float32 [V], in data units; undefined
  // where they were not computed (static fields, computed forcings, an older checkpoint).
  const torch::Tensor& diff_std() const { return diff_std_; }
  void set_diff_std(torch::Tensor diff_std) { diff_std_ = std::move(diff_std); }
  // The dataset's channels' missing values in the same training split (data/missing_values.h);
  // not recorded for static fields, computed forcings or an older checkpoint.
  const MissingValues& missing() const { return missing_; }
  void set_missing(MissingValues missing) { missing_ = std::move(missing); }
  // Replaces the mean and std of the data channels whose store records its own statistics
  // (VariableInfo::stored_mean/stored_stdev: an anemoi-datasets store's, over its statistics
  // period) by those, so a model trains on the normalisation anemoi's tools use; returns how many
  // channels took them. The difference statistics stay computed.
  int64_t take_stored_statistics(const Dataset& dataset);
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

  // Keys "norm/mean/<name>", "norm/std/<name>", "norm/diff_std/<name>" (0-d float32; diff_std
  // NaN where none) and "norm/index/<name>" (0-d int64, the channel), so a checkpoint records
  // which statistics belong to which channel; and the missing values' "missing/*" entries.
  std::map<std::string, torch::Tensor> to_map() const;
  // Reads what to_map wrote (other keys are ignored). Throws DataError when no statistics are
  // present or a variable lacks its mean or std.
  static Normalization from_map(const std::map<std::string, torch::Tensor>& map);

 private:
  torch::Tensor broadcastable(const torch::Tensor& stat, const torch::Tensor& x) const;

  std::vector<std::string> names_;
  torch::Tensor mean_, std_;
  torch::Tensor diff_std_;  // [V], NaN where not computed; undefined when none was
  MissingValues missing_;
};

}  // namespace wxtrain::data
