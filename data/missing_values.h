#pragma once
// Missing values (fill values, NaN) in the training split, per channel: the share of all values
// missing, and the cells missing in every state (a land mask on sea-surface temperature, a band a
// satellite never saw). Computed in the same pass as the normalisation statistics and kept with
// them in checkpoints, because both describe the data the model was trained on:
//   - train and forecast report the shares at their start (report());
//   - training keeps missing values out of the loss and feeds them to the model as the channel's
//     mean (data/samples.h, Normalization::normalize), so they carry no signal either way;
//   - a forecast writes NaN, the fill value, at the cells missing in every state: the model never
//     learnt a value there, so the number it produces is not a forecast.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace wxtrain::data {

class MissingValues {
 public:
  MissingValues() = default;
  // Starts counting the channels `names` (states [V, lat, lon], V = names.size()).
  explicit MissingValues(std::vector<std::string> names);

  // One state, NaN where missing.
  void add(const torch::Tensor& state);

  // Whether statistics exist (false for a checkpoint written before they were recorded).
  bool recorded() const { return !names_.empty(); }
  // Whether any channel had any missing value.
  bool any() const;
  // The share of channel `name`'s values that were missing (0 when unknown).
  double share(const std::string& name) const;
  // The share of its cells missing in every state (0 when unknown).
  double always_share(const std::string& name) const;
  // bool [lat, lon]: the cells of channel `name` missing in every state; undefined when none is
  // (or the channel is unknown).
  torch::Tensor always_missing(const std::string& name) const;

  // For the start of train and forecast: the channels with missing values, each with the share of
  // cells missing in every state and of all values, and what wxtrain does with them; "" when no
  // channel has any.
  std::string report() const;

  // Checkpoint entries: "missing/share/<name>" (0-d float64) for every channel, and
  // "missing/always/<name>" (uint8 [lat, lon]) for the channels with cells missing in every state.
  void add_to_map(std::map<std::string, torch::Tensor>& map) const;
  // What add_to_map wrote (other keys ignored); empty (recorded() false) when there is none.
  // Throws DataError naming the entry when one is malformed.
  static MissingValues from_map(const std::map<std::string, torch::Tensor>& map);
  // The statistics of `names` that this holds, in that order (the others are left out).
  MissingValues subset(const std::vector<std::string>& names) const;

 private:
  struct Channel {
    double missing = 0, total = 0;  // values
    torch::Tensor always;           // bool [lat, lon]; undefined: none (after from_map) or no state yet
    double always_share = 0;
  };
  const Channel* find(const std::string& name) const;

  std::vector<std::string> names_;
  std::vector<Channel> channels_;
};

}  // namespace wxtrain::data
