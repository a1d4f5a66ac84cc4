#pragma once
// Training samples cut from the time axis. The validation split is the trailing val_fraction of the
// time axis and no sample window crosses the train/validation boundary, so validation never sees
// a state the model was trained to predict.
#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace wxtrain::data {

class Dataset;
class Normalization;

enum class Split { kTrain, kValidation };

// States per sample: `history` inputs ending at t, then `rollout_steps` targets after t.
struct SampleWindow {
  int64_t history = 2;
  int64_t rollout_steps = 1;
};

class TimeSplit {
 public:
  // Validation gets round(val_fraction * num_times) trailing times. Throws DataError when
  // val_fraction is outside [0, 1) or the training split cannot hold one sample window.
  TimeSplit(int64_t num_times, double val_fraction, SampleWindow window);

  int64_t begin(Split split) const { return split == Split::kTrain ? 0 : train_end_; }
  int64_t end(Split split) const { return split == Split::kTrain ? train_end_ : num_times_; }
  const SampleWindow& window() const { return window_; }

  // Sample times t whose whole window [t - history + 1, t + rollout_steps] lies in the split
  // (empty for a validation split too short for one window).
  std::vector<int64_t> sample_times(Split split) const;

 private:
  int64_t num_times_ = 0;
  int64_t train_end_ = 0;
  SampleWindow window_;
};

struct Sample {
  torch::Tensor input;        // [V * history, lat, lon], channel = h * V + v, oldest state first
  torch::Tensor target;       // [rollout_steps, V, lat, lon]
  torch::Tensor target_mask;  // like target, 1 valid / 0 fill; undefined when the data has no fill values
  int64_t time = 0;           // t: the newest input state
};

// A normalised sample (masked points are 0 in input and target).
Sample make_sample(const Dataset& dataset, const Normalization& normalization, const SampleWindow& window,
                   int64_t t);

}  // namespace wxtrain::data
