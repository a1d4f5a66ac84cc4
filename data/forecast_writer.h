#pragma once
// Forecasts as the field's tools open them: a NetCDF-4 file (path ending .nc or anything else) or a
// Zarr v2 store (path ending .zarr). Channels cut from one source's levels go back into one
// variable with its level dimension (z(time, level, lat, lon), level = 500, 850), single-level
// channels are (time, lat, lon); names, units and long_name are the source's; lat/lon coordinates
// are the data's grid; time is CF time (units and calendar) when the data has dates, and then the
// file also holds the CF forecast_reference_time (the newest initial state) and each state's
// lead_time after it (standard_name forecast_period, in hours or days: xarray reads it as a
// timedelta), so verification tools line forecasts up by initialisation and lead.
//
// An ensemble forecast (ForecastCoordinates::members > 0) has a member dimension named `number`,
// as ECMWF's ensembles are named when cfgrib opens them: an int64 coordinate 0..N-1 with
// long_name "ensemble member numerical id", units "1" and standard_name "realization" (cfgrib's
// attributes, CF's standard name of a member). It comes right after time: z(time, number, level,
// lat, lon), t2m(time, number, lat, lon). cfgrib puts it first (number, time, step, level, ...),
// but here time is the dimension a forecast is streamed along (NetCDF's unlimited record
// dimension): with number inside it, a step of every member is one record, written at once, and
// xarray selects by name whatever the order (ds.t2m.sel(number=2)).
//
// Streamed: ForecastWriter takes one state at a time and writes it at once (NetCDF: one record of
// the unlimited time dimension; Zarr: one chunk per variable and step), so host memory does not grow
// with the number of steps. Missing values (NaN) are written as NaN, declared by _FillValue (and
// missing_value in NetCDF) as CF asks. Everything goes to a temporary file or folder next to the
// target, renamed on commit(): a killed job never leaves a half-written forecast under the real name.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "data/dataset.h"

namespace wxtrain::data {

struct ForecastCoordinates {
  std::vector<VariableInfo> variables;  // channel order of the states
  std::vector<double> lat, lon;         // degrees; grid indices when the data has no latitudes
  bool has_coordinates = true;          // false: lat/lon are indices, written without degree units
  // A point-set grid (data/grid.h): lat and lon hold one value per cell and the states are
  // [V, 1, cells]; the file has a `cell` dimension with lat(cell), lon(cell) as coordinates (named in
  // each variable's `coordinates` attribute, so xarray attaches them), the way anemoi-datasets
  // and cfgrib lay out cells.
  bool point_set = false;
  int64_t rows() const { return point_set ? 1 : static_cast<int64_t>(lat.size()); }
  // One per forecast state: with dates, seconds in `calendar` (written as CF time in the data's
  // own units when they can express them); without, the raw time values in `time_units` ("" = none).
  bool has_dates = false;
  Calendar calendar = Calendar::kStandard;
  std::vector<int64_t> seconds;
  std::vector<double> times;
  std::string time_units;
  // With dates: the newest initial state's time (forecast_reference_time); lead times are the
  // states' times after it.
  std::optional<int64_t> reference_seconds;
  // Ensemble members: 0 writes no member dimension (a deterministic forecast, or one member);
  // N >= 1 a `number` dimension of N, and every state handed to the writer is [N, V, lat, lon].
  int64_t members = 0;

  int64_t steps() const { return static_cast<int64_t>(has_dates ? seconds.size() : times.size()); }

  // The dataset's channels and grid, and the times of `steps` states after dataset time `start`,
  // one data.time_step apart (one time-coordinate spacing apart without dates).
  static ForecastCoordinates after(const Dataset& dataset, int64_t start, int64_t steps);
};

class ForecastWriter {
 public:
  // Creates the temporary file or store and writes everything but the states. Throws DataError
  // naming `path` when it cannot be created (a missing folder, no permission).
  ForecastWriter(const std::string& path, ForecastCoordinates coordinates);
  ~ForecastWriter();  // removes the temporary file or store unless committed
  ForecastWriter(const ForecastWriter&) = delete;
  ForecastWriter& operator=(const ForecastWriter&) = delete;

  // The next state, [V, lat, lon] in physical units, NaN where missing ([N, V, lat, lon] with
  // coordinates.members = N > 0, member by member). Throws DataError naming
  // the path when its shape disagrees with the coordinates, every step was written already, or
  // writing fails.
  void write_step(const torch::Tensor& state);
  // After the last step: closes the file and renames it onto the target (replacing an earlier
  // forecast there). Throws DataError when steps are missing or the rename fails.
  void commit();

  int64_t steps_written() const { return written_; }

  class Format;  // NetCDF or Zarr

 private:
  std::string path_;
  ForecastCoordinates coordinates_;
  std::unique_ptr<Format> format_;
  int64_t written_ = 0;
};

// The whole forecast at once: states [T, V, lat, lon] ([T, N, V, lat, lon] with members) through a ForecastWriter. Throws DataError
// naming the path when shapes disagree with the coordinates or writing fails.
void write_forecast(const std::string& path, const torch::Tensor& states, const ForecastCoordinates& coordinates);

}  // namespace wxtrain::data
