#include "data/samples.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "data/dataset.h"
#include "data/normalization.h"

namespace wxtrain::data {

namespace {

void check_window(const SampleWindow& window) {
  if (window.history < 1 || window.rollout_steps < 1) {
    throw DataError("data.history and data.rollout_steps must be at least 1, got " +
                    std::to_string(window.history) + " and " + std::to_string(window.rollout_steps));
  }
}

// The states [begin, end) of a sorted axis whose dates fall in [first, last] of `period`; a date
// without a time of day means the whole day ("2015-12-31" runs to 23:59:59).
std::pair<int64_t, int64_t> period_range(const TimeAxis& axis, const std::vector<std::string>& period,
                                         const std::string& key) {
  std::vector<int64_t> bounds;
  for (const auto& text : period) {
    try {
      bounds.push_back(to_seconds(parse_date(text, axis.calendar), axis.calendar));
    } catch (const DataError& error) {
      throw DataError("data." + key + ": " + error.what());
    }
  }
  if (period[1].size() == 10) bounds[1] += 86400 - 1;
  if (bounds[1] < bounds[0]) {
    throw DataError("data." + key + " = [\"" + period[0] + "\", \"" + period[1] + "\"] ends before it begins");
  }
  const auto lo = std::lower_bound(axis.seconds.begin(), axis.seconds.end(), bounds[0]);
  const auto hi = std::upper_bound(axis.seconds.begin(), axis.seconds.end(), bounds[1]);
  if (lo >= hi) {
    throw DataError("data." + key + " = [\"" + period[0] + "\", \"" + period[1] + "\"] holds no state of the data, which runs from " +
                    axis.label(0) + " to " + axis.label(axis.size() - 1));
  }
  return {lo - axis.seconds.begin(), hi - axis.seconds.begin()};
}

}  // namespace

TimeSplit::TimeSplit(int64_t num_times, double val_fraction, SampleWindow window)
    : TimeSplit(
          [&] {
            TimeAxis axis;
            for (int64_t t = 0; t < num_times; ++t) axis.raw.push_back(static_cast<double>(t));
            return axis;
          }(),
          [&] {
            DataConfig config;
            config.val_fraction = val_fraction;
            return config;
          }(),
          window) {}

TimeSplit::TimeSplit(const TimeAxis& axis, const DataConfig& config, SampleWindow window) : window_(window) {
  check_window(window);
  const int64_t num_times = axis.size();
  axis_ = axis;
  if (!config.train_period.empty()) {
    if (!axis.has_dates) {
      throw DataError("data.train_period and data.val_period split by date, but the data's time coordinate has no CF "
                      "units (\"hours since 1979-01-01\"); use data.val_fraction");
    }
    std::tie(train_begin_, train_end_) = period_range(axis, config.train_period, "train_period");
    std::tie(val_begin_, val_end_) = period_range(axis, config.val_period, "val_period");
    if (train_begin_ < val_end_ && val_begin_ < train_end_) {
      throw DataError("data.train_period and data.val_period overlap (from " + axis.label(std::max(train_begin_, val_begin_)) +
                      "): validation would score states the model trained on");
    }
  } else {
    const double val_fraction = config.val_fraction;
    if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
      throw DataError("data.val_fraction must be in [0, 1), got " + std::to_string(val_fraction));
    }
    const int64_t val_times = std::llround(val_fraction * static_cast<double>(num_times));
    train_begin_ = 0;
    train_end_ = val_begin_ = num_times - val_times;
    val_end_ = num_times;
  }
  const int64_t needed = window.history + window.rollout_steps;
  if (train_end_ - train_begin_ < needed) {
    throw DataError("the training split has " + std::to_string(train_end_ - train_begin_) + " of " +
                    std::to_string(num_times) + " times but one sample needs " + std::to_string(needed) +
                    " (history " + std::to_string(window.history) + " + rollout_steps " +
                    std::to_string(window.rollout_steps) + "); " +
                    (config.train_period.empty() ? "lower data.val_fraction or the window" : "widen data.train_period"));
  }
  if (sample_times(Split::kTrain).empty()) {
    // Every window is broken: the data is not spaced at the step asked for.
    std::string spacing = "none";
    for (int64_t t = train_begin_ + 1; t < train_end_; ++t) {
      if (!axis.one_step_apart(t - 1, t)) {
        spacing = format_duration(axis.seconds[t] - axis.seconds[t - 1]) + " (between " + axis.label(t - 1) + " and " +
                  axis.label(t) + ")";
        break;
      }
    }
    throw DataError("no training sample: a sample needs " + std::to_string(needed) + " states " +
                    axis.step_text() + " apart (data.time_step" +
                    (config.time_step.empty() ? " not set: the data's most common spacing" : " = \"" + config.time_step + "\"") +
                    ") but the time axis is spaced " + spacing);
  }
}

std::vector<int64_t> TimeSplit::windows(Split split, bool complete) const {
  std::vector<int64_t> times;
  for (int64_t t = begin(split) + window_.history - 1; t + window_.rollout_steps < end(split); ++t) {
    bool even = true;
    for (int64_t s = t - window_.history + 1; s < t + window_.rollout_steps && even; ++s) {
      even = axis_.one_step_apart(s, s + 1);
    }
    if (even == complete) times.push_back(t);
  }
  return times;
}

std::vector<int64_t> TimeSplit::sample_times(Split split) const { return windows(split, true); }

int64_t TimeSplit::skipped(Split split) const { return static_cast<int64_t>(windows(split, false).size()); }

std::string describe_samples(const Dataset& dataset, const TimeSplit& split) {
  return describe_samples(dataset, split, split);
}

std::string describe_samples(const Dataset& dataset, const TimeSplit& split, const TimeSplit& validation) {
  const TimeAxis& axis = dataset.time_axis();
  std::ostringstream out;
  const auto count = [&](const char* role) { return dataset.channel_indices(role).size(); };
  out << "data: " << dataset.num_variables() << " channels (" << count("prognostic") << " prognostic";
  if (count("diagnostic")) out << ", " << count("diagnostic") << " diagnostic";
  if (count("forcing")) out << ", " << count("forcing") << " forcing";
  out << ")";
  if (!dataset.static_names().empty()) out << " + " << dataset.static_names().size() << " static";
  if (!dataset.computed_forcing_names().empty()) out << " + " << dataset.computed_forcing_names().size() << " computed forcings";
  if (dataset.point_set()) {
    // "on reduced Gaussian O12, 1008 cells (Gaussian weight / points in the row)": what the area
    // weights of the loss, the scores and the statistics are.
    out << " on " << dataset.grid().description;
  } else {
    out << " on " << dataset.num_lat() << " x " << dataset.num_lon();
  }
  if (!dataset.point_set() && !dataset.lat().empty() && dataset.has_coordinates())
    out << " (lat " << dataset.lat().front() << ".." << dataset.lat().back() << ", lon " << dataset.lon().front() << ".."
        << dataset.lon().back() << ")";
  if (!dataset.has_coordinates())
    out << " grid points without latitudes and longitudes (" << dataset.no_coordinates()
        << ": the loss and the scores are unweighted; data.region, data.forcings and regridding are unavailable)";
  out << ", " << dataset.num_times() << " states";
  if (axis.has_dates) {
    out << " " << axis.label(0) << " .. " << axis.label(axis.size() - 1) << " every " << axis.step_text();
    if (dataset.source_times() != dataset.num_times()) {
      out << " (of " << dataset.source_times() << " every " << dataset.source_spacing() << ")";
    }
  }
  out << "; samples: " << split.sample_times(Split::kTrain).size() << " training";
  if (const int64_t skipped = split.skipped(Split::kTrain)) out << " (" << skipped << " skipped: states missing at that spacing)";
  out << ", " << validation.sample_times(Split::kValidation).size() << " validation";
  if (const int64_t skipped = validation.skipped(Split::kValidation)) out << " (" << skipped << " skipped)";
  for (const std::string& note : dataset.reader_notes()) out << "\nnote: " << note;
  return out.str();
}

namespace {
std::vector<std::string> names_of(const Dataset& dataset, const std::vector<int64_t>& indices) {
  std::vector<std::string> names;
  for (int64_t i : indices) names.push_back(dataset.variables()[static_cast<size_t>(i)].name);
  return names;
}
}  // namespace

SampleMaker::SampleMaker(const Dataset& dataset, const Normalization& normalization, SampleWindow window)
    : dataset_(dataset), window_(window) {
  const std::vector<int64_t> prognostic = dataset.channel_indices("prognostic");
  std::vector<int64_t> outputs = prognostic;
  for (int64_t i : dataset.channel_indices("diagnostic")) outputs.push_back(i);
  const std::vector<int64_t> file_forcings = dataset.channel_indices("forcing");
  prognostic_ = torch::tensor(prognostic, torch::kInt64);
  outputs_ = torch::tensor(outputs, torch::kInt64);
  file_forcings_ = torch::tensor(file_forcings, torch::kInt64);
  prognostic_norm_ = normalization.subset(names_of(dataset, prognostic));
  output_norm_ = normalization.subset(names_of(dataset, outputs));
  file_forcing_norm_ = normalization.subset(names_of(dataset, file_forcings));
  computed_norm_ = normalization.subset(dataset.computed_forcing_names());
  // The band's static fields under model parallelism (Dataset::set_band), the whole grid's otherwise.
  statics_ = normalization.subset(dataset.static_names()).normalize(dataset.band_static_fields());
  // NaN in a file that declares no fill value (netCDF4-python writes np.nan without _FillValue)
  // is missing all the same: the statistics' pass over the training split saw it.
  mask_targets_ = dataset.has_fill_values() || normalization.missing().any();
}

int64_t SampleMaker::num_forcings() const {
  return file_forcings_.size(0) + static_cast<int64_t>(dataset_.computed_forcing_names().size()) + statics_.size(0);
}

torch::Tensor SampleMaker::step_forcings(int64_t seconds, const torch::Tensor& file_state) const {
  std::vector<torch::Tensor> parts;
  if (file_forcings_.size(0) > 0) parts.push_back(file_forcing_norm_.normalize(file_state.index_select(0, file_forcings_)));
  if (!dataset_.computed_forcing_names().empty()) parts.push_back(computed_norm_.normalize(dataset_.band_computed_forcings(seconds)));
  parts.push_back(statics_);
  return torch::cat(parts, 0);
}

Sample SampleMaker::make(int64_t t) const {
  const int64_t first = t - window_.history + 1;
  const int64_t last = t + window_.rollout_steps;
  TORCH_CHECK(first >= 0 && last < dataset_.num_times(), "sample at time ", t, " needs states ", first, "..", last,
              " but the dataset has ", dataset_.num_times());
  std::vector<torch::Tensor> states;
  // The band's states under model parallelism: only its rows were read from the archive.
  for (int64_t s = first; s <= last; ++s) states.push_back(dataset_.band_state(s));  // stack copies
  const torch::Tensor raw = torch::stack(states);  // [H + R, V, lat, lon]
  const int64_t H = window_.history, P = prognostic_.size(0);

  Sample sample;
  sample.time = t;
  sample.input = prognostic_norm_.normalize(raw.slice(0, 0, H).index_select(1, prognostic_))
                     .reshape({H * P, raw.size(2), raw.size(3)});
  const torch::Tensor future = raw.slice(0, H);  // [R, V, lat, lon]
  sample.target = output_norm_.normalize(future.index_select(1, outputs_).contiguous());
  std::vector<torch::Tensor> forcings;
  const TimeAxis& axis = dataset_.time_axis();
  for (int64_t k = 0; k < window_.rollout_steps; ++k) {
    const int64_t valid = t + 1 + k;  // the state this rollout step predicts
    forcings.push_back(step_forcings(axis.has_dates ? axis.seconds[static_cast<size_t>(valid)] : 0, future[k]));
  }
  sample.forcings = torch::stack(forcings);
  if (mask_targets_) {
    sample.target_mask = (~torch::isnan(future.index_select(1, outputs_))).to(torch::kFloat32);
  }
  return sample;
}

Sample make_sample(const Dataset& dataset, const Normalization& normalization, const SampleWindow& window,
                   int64_t t) {
  return SampleMaker(dataset, normalization, window).make(t);
}

}  // namespace wxtrain::data
