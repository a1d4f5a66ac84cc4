#include "data/forecast_writer.h"

#include <netcdf.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "data/readers/netcdf_file.h"
#include "data/writers/zarr_v2_writer.h"

namespace wxtrain::data {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A variable of the output: one single-level channel, or all the levels cut from one source.
struct OutputVariable {
  const VariableInfo* info = nullptr;  // the first channel (name, units, long_name)
  std::string name;
  std::vector<int64_t> channels;       // in the states tensor, in level order
  std::string level_dim;               // "" for single-level
};

struct OutputLevels {
  std::string dim;
  std::vector<double> values;
  std::string units;
};

// Groups channels back into variables; each distinct list of levels gets a dimension: "level",
// then "level_2", ... (ERA5 files have one).
void group_channels(const std::vector<VariableInfo>& variables, std::vector<OutputVariable>& outputs,
                    std::vector<OutputLevels>& levels) {
  for (size_t c = 0; c < variables.size(); ++c) {
    const VariableInfo& info = variables[c];
    if (!info.level) {
      outputs.push_back({&info, info.name, {static_cast<int64_t>(c)}, ""});
      continue;
    }
    if (!outputs.empty() && !outputs.back().level_dim.empty() && outputs.back().info->source_name == info.source_name &&
        outputs.back().info->file == info.file) {
      outputs.back().channels.push_back(static_cast<int64_t>(c));
      continue;
    }
    outputs.push_back({&info, info.source_name, {static_cast<int64_t>(c)}, "?"});
  }
  for (auto& output : outputs) {
    if (output.level_dim.empty()) continue;
    std::vector<double> values;
    for (int64_t c : output.channels) values.push_back(*variables[static_cast<size_t>(c)].level);
    auto same = std::find_if(levels.begin(), levels.end(), [&](const OutputLevels& l) { return l.values == values; });
    if (same == levels.end()) {
      levels.push_back({levels.empty() ? "level" : "level_" + std::to_string(levels.size() + 1), values,
                        output.info->level_units});
      same = levels.end() - 1;
    }
    output.level_dim = same->dim;
  }
}

// The CF time values and attributes to write.
struct OutputTime {
  std::vector<double> values;
  std::string units;
  std::string calendar;  // "" without dates
};

OutputTime output_time(const ForecastCoordinates& c) {
  OutputTime time;
  if (!c.has_dates) {
    time.values = c.times;
    time.units = c.time_units;
    return time;
  }
  time.calendar = calendar_name(c.calendar);
  // The data's own units when whole numbers of them express every time; otherwise the coarsest
  // unit that does, since the first forecast time (what xarray would choose).
  if (!c.time_units.empty()) {
    try {
      const TimeUnits units = parse_time_units(c.time_units, c.calendar);
      const EncodedTimes encoded = encode_times(c.seconds, c.calendar, units.unit_name, units.epoch);
      if (std::all_of(encoded.values.begin(), encoded.values.end(), [](double v) { return v == std::round(v); })) {
        time.values = encoded.values;
        time.units = c.time_units;
        return time;
      }
    } catch (const DataError&) {
      // Units we cannot write back (sub-second): fall through to our own.
    }
  }
  const EncodedTimes encoded = encode_times(c.seconds, c.calendar);
  time.values = encoded.values;
  time.units = encoded.units;
  return time;
}

// [T, (levels,) H, W] of one output variable, NaN kept.
std::vector<float> gather(const torch::Tensor& values, const OutputVariable& output) {
  const int64_t T = values.size(0), H = values.size(2), W = values.size(3);
  const int64_t L = static_cast<int64_t>(output.channels.size());
  std::vector<float> field(static_cast<size_t>(T * L * H * W));
  const float* data = values.data_ptr<float>();
  const int64_t V = values.size(1);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t l = 0; l < L; ++l) {
      std::copy_n(data + (t * V + output.channels[static_cast<size_t>(l)]) * H * W, H * W,
                  field.data() + (t * L + l) * H * W);
    }
  }
  return field;
}

void write_netcdf(const std::string& path, const torch::Tensor& values, bool has_nan, const ForecastCoordinates& c,
                  const std::vector<OutputVariable>& outputs, const std::vector<OutputLevels>& levels,
                  const OutputTime& time) {
  const auto T = static_cast<size_t>(values.size(0)), H = c.lat.size(), W = c.lon.size();
  NetcdfFile file = NetcdfFile::create(path);
  file.define_dimension("time", 0);
  for (const auto& level : levels) file.define_dimension(level.dim, level.values.size());
  file.define_dimension("lat", H);
  file.define_dimension("lon", W);
  file.define_variable("time", NC_DOUBLE, {"time"});
  if (!time.units.empty()) file.put_text_attribute("time", "units", time.units);
  if (!time.calendar.empty()) file.put_text_attribute("time", "calendar", time.calendar);
  for (const auto& level : levels) {
    file.define_variable(level.dim, NC_DOUBLE, {level.dim});
    if (!level.units.empty()) file.put_text_attribute(level.dim, "units", level.units);
  }
  file.define_variable("lat", NC_DOUBLE, {"lat"});
  file.put_text_attribute("lat", "units", "degrees_north");
  file.define_variable("lon", NC_DOUBLE, {"lon"});
  file.put_text_attribute("lon", "units", "degrees_east");
  for (const auto& output : outputs) {
    if (output.level_dim.empty()) file.define_variable(output.name, NC_FLOAT, {"time", "lat", "lon"});
    else file.define_variable(output.name, NC_FLOAT, {"time", output.level_dim, "lat", "lon"});
    if (!output.info->units.empty()) file.put_text_attribute(output.name, "units", output.info->units);
    if (!output.info->long_name.empty()) file.put_text_attribute(output.name, "long_name", output.info->long_name);
    if (has_nan) file.put_float_attribute(output.name, "_FillValue", NC_FILL_FLOAT);
  }
  file.put_text_attribute("", "source", "wxtrain forecast");
  file.end_define();
  for (const auto& level : levels) file.write_doubles(level.dim, level.values);
  file.write_doubles("lat", c.lat);
  file.write_doubles("lon", c.lon);
  file.write_doubles("time", time.values);
  for (const auto& output : outputs) {
    std::vector<float> field = gather(values, output);
    for (float& v : field) {
      if (std::isnan(v)) v = NC_FILL_FLOAT;
    }
    if (output.level_dim.empty()) {
      file.write_floats(output.name, {0, 0, 0}, {T, H, W}, field.data());
    } else {
      file.write_floats(output.name, {0, 0, 0, 0}, {T, output.channels.size(), H, W}, field.data());
    }
  }
  file.close();
}

void write_zarr(const std::string& path, const torch::Tensor& values, const ForecastCoordinates& c,
                const std::vector<OutputVariable>& outputs, const std::vector<OutputLevels>& levels,
                const OutputTime& time) {
  const auto T = static_cast<size_t>(values.size(0)), H = c.lat.size(), W = c.lon.size();
  ZarrV2Writer store(path);
  auto coordinate = [&](const std::string& name, const std::vector<double>& v, nlohmann::json attributes) {
    ZarrArraySpec spec{name, {name}, {v.size()}, {std::max<size_t>(1, v.size())}, true, std::move(attributes), {}};
    store.add_array(spec, v.data());
  };
  nlohmann::json time_attributes = nlohmann::json::object();
  if (!time.units.empty()) time_attributes["units"] = time.units;
  if (!time.calendar.empty()) time_attributes["calendar"] = time.calendar;
  coordinate("time", time.values, time_attributes);
  for (const auto& level : levels) {
    nlohmann::json attributes = nlohmann::json::object();
    if (!level.units.empty()) attributes["units"] = level.units;
    coordinate(level.dim, level.values, attributes);
  }
  coordinate("lat", c.lat, {{"units", "degrees_north"}});
  coordinate("lon", c.lon, {{"units", "degrees_east"}});
  for (const auto& output : outputs) {
    nlohmann::json attributes = nlohmann::json::object();
    if (!output.info->units.empty()) attributes["units"] = output.info->units;
    if (!output.info->long_name.empty()) attributes["long_name"] = output.info->long_name;
    ZarrArraySpec spec;
    spec.name = output.name;
    spec.attributes = attributes;
    spec.fill_value = std::nan("");
    if (output.level_dim.empty()) {
      spec.dims = {"time", "lat", "lon"};
      spec.shape = {T, H, W};
      spec.chunks = {1, H, W};
    } else {
      const size_t L = output.channels.size();
      spec.dims = {"time", output.level_dim, "lat", "lon"};
      spec.shape = {T, L, H, W};
      spec.chunks = {1, L, H, W};
    }
    const std::vector<float> field = gather(values, output);
    store.add_array(spec, field.data());
  }
  store.set_group_attributes({{"source", "wxtrain forecast"}});
  store.commit();
}

}  // namespace

ForecastCoordinates ForecastCoordinates::after(const Dataset& dataset, int64_t start, int64_t steps) {
  const TimeAxis& axis = dataset.time_axis();
  ForecastCoordinates c;
  c.variables = dataset.variables();
  c.lat = dataset.lat();
  c.lon = dataset.lon();
  c.has_dates = axis.has_dates;
  c.calendar = axis.calendar;
  c.time_units = axis.units;
  if (axis.has_dates) {
    for (int64_t k = 1; k <= steps; ++k) c.seconds.push_back(axis.seconds[static_cast<size_t>(start)] + k * axis.step_seconds);
  } else {
    const double dt = axis.size() > 1 ? axis.raw[1] - axis.raw[0] : 1.0;
    for (int64_t k = 1; k <= steps; ++k) c.times.push_back(axis.raw[static_cast<size_t>(start)] + dt * static_cast<double>(k));
  }
  return c;
}

void write_forecast(const std::string& path, const torch::Tensor& states, const ForecastCoordinates& c) {
  const auto T = static_cast<int64_t>(c.has_dates ? c.seconds.size() : c.times.size());
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
  const torch::Tensor values = states.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  const bool has_nan = torch::isnan(values).any().item<bool>();
  std::vector<OutputVariable> outputs;
  std::vector<OutputLevels> levels;
  group_channels(c.variables, outputs, levels);
  const OutputTime time = output_time(c);

  std::string target = path;
  while (target.size() > 1 && target.back() == '/') target.pop_back();
  if (ends_with(target, ".zarr")) {
    write_zarr(target, values, c, outputs, levels, time);
    return;
  }
  const std::filesystem::path file(target);
  const std::filesystem::path temporary =
      file.parent_path() / ("." + file.filename().string() + ".tmp-" + std::to_string(::getpid()));
  try {
    write_netcdf(temporary.string(), values, has_nan, c, outputs, levels, time);
    std::filesystem::rename(temporary, file);
  } catch (const std::filesystem::filesystem_error& error) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw DataError("cannot write forecast " + path + ": " + error.what());
  } catch (const DataError& error) {
    // netCDF-C's message names the temporary file; the user asked for `path`.
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw DataError("cannot write forecast " + path + " (through " + temporary.string() + "): " + error.what());
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw;
  }
}

}  // namespace wxtrain::data
