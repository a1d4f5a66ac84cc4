#include "data/readers/reader.h"

#include <cctype>
#include <set>
#include <sstream>

#include <blosc.h>
#include <eccodes.h>
#include <lz4.h>
#include <netcdf.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/readers/grib/grib_reader.h"
#include "data/readers/netcdf_reader.h"
#include "data/readers/zarr/anemoi_reader.h"
#include "data/readers/zarr/zarr_reader.h"

namespace wxtrain::data {

std::optional<std::string> VariableMeta::text(const std::string& key) const {
  auto it = attributes.find(key);
  if (it == attributes.end() || !it->second.text) return std::nullopt;
  return it->second.text;
}

std::optional<double> VariableMeta::number(const std::string& key) const {
  auto it = attributes.find(key);
  if (it == attributes.end() || it->second.numbers.empty()) return std::nullopt;
  return it->second.numbers.front();
}

namespace {
const std::set<std::string> kTimeNames = {"time", "Time", "t", "record", "timestep", "times", "valid_time"};
const std::set<std::string> kLatNames = {"lat", "latitude", "Lat", "Latitude", "LAT", "y", "rlat", "nlat"};
const std::set<std::string> kLonNames = {"lon", "longitude", "Lon", "Longitude", "LON", "x", "rlon", "nlon"};
}  // namespace

std::string coordinate_text(const Reader& reader, const std::string& name, const std::string& key) {
  if (!reader.has_variable(name)) return "";
  return reader.variable(name).text(key).value_or("");
}

bool is_time_dimension(const Reader& reader, const Dimension& dim) {
  return kTimeNames.count(dim.name) > 0 || coordinate_text(reader, dim.name, "units").find(" since ") != std::string::npos;
}

namespace {

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// CF's spellings of the units of latitude and longitude (CF 1.11, 4.1 and 4.2), case-folded.
const std::set<std::string> kLatUnits = {"degrees_north", "degree_north", "degree_n", "degrees_n", "degreen", "degreesn"};
const std::set<std::string> kLonUnits = {"degrees_east", "degree_east", "degree_e", "degrees_e", "degreee", "degreese"};

// What a variable's attributes say it is: the axis, something else, or nothing either way.
enum class Says { kAxis, kOther, kNothing };
Says what_attributes_say(const VariableMeta& meta, GridAxis axis) {
  const bool lat = axis == GridAxis::kLatitude;
  const std::string units = lower(meta.text("units").value_or(""));
  const std::string standard_name = meta.text("standard_name").value_or("");
  if ((lat ? kLatUnits : kLonUnits).count(units) > 0) return Says::kAxis;
  if (standard_name == (lat ? "latitude" : "longitude")) return Says::kAxis;
  // Plain "degrees" is what files without CF attributes often carry; anything else (m, km, a
  // rotated pole's grid_latitude, a projection coordinate) is not a geographic latitude/longitude.
  if (!units.empty() && units != "degrees" && units != "degree") return Says::kOther;
  if (!standard_name.empty()) return Says::kOther;
  return Says::kNothing;
}

bool along(const VariableMeta& meta, const Dimension& dim) {
  return meta.dims.size() == 1 && meta.dims[0].name == dim.name && meta.dims[0].length == dim.length;
}

bool is_axis_variable(const VariableMeta& meta, GridAxis axis) {
  const Says says = what_attributes_say(meta, axis);
  return says == Says::kAxis ||
         (says == Says::kNothing && (axis == GridAxis::kLatitude ? kLatNames : kLonNames).count(meta.name) > 0);
}

std::vector<std::string> coordinates_attribute(const VariableMeta* data_variable) {
  std::vector<std::string> names;
  if (data_variable == nullptr) return names;
  std::istringstream list(data_variable->text("coordinates").value_or(""));
  for (std::string name; list >> name;) names.push_back(name);
  return names;
}

}  // namespace

std::optional<std::string> grid_coordinate(const Reader& reader, const VariableMeta* data_variable,
                                           const Dimension& dim, GridAxis axis) {
  if (reader.has_variable(dim.name)) {
    const VariableMeta& meta = reader.variable(dim.name);
    if (along(meta, dim) && is_axis_variable(meta, axis)) return dim.name;
  }
  for (const auto& name : coordinates_attribute(data_variable)) {
    if (!reader.has_variable(name)) continue;
    const VariableMeta& meta = reader.variable(name);
    if (along(meta, dim) && is_axis_variable(meta, axis)) return name;
  }
  for (const auto& name : reader.variable_names()) {
    const VariableMeta& meta = reader.variable(name);
    if (along(meta, dim) && is_axis_variable(meta, axis)) return name;
  }
  return std::nullopt;
}

std::string missing_grid_coordinate(const Reader& reader, const VariableMeta* data_variable, const Dimension& dim,
                                    GridAxis axis) {
  const bool lat = axis == GridAxis::kLatitude;
  for (const auto& name : coordinates_attribute(data_variable)) {
    if (!reader.has_variable(name)) continue;
    const VariableMeta& meta = reader.variable(name);
    if (meta.dims.size() > 1 && is_axis_variable(meta, axis)) {
      return std::string(lat ? "its latitudes '" : "its longitudes '") + name + "' " + dims_text(meta.dims) +
             " are 2-D (a curvilinear or rotated grid): wxtrain needs 1-D latitudes and longitudes";
    }
  }
  return "no 1-D variable along dimension '" + dim.name + "' has units " + (lat ? "degrees_north" : "degrees_east") +
         " or standard_name " + (lat ? "latitude" : "longitude");
}

bool is_lat_dimension(const Reader& reader, const Dimension& dim, const VariableMeta* data_variable) {
  if (reader.has_variable(dim.name) && what_attributes_say(reader.variable(dim.name), GridAxis::kLatitude) == Says::kAxis)
    return true;
  return kLatNames.count(dim.name) > 0 || grid_coordinate(reader, data_variable, dim, GridAxis::kLatitude).has_value();
}

bool is_lon_dimension(const Reader& reader, const Dimension& dim, const VariableMeta* data_variable) {
  if (reader.has_variable(dim.name) && what_attributes_say(reader.variable(dim.name), GridAxis::kLongitude) == Says::kAxis)
    return true;
  return kLonNames.count(dim.name) > 0 || grid_coordinate(reader, data_variable, dim, GridAxis::kLongitude).has_value();
}

std::string dims_text(const std::vector<Dimension>& dims) {
  std::string out = "(";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + dims[i].name + "=" + std::to_string(dims[i].length);
  return out + ")";
}

bool Reader::has_variable(const std::string& name) const {
  for (const auto& candidate : variable_names()) {
    if (candidate == name) return true;
  }
  return false;
}

std::vector<std::pair<std::string, std::string>> reader_library_versions() {
  std::string netcdf = nc_inq_libvers();
  netcdf = netcdf.substr(0, netcdf.find(' '));  // "4.9.0 of Jan  1 2023 $" -> "4.9.0"
  const long eccodes = codes_get_api_version();  // 22800 for 2.28.0
  return {{"netCDF-C", netcdf},
          {"c-blosc", blosc_get_version_string()},
          {"zstd", ZSTD_versionString()},
          {"lz4", LZ4_versionString()},
          {"zlib", zlibVersion()},
          {"ecCodes", std::to_string(eccodes / 10000) + "." + std::to_string(eccodes / 100 % 100) + "." +
                          std::to_string(eccodes % 100)}};
}

void check_slab(const std::string& path, const VariableMeta& meta, const std::vector<size_t>& start,
                const std::vector<size_t>& count) {
  const std::string what = "reading '" + meta.name + "' in " + path + ": ";
  if (start.size() != meta.dims.size() || count.size() != meta.dims.size()) {
    throw DataError(what + "a slab of rank " + std::to_string(start.size()) + " for a variable of rank " +
                    std::to_string(meta.dims.size()));
  }
  for (size_t d = 0; d < start.size(); ++d) {
    // Written so that start + count cannot overflow.
    if (start[d] > meta.dims[d].length || count[d] > meta.dims[d].length - start[d]) {
      throw DataError(what + "dimension '" + meta.dims[d].name + "' has " + std::to_string(meta.dims[d].length) +
                      " entries, asked for " + std::to_string(start[d]) + ".." + std::to_string(start[d] + count[d]));
    }
  }
}

std::unique_ptr<Reader> open_reader(const std::string& path) {
  std::string local = path;
  // The NCZarr URL form earlier versions took ("file:///abs/store.zarr#mode=nczarr,file"): the
  // store at that path, read natively now.
  const std::string scheme = "file://";
  if (local.rfind(scheme, 0) == 0 && local.find("#mode=") != std::string::npos) {
    local = local.substr(scheme.size(), local.find('#') - scheme.size());
  }
  std::error_code error;
  if (!std::filesystem::exists(local, error)) {
    throw DataError("data file not found: " + local);
  }
  if (std::filesystem::is_directory(local, error)) {
    if (is_zarr_store(local)) {
      // anemoi-datasets' layout (one `data` array of dates x variables x ensembles x cells) is
      // presented as one variable per anemoi variable.
      std::unique_ptr<Reader> zarr = open_zarr(local);
      if (is_anemoi_store(local, *zarr)) return open_anemoi(local, std::move(zarr));
      return zarr;
    }
    throw DataError(local + " is a directory but not a Zarr store (no .zgroup, .zarray, .zmetadata or zarr.json in it)");
  }
  if (looks_like_grib(local)) return open_grib(local);
  return open_netcdf(local);
}

}  // namespace wxtrain::data
