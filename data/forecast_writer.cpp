#include "data/forecast_writer.h"

#include <netcdf.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "data/readers/netcdf_file.h"

namespace wxtrain::data {

ForecastCoordinates ForecastCoordinates::like(const Dataset& dataset, std::vector<double> times,
                                              std::string time_units) {
  ForecastCoordinates coordinates;
  coordinates.variables = dataset.variables();
  coordinates.lat = dataset.lat();
  coordinates.lon = dataset.lon();
  coordinates.times = std::move(times);
  coordinates.time_units = std::move(time_units);
  return coordinates;
}

void write_forecast(const std::string& path, const torch::Tensor& states, const ForecastCoordinates& c) {
  if (is_zarr_url(path)) {
    throw DataError("forecasts are written as NetCDF files; " + path + " is a Zarr URL (give a .nc path)");
  }
  const auto T = static_cast<int64_t>(c.times.size());
  const auto V = static_cast<int64_t>(c.variables.size());
  const auto H = static_cast<int64_t>(c.lat.size());
  const auto W = static_cast<int64_t>(c.lon.size());
  if (states.dim() != 4 || states.size(0) != T || states.size(1) != V || states.size(2) != H ||
      states.size(3) != W) {
    std::ostringstream message;
    message << "cannot write forecast " << path << ": states are " << states.sizes() << " but the coordinates say ["
            << T << ", " << V << ", " << H << ", " << W << "] (time, variable, lat, lon)";
    throw DataError(message.str());
  }
  const torch::Tensor values =
      torch::nan_to_num(states.detach().to(torch::kCPU, torch::kFloat32), NC_FILL_FLOAT).contiguous();
  const bool has_nan = torch::isnan(states).any().item<bool>();

  const std::filesystem::path target(path);
  const std::filesystem::path temporary =
      target.parent_path() / ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()));
  try {
    NetcdfFile file = NetcdfFile::create(temporary.string());
    file.define_dimension("time", 0);
    file.define_dimension("lat", static_cast<size_t>(H));
    file.define_dimension("lon", static_cast<size_t>(W));
    file.define_variable("time", NC_DOUBLE, {"time"});
    if (!c.time_units.empty()) file.put_text_attribute("time", "units", c.time_units);
    file.define_variable("lat", NC_DOUBLE, {"lat"});
    file.put_text_attribute("lat", "units", "degrees_north");
    file.define_variable("lon", NC_DOUBLE, {"lon"});
    file.put_text_attribute("lon", "units", "degrees_east");
    for (const auto& variable : c.variables) {
      file.define_variable(variable.name, NC_FLOAT, {"time", "lat", "lon"});
      if (!variable.units.empty()) file.put_text_attribute(variable.name, "units", variable.units);
      if (!variable.long_name.empty()) file.put_text_attribute(variable.name, "long_name", variable.long_name);
      if (has_nan) file.put_float_attribute(variable.name, "_FillValue", NC_FILL_FLOAT);
    }
    file.put_text_attribute("", "source", "wxtrain forecast");
    file.end_define();
    file.write_doubles("lat", c.lat);
    file.write_doubles("lon", c.lon);
    file.write_doubles("time", c.times);
    std::vector<float> field(static_cast<size_t>(T * H * W));
    const float* data = values.data_ptr<float>();
    for (int64_t v = 0; v < V; ++v) {
      for (int64_t t = 0; t < T; ++t) {
        std::copy_n(data + (t * V + v) * H * W, H * W, field.data() + t * H * W);
      }
      file.write_floats(c.variables[v].name, {0, 0, 0},
                        {static_cast<size_t>(T), static_cast<size_t>(H), static_cast<size_t>(W)}, field.data());
    }
    file.close();
    std::filesystem::rename(temporary, target);
  } catch (const std::filesystem::filesystem_error& error) {
    std::filesystem::remove(temporary);
    throw DataError("cannot write forecast " + path + ": " + error.what());
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw;
  }
}

}  // namespace wxtrain::data
