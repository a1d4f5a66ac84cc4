#include "data/samples.h"

#include <cmath>

#include "core/error.h"
#include "data/dataset.h"
#include "data/normalization.h"

namespace wxtrain::data {

TimeSplit::TimeSplit(int64_t num_times, double val_fraction, SampleWindow window)
    : num_times_(num_times), window_(window) {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
    throw DataError("data.val_fraction must be in [0, 1), got " + std::to_string(val_fraction));
  }
  if (window.history < 1 || window.rollout_steps < 1) {
    throw DataError("data.history and data.rollout_steps must be at least 1, got " +
                    std::to_string(window.history) + " and " + std::to_string(window.rollout_steps));
  }
  const int64_t val_times = std::llround(val_fraction * static_cast<double>(num_times));
  train_end_ = num_times - val_times;
  const int64_t needed = window.history + window.rollout_steps;
  if (train_end_ < needed) {
    throw DataError("the training split has " + std::to_string(train_end_) + " of " +
                    std::to_string(num_times) + " times but one sample needs " + std::to_string(needed) +
                    " (history " + std::to_string(window.history) + " + rollout_steps " +
                    std::to_string(window.rollout_steps) + "); lower data.val_fraction or the window");
  }
}

std::vector<int64_t> TimeSplit::sample_times(Split split) const {
  std::vector<int64_t> times;
  for (int64_t t = begin(split) + window_.history - 1; t + window_.rollout_steps < end(split); ++t) {
    times.push_back(t);
  }
  return times;
}

Sample make_sample(const Dataset& dataset, const Normalization& normalization, const SampleWindow& window,
                   int64_t t) {
  const int64_t first = t - window.history + 1;
  const int64_t last = t + window.rollout_steps;
  TORCH_CHECK(first >= 0 && last < dataset.num_times(), "sample at time ", t, " needs states ", first,
              "..", last, " but the dataset has ", dataset.num_times());
  std::vector<torch::Tensor> states;
  for (int64_t s = first; s <= last; ++s) states.push_back(dataset.state(s));
  const torch::Tensor raw = torch::stack(states);  // [H + R, V, lat, lon]
  const torch::Tensor normalized = normalization.normalize(raw);
  const int64_t V = dataset.num_variables();

  Sample sample;
  sample.time = t;
  sample.input = normalized.slice(0, 0, window.history).reshape({window.history * V, raw.size(2), raw.size(3)});
  sample.target = normalized.slice(0, window.history).contiguous();
  if (dataset.has_fill_values()) {
    sample.target_mask = (~torch::isnan(raw.slice(0, window.history))).to(torch::kFloat32);
  }
  return sample;
}

}  // namespace wxtrain::data
