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
#include "data/dataset.h"
#include "data/normalization.h"

namespace wxtrain::data {

class Dataset;

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
  // by val_fraction. With dates, windows whose states are not one model step apart
  // (TimeAxis::one_step_apart) are skipped. Throws DataError (naming the key, the period or the
  // spacing found) when a period is malformed or holds no state, or the training split yields no
  // sample.
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
  TimeAxis axis_;  // the dates and the model's step, which a sample's states must follow
};

// One line for the start of `train`: channels, grid, the time axis (dates, spacing, time_step) and
// the samples of each split with the windows a gap skipped.
std::string describe_samples(const Dataset& dataset, const TimeSplit& split);
// The same with the validation samples counted on `validation`'s windows (train.val_lead_steps
// may roll validation out further than training).
std::string describe_samples(const Dataset& dataset, const TimeSplit& split, const TimeSplit& validation);

// A sample laid out as the model sees it (core/config.h, ChannelLayout): P prognostic, D
// diagnostic, F forcing (file forcings then computed) and S static channels.
struct Sample {
  torch::Tensor input;        // [P * history, lat, lon], channel = h * P + p, oldest state first
  // [rollout_steps, F + S, lat, lon]: for rollout step k the forcings at that step's valid time
  // (state t + 1 + k), then the static fields; F + S may be 0.
  torch::Tensor forcings;
  torch::Tensor target;       // [rollout_steps, P + D, lat, lon]
  // Like target, 1 valid / 0 missing; undefined when the data has no missing values (no fill value
  // declared, and no NaN in the training split: Normalization::missing()).
  torch::Tensor target_mask;
  int64_t time = 0;           // t: the newest input state
};

// Cuts normalised samples (masked points are 0 in input, forcings and target) from a dataset:
// the channel selections and the normalised static fields are prepared once.
// Under model parallelism (Dataset::set_band before the maker is made) the samples are the
// band's: [.., band rows, lon], from the band's states, static fields and computed forcings.
class SampleMaker {
 public:
  // `normalization` must cover every channel of the dataset, its static fields and its computed
  // forcings (Normalization::compute does); throws DataError naming a channel it lacks.
  SampleMaker(const Dataset& dataset, const Normalization& normalization, SampleWindow window);
  Sample make(int64_t t) const;
  // One rollout step's model inputs besides the window: the file forcings (taken from
  // `file_state`, the raw [V, lat, lon] state at that time; may be undefined when the run has
  // none), then the computed forcings at `seconds`, then the static fields; [F + S, lat, lon]
  // normalised. make() calls it per step; forecast calls it past the archive's end.
  torch::Tensor step_forcings(int64_t seconds, const torch::Tensor& file_state) const;

  const SampleWindow& window() const { return window_; }
  int64_t num_forcings() const;  // F + S

 private:
  const Dataset& dataset_;
  SampleWindow window_;
  torch::Tensor prognostic_, outputs_, file_forcings_;  // int64 channel indices into a state
  Normalization prognostic_norm_, output_norm_, file_forcing_norm_, computed_norm_;
  torch::Tensor statics_;  // [S, lat, lon] normalised
  bool mask_targets_ = false;  // the data has missing values: samples carry target_mask
};

// One sample through a SampleMaker made for it (tests, one-off callers).
Sample make_sample(const Dataset& dataset, const Normalization& normalization, const SampleWindow& window,
                   int64_t t);

}  // namespace wxtrain::data
