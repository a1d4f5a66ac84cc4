#include "data/dataset.h"

#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "data/readers/netcdf_file.h"

namespace wxtrain::data {
namespace {

const std::set<std::string> kTimeNames = {"time", "Time", "t", "record", "timestep", "times", "valid_time"};
const std::set<std::string> kLatNames = {"lat", "latitude", "Lat", "Latitude", "LAT", "y", "rlat", "nlat"};
const std::set<std::string> kLonNames = {"lon", "longitude", "Lon", "Longitude", "LON", "x", "rlon", "nlon"};

std::string where(const DataSource& source) {
  return "variable '" + source.variable + "' in " + source.file;
}

std::string dims_text(const std::vector<NcDimension>& dims) {
  std::string out = "(";
  for (size_t i = 0; i < dims.size(); ++i) {
    out += (i ? ", " : "") + dims[i].name + "=" + std::to_string(dims[i].length);
  }
  return out + ")";
}

std::vector<double> indices(size_t n) {
  std::vector<double> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = static_cast<double>(i);
  return values;
}

// The coordinate variable of a dimension (same name, 1-D, right length), else indices.
std::vector<double> coordinate_or_indices(const NetcdfFile& file, const NcDimension& dim, bool* found) {
  if (file.has_variable(dim.name)) {
    const auto dims = file.dimensions_of(dim.name);
    if (dims.size() == 1 && dims[0].length == dim.length) {
      std::vector<double> values = file.read_doubles(dim.name);
      *found = true;
      return values;
    }
  }
  *found = false;
  return indices(dim.length);
}

// Index of the first differing coordinate beyond a tolerance, or -1.
int64_t first_difference(const std::vector<double>& a, const std::vector<double>& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::abs(a[i] - b[i]) > 1e-4 * std::max(1.0, std::abs(a[i]))) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace

Dataset::Dataset(const std::vector<DataSource>& sources, DatasetOptions options)
    : sources_(sources), options_(options) {
  if (sources_.empty()) throw DataError("the dataset has no [[data.sources]] entries");
  std::set<std::string> names;
  for (const auto& source : sources_) {
    const std::string name = source.name.empty() ? source.variable : source.name;
    if (!names.insert(name).second) {
      throw DataError("two data sources are both called '" + name + "' (" + where(source) +
                      "); give each a distinct name, e.g. name = \"" + name + "500\"");
    }
  }
  layouts_.resize(sources_.size());
  for (size_t i = 0; i < sources_.size(); ++i) inspect_source(i, sources_[i]);

  const int64_t bytes = num_times_ * num_variables() * num_lat() * num_lon() * 4;
  if (bytes <= options_.preload_max_bytes) {
    torch::Tensor all = torch::empty({num_times_, num_variables(), num_lat(), num_lon()}, torch::kFloat32);
    read_all(all.data_ptr<float>());
    preloaded_ = all;
  }
}

void Dataset::inspect_source(size_t index, const DataSource& source) {
  NetcdfFile file = NetcdfFile::open(source.file);
  const std::vector<NcDimension> dims = file.dimensions_of(source.variable);  // names the variables when missing
  const std::string expected =
      "; wxtrain expects (time, lat, lon), or (time, level, lat, lon) with a single level";
  if (dims.size() != 3 && dims.size() != 4) {
    throw DataError(where(source) + " has dimensions " + dims_text(dims) + expected);
  }
  SourceLayout& layout = layouts_[index];
  layout.ndims = dims.size();
  layout.time_dim = 0;
  layout.lat_dim = dims.size() - 2;
  layout.lon_dim = dims.size() - 1;
  // Time is the unlimited or time-named dimension and must come first (CF order).
  for (size_t d = 0; d < dims.size(); ++d) {
    if ((dims[d].unlimited || kTimeNames.count(dims[d].name)) && d != 0) {
      throw DataError(where(source) + " has its time dimension '" + dims[d].name + "' at position " +
                      std::to_string(d) + " of " + dims_text(dims) + expected);
    }
  }
  if (kLonNames.count(dims[layout.lat_dim].name) || kLatNames.count(dims[layout.lon_dim].name)) {
    throw DataError(where(source) + " stores longitude before latitude " + dims_text(dims) + expected);
  }
  if (dims.size() == 4 && dims[1].length != 1) {
    throw DataError(where(source) + " has " + std::to_string(dims[1].length) + " levels in '" +
                    dims[1].name + "' " + dims_text(dims) + expected +
                    " (extract one level into its own variable)");
  }

  VariableInfo info;
  info.name = source.name.empty() ? source.variable : source.name;
  info.units = file.text_attribute(source.variable, "units").value_or("");
  info.long_name = file.text_attribute(source.variable, "long_name").value_or("");
  info.file = source.file;
  info.file_variable = source.variable;
  layout.scale = file.number_attribute(source.variable, "scale_factor").value_or(1.0);
  layout.offset = file.number_attribute(source.variable, "add_offset").value_or(0.0);
  for (const char* attribute : {"_FillValue", "missing_value"}) {
    if (auto value = file.number_attribute(source.variable, attribute)) layout.fill_values.push_back(*value);
  }
  has_fill_values_ = has_fill_values_ || !layout.fill_values.empty();

  const NcDimension& time_dim = dims[layout.time_dim];
  const NcDimension& lat_dim = dims[layout.lat_dim];
  const NcDimension& lon_dim = dims[layout.lon_dim];
  bool lat_found = false, lon_found = false, time_found = false;
  std::vector<double> lat = coordinate_or_indices(file, lat_dim, &lat_found);
  std::vector<double> lon = coordinate_or_indices(file, lon_dim, &lon_found);

  if (index == 0) {
    num_times_ = static_cast<int64_t>(time_dim.length);
    lat_ = std::move(lat);
    lon_ = std::move(lon);
    has_coordinates_ = lat_found && lon_found;
    time_dimension_ = time_dim.name;
    times_ = coordinate_or_indices(file, time_dim, &time_found);
    has_time_coordinates_ = time_found;
    time_units_ = time_found ? file.text_attribute(time_dim.name, "units").value_or("") : "";
  } else {
    const DataSource& first = sources_.front();
    if (lat_dim.length != lat_.size() || lon_dim.length != lon_.size()) {
      std::ostringstream message;
      message << "grid mismatch: " << where(source) << " is " << lat_dim.length << " x "
              << lon_dim.length << " (lat x lon) but " << where(first) << " is " << lat_.size()
              << " x " << lon_.size();
      throw DataError(message.str());
    }
    if (has_coordinates_ && lat_found && lon_found) {
      for (const auto& [axis, mine, theirs] :
           {std::make_tuple("latitude", &lat, &lat_), std::make_tuple("longitude", &lon, &lon_)}) {
        const int64_t i = first_difference(*mine, *theirs);
        if (i >= 0) {
          std::ostringstream message;
          message << "grid mismatch: " << where(source) << " and " << where(first) << " have the same "
                  << lat_.size() << " x " << lon_.size() << " shape but different " << axis
                  << "s (index " << i << ": " << (*mine)[i] << " vs " << (*theirs)[i] << ")";
          throw DataError(message.str());
        }
      }
    }
    if (static_cast<int64_t>(time_dim.length) != num_times_) {
      throw DataError("time axis mismatch: " + where(source) + " has " +
                      std::to_string(time_dim.length) + " times but " + where(first) + " has " +
                      std::to_string(num_times_));
    }
    // Same length is not enough: channels merged on misaligned dates would train on nonsense.
    std::vector<double> times = coordinate_or_indices(file, time_dim, &time_found);
    if (has_time_coordinates_ && time_found) {
      const std::string units = file.text_attribute(time_dim.name, "units").value_or("");
      if (!units.empty() && !time_units_.empty() && units != time_units_)
        throw DataError("time axis mismatch: " + where(source) + " counts time in '" + units + "' but " +
                        where(first) + " in '" + time_units_ + "'");
      const int64_t i = first_difference(times, times_);
      if (i >= 0) {
        std::ostringstream message;
        message << "time axis mismatch: " << where(source) << " and " << where(first) << " differ at time index "
                << i << " (" << times[i] << " vs " << times_[i] << ")";
        throw DataError(message.str());
      }
    }
  }
  variables_.push_back(std::move(info));
}

std::vector<std::string> Dataset::variable_names() const {
  std::vector<std::string> names;
  for (const auto& info : variables_) names.push_back(info.name);
  return names;
}

void Dataset::clean_values(size_t variable, float* values, int64_t count) const {
  const SourceLayout& layout = layouts_[variable];
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const bool scaled = layout.scale != 1.0 || layout.offset != 0.0;
  std::vector<float> fills;
  for (double fill : layout.fill_values) fills.push_back(static_cast<float>(fill));
  for (int64_t i = 0; i < count; ++i) {
    float& value = values[i];
    for (float fill : fills) {
      if (value == fill) value = nan;
    }
    if (scaled) value = static_cast<float>(value * layout.scale + layout.offset);
  }
}

void Dataset::read_all(float* out) const {
  const int64_t plane = num_lat() * num_lon();
  const int64_t V = num_variables();
  std::vector<float> buffer(static_cast<size_t>(num_times_ * plane));
  for (size_t v = 0; v < sources_.size(); ++v) {
    const SourceLayout& layout = layouts_[v];
    std::vector<size_t> start(layout.ndims, 0), count(layout.ndims, 1);
    count[layout.time_dim] = static_cast<size_t>(num_times_);
    count[layout.lat_dim] = static_cast<size_t>(num_lat());
    count[layout.lon_dim] = static_cast<size_t>(num_lon());
    NetcdfFile file = NetcdfFile::open(sources_[v].file);
    file.read_floats(sources_[v].variable, start, count, buffer.data());
    clean_values(v, buffer.data(), static_cast<int64_t>(buffer.size()));
    for (int64_t t = 0; t < num_times_; ++t) {
      std::copy_n(buffer.data() + t * plane, plane, out + (t * V + static_cast<int64_t>(v)) * plane);
    }
  }
}

void Dataset::read_state(int64_t t, float* out) const {
  const int64_t plane = num_lat() * num_lon();
  // Files are opened per read rather than held open: the descriptor count stays bounded for
  // datasets of many files, and a file that vanished or was replaced is reported, not read stale.
  std::map<std::string, std::vector<size_t>> by_file;
  for (size_t v = 0; v < sources_.size(); ++v) by_file[sources_[v].file].push_back(v);
  for (const auto& [path, members] : by_file) {
    NetcdfFile file = NetcdfFile::open(path);
    for (size_t v : members) {
      const SourceLayout& layout = layouts_[v];
      std::vector<size_t> start(layout.ndims, 0), count(layout.ndims, 1);
      start[layout.time_dim] = static_cast<size_t>(t);
      count[layout.lat_dim] = static_cast<size_t>(num_lat());
      count[layout.lon_dim] = static_cast<size_t>(num_lon());
      float* slot = out + static_cast<int64_t>(v) * plane;
      file.read_floats(sources_[v].variable, start, count, slot);
      clean_values(v, slot, plane);
    }
  }
}

torch::Tensor Dataset::state(int64_t t) const {
  TORCH_CHECK(t >= 0 && t < num_times_, "time index ", t, " outside [0, ", num_times_, ")");
  // Clones so that callers may modify what they get without touching the stored data.
  if (preloaded_.defined()) return preloaded_[t].clone();
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto hit = cache_.find(t);
    if (hit != cache_.end()) {
      cache_order_.splice(cache_order_.begin(), cache_order_, hit->second.second);
      return hit->second.first.clone();
    }
  }
  torch::Tensor state = torch::empty({num_variables(), num_lat(), num_lon()}, torch::kFloat32);
  read_state(t, state.data_ptr<float>());
  if (options_.cache_states > 0) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.find(t) == cache_.end()) {
      cache_order_.push_front(t);
      cache_.emplace(t, std::make_pair(state.clone(), cache_order_.begin()));
      while (static_cast<int64_t>(cache_.size()) > options_.cache_states) {
        cache_.erase(cache_order_.back());
        cache_order_.pop_back();
      }
    }
  }
  return state;
}

}  // namespace wxtrain::data
