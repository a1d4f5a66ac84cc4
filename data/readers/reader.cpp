#include "data/readers/reader.h"

#include <set>

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

bool is_lat_dimension(const Reader& reader, const Dimension& dim) {
  const std::string units = coordinate_text(reader, dim.name, "units");
  return kLatNames.count(dim.name) > 0 || units == "degrees_north" || units == "degree_north" ||
         coordinate_text(reader, dim.name, "standard_name") == "latitude";
}

bool is_lon_dimension(const Reader& reader, const Dimension& dim) {
  const std::string units = coordinate_text(reader, dim.name, "units");
  return kLonNames.count(dim.name) > 0 || units == "degrees_east" || units == "degree_east" ||
         coordinate_text(reader, dim.name, "standard_name") == "longitude";
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
    if (is_zarr_store(local)) return open_zarr(local);
    throw DataError(local + " is a directory but not a Zarr store (no .zgroup, .zarray, .zmetadata or zarr.json in it)");
  }
  if (looks_like_grib(local)) return open_grib(local);
  return open_netcdf(local);
}

}  // namespace wxtrain::data
