#pragma once
// Forecasts as NetCDF: one float variable [time, lat, lon] per channel with the source's name,
// units and long_name, plus lat/lon/time coordinate variables, so the output opens in the same
// tools (and in wxtrain's own Dataset) as the input. Written to a temporary file next to the
// target and renamed, so a killed job never leaves a half-written forecast under the real name.
#include <string>
#include <vector>

#include <torch/torch.h>

#include "data/dataset.h"

namespace wxtrain::data {

struct ForecastCoordinates {
  std::vector<VariableInfo> variables;  // channel order of the states tensor
  std::vector<double> lat, lon;         // degrees
  std::vector<double> times;            // one per forecast state
  std::string time_units;               // e.g. "hours since 1996-01-05 00:00"; omitted when empty

  // The dataset's variables and grid with the given times.
  static ForecastCoordinates like(const Dataset& dataset, std::vector<double> times, std::string time_units);
};

// states: [T, V, lat, lon] in physical units (denormalised). NaN becomes _FillValue. Throws
// DataError naming the path when shapes disagree with the coordinates or writing fails.
void write_forecast(const std::string& path, const torch::Tensor& states, const ForecastCoordinates& coordinates);

}  // namespace wxtrain::data
