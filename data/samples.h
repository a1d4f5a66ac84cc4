#pragma once
// Training samples cut from the time axis. The validation split is the trailing val_fraction of the
// time axis, or the states inside data.val_period; no sample window crosses the train/validation
// boundary, so validation never sees a state the model was trained to predict. On a time axis of
// dates a sample's states must be exactly one time step apart: a window that a gap in the archive
// breaks is skipped (and counted), never trained on as if the states were consecutive.
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/config.h"

namespace wxtrain::data {

class Dataset;
class Normalization;
struct TimeAxis;

enum class Split { kTrain, kValidation };

// States per sample: `history` inputs ending at t, then `rollout_steps` targets after t.
struct SampleWindow {
  int64_t history = 2;
  int64_t rollout_steps = 1;
};

class TimeSplit {
 public:
  // Positions only (no dates): validation gets round(val_fraction * num_times) trailing times.
  // Throws DataError when val_fraction is outside [0, 1) or the training split cannot hold one
  // sample window.
  TimeSplit(int64_t num_times, double val_fraction, SampleWindow window);
  // On the dataset's axis: by data.train_period / data.val_period when given (dates needed), else
  // by val_fraction. With dates, windows whose states are not one axis.step_seconds apart are
  // skipped. Throws DataError (naming the key, the period or the spacing found) when a period is
  // malformed or holds no state, or the training split yields no sample.
  TimeSplit(const TimeAxis& axis, const DataConfig& config, SampleWindow window);

  int64_t begin(Split split) const { return split == Split::kTrain ? train_begin_ : val_begin_; }
  int64_t end(Split split) const { return split == Split::kTrain ? train_end_ : val_end_; }
  const SampleWindow& window() const { return window_; }

  // Sample times t whose whole window [t - history + 1, t + rollout_steps] lies in the split
  // (and, with dates, is evenly spaced); empty for a validation split too short for one window.
  std::vector<int64_t> sample_times(Split split) const;
  // Windows inside the split that a gap in the time axis broke.
  int64_t skipped(Split split) const;

 private:
  std::vector<int64_t> windows(Split split, bool complete) const;

  int64_t train_begin_ = 0, train_end_ = 0, val_begin_ = 0, val_end_ = 0;
  SampleWindow window_;
  std::vector<int64_t> seconds_;  // per state, empty without dates
  int64_t step_seconds_ = 0;
};

// One line for the start of `train`: channels, grid, the time axis (dates, spacing, time_step) and
// the samples of each split with the windows a gap skipped.
std::string describe_samples(const Dataset& dataset, const TimeSplit& split);

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
