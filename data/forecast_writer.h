#pragma once
// Forecasts as the field's tools open them: a NetCDF-4 file (path ending .nc or anything else) or a
// Zarr v2 store (path ending .zarr). Channels cut from one source's levels go back into one
// variable with its level dimension (z(time, level, lat, lon), level = 500, 850), single-level
// channels are (time, lat, lon); names, units and long_name are the source's; lat/lon coordinates
// are the data's grid; time is CF time (units and calendar) when the data has dates. Written to a
// temporary file or folder next to the target and renamed, so a killed job never leaves a
// half-written forecast under the real name.
#include <string>
#include <vector>

#include <torch/torch.h>

#include "data/dataset.h"

namespace wxtrain::data {

struct ForecastCoordinates {
  std::vector<VariableInfo> variables;  // channel order of the states tensor
  std::vector<double> lat, lon;         // degrees
  // One per forecast state: with dates, seconds in `calendar` (written as CF time in the data's
  // own units when they can express them); without, the raw time values in `time_units` ("" = none).
  bool has_dates = false;
  Calendar calendar = Calendar::kStandard;
  std::vector<int64_t> seconds;
  std::vector<double> times;
  std::string time_units;

  // The dataset's channels and grid, and the times of `steps` states after dataset time `start`,
  // one data.time_step apart (one time-coordinate spacing apart without dates).
  static ForecastCoordinates after(const Dataset& dataset, int64_t start, int64_t steps);
};

// states: [T, V, lat, lon] in physical units (denormalised). NaN becomes the fill value. Throws
// DataError naming the path when shapes disagree with the coordinates or writing fails.
void write_forecast(const std::string& path, const torch::Tensor& states, const ForecastCoordinates& coordinates);

}  // namespace wxtrain::data
