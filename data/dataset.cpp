#include "data/dataset.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "data/forcings.h"
#include "data/readers/reader.h"

namespace wxtrain::data {
namespace {

std::string where(const DataSource& source) { return "variable '" + source.variable + "' in " + source.file; }

std::string number_text(double value) {
  std::ostringstream s;
  s << value;  // 500 -> "500", 0.5 -> "0.5"
  return s.str();
}

std::string numbers_text(const std::vector<double>& values) {
  std::string out;
  for (double v : values) out += (out.empty() ? "" : ", ") + number_text(v);
  return out;
}

bool close_to(double a, double b) { return std::abs(a - b) <= 1e-4 * std::max(1.0, std::abs(a)); }

// A coordinate variable of `dim` (same name, 1-D, right length), if the source has one.
std::optional<std::vector<double>> coordinate(const Reader& reader, const Dimension& dim) {
  if (!reader.has_variable(dim.name)) return std::nullopt;
  const VariableMeta& meta = reader.variable(dim.name);
  if (meta.dims.size() != 1 || meta.dims[0].length != dim.length) return std::nullopt;
  return reader.read_doubles(dim.name);
}

// Monthly states: one per calendar month (monthly means, stamped on the 1st, mid-month or at the
// month's end), most of them a month apart. Their spacing in days varies (28 to 31), so in
// calendars whose months differ in length they step in calendar months.
bool monthly_states(const std::vector<int64_t>& sorted_seconds, int64_t common, Calendar calendar) {
  if (sorted_seconds.size() < 2 || common < 28 * 86400 || common > 31 * 86400) return false;
  for (size_t i = 1; i < sorted_seconds.size(); ++i) {
    if (month_number(sorted_seconds[i], calendar) == month_number(sorted_seconds[i - 1], calendar)) return false;
  }
  return true;
}

// The most common spacing between consecutive (sorted) times; 0 for fewer than two.
int64_t common_spacing(const std::vector<int64_t>& sorted_seconds) {
  std::map<int64_t, int64_t> counts;
  for (size_t i = 1; i < sorted_seconds.size(); ++i) ++counts[sorted_seconds[i] - sorted_seconds[i - 1]];
  int64_t best = 0, best_count = 0;
  for (const auto& [spacing, count] : counts) {
    if (count > best_count) best = spacing, best_count = count;
  }
  return best;
}

}  // namespace

std::string TimeAxis::label(int64_t t) const {
  if (has_dates) return from_seconds(seconds[static_cast<size_t>(t)], calendar).to_iso();
  return "time index " + std::to_string(t);
}

bool TimeAxis::one_step_apart(int64_t a, int64_t b) const {
  if (!has_dates) return true;
  return one_step_after(seconds[static_cast<size_t>(a)], seconds[static_cast<size_t>(b)], step(), calendar);
}

// One [[data.sources]] entry, opened: where its time, level, lat and lon sit among the variable's
// dimensions, how to decode its values, and how its grid and times map onto the dataset's.
struct Dataset::Source {
  DataSource config;
  std::shared_ptr<const Reader> reader;
  std::vector<Dimension> dims;
  size_t time_dim = 0, lat_dim = 0, lon_dim = 0;
  std::optional<size_t> level_dim;
  std::vector<size_t> level_indices;  // per channel; empty: one channel, no level dimension
  size_t first_channel = 0;
  size_t num_channels = 1;
  double scale = 1.0, offset = 0.0;
  std::vector<float> fill_values;  // _FillValue, missing_value as stored (before scaling)
  bool cells = false;              // a point set: lat_dim == lon_dim, the cell dimension
  bool flip_lat = false;           // the source's latitudes run the other way
  int64_t lon_shift = 0;           // dataset longitude j is the source's (j + lon_shift) mod n
  bool has_dates = false;
  Calendar calendar = Calendar::kStandard;
  std::vector<int64_t> seconds;    // per source time index, when has_dates
  std::vector<double> raw_times;   // the time coordinate as stored (indices when absent)
  std::string time_units;
  bool has_time_coordinate = false;
  std::vector<int64_t> time_index;  // dataset time -> source time index

  size_t num_lat() const { return cells ? 1 : dims[lat_dim].length; }
  size_t num_lon() const { return dims[lon_dim].length; }
  // All of this source's channels at source time ts into out (channel after channel, each a
  // [rows, lon] plane in the dataset's grid order), decoded: the rows [row_begin, row_begin + rows)
  // of the sources' whole grid in the dataset's row order (the cells, on a point set), so a
  // model-parallel rank's band is one hyperslab along the latitude (cell) dimension. The selected
  // levels are read in one slab from the lowest to the highest: one request per state, so a Zarr
  // chunk holding every level is opened once and only the levels between decoded
  // (zarr::blosc_decode_range). Returns the float32 bytes the reader was asked for.
  int64_t read_channels(int64_t ts, float* out, std::vector<float>& scratch, size_t row_begin, size_t rows) const {
    const size_t W = cells ? rows : num_lon(), H = cells ? 1 : rows, rank = dims.size();
    std::vector<size_t> start(rank, 0), count(rank, 1);
    start[time_dim] = static_cast<size_t>(ts);
    size_t lowest = 0;
    if (level_dim) {
      lowest = *std::min_element(level_indices.begin(), level_indices.end());
      start[*level_dim] = lowest;
      count[*level_dim] = *std::max_element(level_indices.begin(), level_indices.end()) - lowest + 1;
    }
    if (cells) {
      start[lon_dim] = row_begin;
      count[lon_dim] = rows;
    } else {
      // The dataset's row i is the source's row i, or H - 1 - i when its latitudes run the other
      // way: the band's rows are then the mirrored slab, read and turned over below.
      const size_t whole = dims[lat_dim].length;
      start[lat_dim] = flip_lat ? whole - row_begin - rows : row_begin;
      count[lat_dim] = rows;
      count[lon_dim] = W;
    }
    size_t total = 1;
    std::vector<size_t> stride(rank, 1);
    for (size_t d = rank; d-- > 0;) {
      stride[d] = total;
      total *= count[d];
    }
    scratch.resize(total);
    reader->read(config.variable, start, count, scratch.data());
    const size_t lat_stride = stride[lat_dim], lon_stride = stride[lon_dim];
    for (size_t c = 0; c < num_channels; ++c) {
      const float* level = scratch.data() + (level_dim ? (level_indices[c] - lowest) * stride[*level_dim] : 0);
      float* plane = out + c * H * W;
      for (size_t i = 0; i < H; ++i) {
        const float* row = level + (flip_lat ? H - 1 - i : i) * lat_stride;
        float* target = plane + i * W;
        if (lon_stride == 1) {
          // Rolled longitudes are two runs of a row.
          const size_t shift = static_cast<size_t>(lon_shift);
          std::copy(row + shift, row + W, target);
          std::copy(row, row + shift, target + (W - shift));
        } else {
          for (size_t j = 0; j < W; ++j) target[j] = row[((j + static_cast<size_t>(lon_shift)) % W) * lon_stride];
        }
      }
      decode(plane, static_cast<int64_t>(H * W));
    }
    return static_cast<int64_t>(total * sizeof(float));
  }

  // Fill values -> NaN, then scale_factor/add_offset, as CF decoders (xarray) do.
  void decode(float* values, int64_t n) const {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const bool scaled = scale != 1.0 || offset != 0.0;
    if (!scaled && fill_values.empty()) return;  // float data with NaN fill: as stored
    for (int64_t i = 0; i < n; ++i) {
      float& value = values[i];
      for (float fill : fill_values) {
        if (value == fill) value = nan;
      }
      if (scaled) value = static_cast<float>(value * scale + offset);
    }
  }
};

Dataset::Dataset(const std::vector<DataSource>& sources, DatasetOptions options)
    : Dataset(
          [&] {
            DataConfig config;
            config.sources = sources;
            return config;
          }(),
          options) {}

Dataset::~Dataset() = default;

Dataset::Dataset(const DataConfig& config, DatasetOptions options) : options_(options) {
  if (config.sources.empty()) throw DataError("the dataset has no [[data.sources]] entries");
  for (size_t i = 0; i < config.sources.size(); ++i) open_source(i, config.sources[i]);
  std::set<std::string> names;
  for (const auto& info : variables_) {
    if (!names.insert(info.name).second) {
      throw DataError("two data channels are both called '" + info.name + "' (the second from variable '" +
                      info.file_variable + "' in " + info.file + "); give each source a distinct name, e.g. name = \"" +
                      info.source_name + "2\"");
    }
  }
  merge_time_axes(config);
  if (!point_set_) {
    if (has_coordinates_) {
      grid_ = rectangle_grid(lat_, lon_);
    } else {
      // Grid indices, not degrees: every cell weighs the same.
      grid_.rows = lat_;
      grid_.columns = lon_;
      grid_.areas.assign(lat_.size() * lon_.size(), 1.0 / static_cast<double>(lat_.size() * lon_.size()));
      grid_.description = "regular " + std::to_string(lat_.size()) + " x " + std::to_string(lon_.size()) +
                          " without coordinates (equal weights)";
    }
  }
  full_lat_ = num_lat();
  full_lon_ = num_lon();
  read_statics(config);  // on the full grid: regrid "none" compares it with the sources' grid
  cut_region(config);
  computed_forcings_ = config.forcings;
  if (forcings_need_dates() && !time_.has_dates) {
    throw DataError("data.forcings lists time-dependent forcings but the data has no dates: the time coordinate of " +
                    sources_.front()->config.file +
                    " has no CF units; set data.time_origin (the first state's date) and data.time_step, or keep to "
                    "cos_latitude, sin_latitude, cos_longitude, sin_longitude");
  }
  if (!computed_forcings_.empty() && !has_coordinates_) {
    throw DataError("data.forcings needs latitudes and longitudes, but " + no_coordinates_);
  }

  const int64_t bytes = num_times() * num_variables() * num_lat() * num_lon() * 4;
  if (bytes <= options_.preload_max_bytes) {
    torch::Tensor all = torch::empty({num_times(), num_variables(), num_lat(), num_lon()}, torch::kFloat32);
    float* data = all.data_ptr<float>();
    const int64_t per_state = num_variables() * num_lat() * num_lon();
    for (int64_t t = 0; t < num_times(); ++t) read_state(t, data + t * per_state);
    preloaded_ = all;
  }
}

void Dataset::open_source(size_t index, const DataSource& config) {
  // Sources in one file share its reader (and a Zarr store's chunk cache).
  std::shared_ptr<const Reader> reader;
  for (const auto& other : sources_) {
    if (other->config.file == config.file) reader = other->reader;
  }
  if (!reader) {
    reader = open_reader(config.file);
    for (const std::string& note : reader->notes()) reader_notes_.push_back(config.file + ": " + note);
  }
  auto source = std::make_unique<Source>();
  Source& s = *source;
  s.config = config;
  s.reader = reader;
  const VariableMeta& meta = reader->variable(config.variable);  // lists the variables when missing
  s.dims = meta.dims;
  const std::string expected = "; wxtrain expects (time, [level,] lat, lon)";

  // Find time, lat and lon by name or coordinate attributes; what remains is a level dimension
  // (or a singleton such as ERA5's expver/number, read at index 0).
  std::optional<size_t> time_dim, lat_dim, lon_dim;
  // A point set: one dimension carries both a latitude and a longitude (anemoi's `cell`, a
  // reduced Gaussian GRIB's `values`). It is lat and lon at once: the state is [1, cells].
  for (size_t d = 0; d < s.dims.size() && !lat_dim; ++d) {
    if (is_time_dimension(*reader, s.dims[d])) continue;
    if (grid_coordinate(*reader, &meta, s.dims[d], GridAxis::kLatitude) &&
        grid_coordinate(*reader, &meta, s.dims[d], GridAxis::kLongitude)) {
      lat_dim = lon_dim = d;
      s.cells = true;
    }
  }
  for (size_t d = 0; d < s.dims.size(); ++d) {
    if (s.cells && d == *lat_dim) continue;
    if (!time_dim && is_time_dimension(*reader, s.dims[d])) time_dim = d;
    else if (!lat_dim && is_lat_dimension(*reader, s.dims[d], &meta)) lat_dim = d;
    else if (!lon_dim && is_lon_dimension(*reader, s.dims[d], &meta)) lon_dim = d;
  }
  if (!time_dim) {
    throw DataError(where(config) + " has no time dimension " + dims_text(s.dims) + expected +
                    " (a time dimension is named time, valid_time, ... or has a coordinate with units \"<unit> since <date>\")");
  }
  if (!lat_dim || !lon_dim) {
    // Files without coordinate hints: the last two dimensions other than time are (lat, lon).
    std::vector<size_t> rest;
    for (size_t d = 0; d < s.dims.size(); ++d) {
      if (d != *time_dim) rest.push_back(d);
    }
    if (rest.size() < 2) throw DataError(where(config) + " has dimensions " + dims_text(s.dims) + expected);
    lat_dim = rest[rest.size() - 2];
    lon_dim = rest[rest.size() - 1];
  }
  s.time_dim = *time_dim;
  s.lat_dim = *lat_dim;
  s.lon_dim = *lon_dim;
  std::vector<size_t> others;
  for (size_t d = 0; d < s.dims.size(); ++d) {
    if (d != s.time_dim && d != s.lat_dim && d != s.lon_dim && s.dims[d].length != 1) others.push_back(d);
  }
  if (others.size() > 1) {
    // An ensemble member or a second vertical axis: reading index 0 of it would be silently wrong.
    throw DataError(where(config) + " has more than one dimension of length > 1 besides time, lat and lon " +
                    dims_text(s.dims) + expected + "; select the others out of the file first");
  }

  VariableInfo info;
  info.role = config.role;
  info.source_name = config.name.empty() ? config.variable : config.name;
  info.units = meta.text("units").value_or("");
  info.long_name = meta.text("long_name").value_or("");
  info.stored_mean = meta.number("anemoi_mean");
  info.stored_stdev = meta.number("anemoi_stdev");
  info.file = config.file;
  info.file_variable = config.variable;
  s.first_channel = variables_.size();
  if (others.empty()) {
    if (!config.levels.empty()) {
      throw DataError(where(config) + " has no level dimension " + dims_text(s.dims) + " but levels = [" +
                      numbers_text(config.levels) + "] was asked for; remove levels for a single-level variable");
    }
    info.name = info.source_name;
    variables_.push_back(info);
  } else {
    const Dimension& level = s.dims[others.front()];
    const auto values = coordinate(*reader, level);
    std::vector<double> available = values ? *values : std::vector<double>{};
    if (!values) {
      for (size_t i = 0; i < level.length; ++i) available.push_back(static_cast<double>(i));
    }
    if (config.levels.empty()) {
      throw DataError(where(config) + " has " + std::to_string(level.length) + " levels in '" + level.name + "' " +
                      dims_text(s.dims) + ": choose them with levels = [...] in its [[data.sources]] entry; the file has " +
                      level.name + " = " + numbers_text(available));
    }
    s.level_dim = others.front();
    info.level_units = coordinate_text(*reader, level.name, "units");
    for (double wanted : config.levels) {
      auto found = std::find_if(available.begin(), available.end(), [&](double v) { return close_to(v, wanted); });
      if (found == available.end()) {
        throw DataError(where(config) + " has no level " + number_text(wanted) + " in '" + level.name +
                        "'; the levels there are " + numbers_text(available) +
                        (info.level_units.empty() ? "" : " (" + info.level_units + ")"));
      }
      s.level_indices.push_back(static_cast<size_t>(found - available.begin()));
      VariableInfo channel = info;
      channel.level = wanted;
      channel.name = level_channel_name(info.source_name, wanted);
      variables_.push_back(channel);
    }
    s.num_channels = s.level_indices.size();
  }

  s.scale = meta.number("scale_factor").value_or(1.0);
  s.offset = meta.number("add_offset").value_or(0.0);
  for (const char* attribute : {"_FillValue", "missing_value"}) {
    auto it = meta.attributes.find(attribute);
    if (it == meta.attributes.end()) continue;
    for (double value : it->second.numbers) {
      if (!std::isnan(value)) s.fill_values.push_back(static_cast<float>(value));
    }
    if (!it->second.numbers.empty()) has_fill_values_ = true;
  }

  // Time as dates when the coordinate has CF units.
  const Dimension& time = s.dims[s.time_dim];
  const auto time_values = coordinate(*reader, time);
  s.time_units = time_values ? coordinate_text(*reader, time.name, "units") : "";
  s.has_time_coordinate = time_values.has_value();
  if (time_values) {
    s.raw_times = *time_values;
  } else {
    for (size_t i = 0; i < time.length; ++i) s.raw_times.push_back(static_cast<double>(i));
  }
  if (time_values && s.time_units.find(" since ") != std::string::npos) {
    try {
      const TimeUnits units = parse_time_units(s.time_units, coordinate_text(*reader, time.name, "calendar"));
      s.calendar = units.calendar;
      s.seconds = decode_times(s.raw_times, units);
      s.has_dates = true;
    } catch (const DataError& error) {
      throw DataError("time coordinate '" + time.name + "' of " + config.file + ": " + error.what());
    }
  }

  // The grid, matched by value against the first source.
  const Dimension& lat_d = s.dims[s.lat_dim];
  const Dimension& lon_d = s.dims[s.lon_dim];
  const auto lat_name = grid_coordinate(*reader, &meta, lat_d, GridAxis::kLatitude);
  const auto lon_name = grid_coordinate(*reader, &meta, lon_d, GridAxis::kLongitude);
  const auto lat = lat_name ? std::optional(reader->read_doubles(*lat_name)) : std::nullopt;
  const auto lon = lon_name ? std::optional(reader->read_doubles(*lon_name)) : std::nullopt;
  if (index > 0 && s.cells != point_set_) {
    const DataSource& first = sources_.front()->config;
    throw DataError("grid mismatch: " + where(config) + " " + dims_text(s.dims) + " is " +
                    (s.cells ? "a list of cells" : "a latitude x longitude rectangle") + " but " + where(first) + " is " +
                    (point_set_ ? "a list of cells" : "a latitude x longitude rectangle"));
  }
  if (s.cells) {
    // Both coordinates were found along the cell dimension (above).
    if (index == 0) {
      point_set_ = true;
      lat_ = *lat;
      lon_ = *lon;
      grid_ = cell_grid(lat_, lon_, where(config));
    } else {
      const DataSource& first = sources_.front()->config;
      auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
        return std::equal(a.begin(), a.end(), b.begin(), b.end(), close_to);
      };
      if (lat->size() != lat_.size()) {
        throw DataError("grid mismatch: " + where(config) + " has " + std::to_string(lat->size()) + " cells but " +
                        where(first) + " has " + std::to_string(lat_.size()));
      }
      if (!same(*lat, lat_) || !same(*lon, lon_)) {
        throw DataError("grid mismatch: " + where(config) + " has the same number of cells as " + where(first) +
                        " but not the same cells in the same order (their latitudes/longitudes differ)");
      }
    }
    sources_.push_back(std::move(source));
    return;
  }
  if (index == 0) {
    has_coordinates_ = lat && lon;
    lat_ = lat ? *lat : std::vector<double>(lat_d.length);
    lon_ = lon ? *lon : std::vector<double>(lon_d.length);
    if (!has_coordinates_) {
      // Grid indices stand in for the positions, and say so: nothing that needs degrees (the
      // latitude weights, data.region, computed forcings, regridding) takes them for degrees.
      for (size_t i = 0; i < lat_.size(); ++i) lat_[i] = static_cast<double>(i);
      for (size_t i = 0; i < lon_.size(); ++i) lon_[i] = static_cast<double>(i);
      no_coordinates_ = where(config) + " " + dims_text(s.dims) + " has no " +
                        (lat ? "longitudes (" + missing_grid_coordinate(*reader, &meta, lon_d, GridAxis::kLongitude)
                             : "latitudes (" + missing_grid_coordinate(*reader, &meta, lat_d, GridAxis::kLatitude)) +
                        ")";
    }
  } else {
    const DataSource& first = sources_.front()->config;
    if (lat_d.length != lat_.size() || lon_d.length != lon_.size()) {
      std::ostringstream message;
      message << "grid mismatch: " << where(config) << " is " << lat_d.length << " x " << lon_d.length
              << " (lat x lon) but " << where(first) << " is " << lat_.size() << " x " << lon_.size();
      throw DataError(message.str());
    }
    if (has_coordinates_ && lat && lon) {
      auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
        return std::equal(a.begin(), a.end(), b.begin(), b.end(), close_to);
      };
      std::vector<double> reversed(lat->rbegin(), lat->rend());
      if (same(*lat, lat_)) {
        s.flip_lat = false;
      } else if (same(reversed, lat_)) {
        s.flip_lat = true;
      } else {
        std::ostringstream message;
        message << "grid mismatch: " << where(config) << " has latitudes " << lat->front() << " .. " << lat->back()
                << " but " << where(first) << " has " << lat_.front() << " .. " << lat_.back()
                << " (same size, different values)";
        throw DataError(message.str());
      }
      // Longitudes compared on the circle: -180..180 and 0..360 grids are the same grid rolled.
      auto wrap = [](double v) { return std::fmod(std::fmod(v, 360.0) + 360.0, 360.0); };
      const size_t n = lon_.size();
      std::optional<int64_t> shift;
      for (size_t k = 0; k < n && !shift; ++k) {
        bool all = true;
        for (size_t j = 0; j < n && all; ++j) {
          const double a = wrap((*lon)[(j + k) % n]), b = wrap(lon_[j]);
          all = close_to(a, b) || close_to(std::abs(a - b), 360.0);
        }
        if (all) shift = static_cast<int64_t>(k);
      }
      if (!shift) {
        std::ostringstream message;
        message << "grid mismatch: " << where(config) << " has longitudes " << lon->front() << " .. " << lon->back()
                << " but " << where(first) << " has " << lon_.front() << " .. " << lon_.back()
                << " (not the same points, even allowing for -180..180 against 0..360)";
        throw DataError(message.str());
      }
      s.lon_shift = *shift;
    }
  }
  sources_.push_back(std::move(source));
}

void Dataset::merge_time_axes(const DataConfig& config) {
  const Source& first = *sources_.front();
  bool all_dates = true;
  for (const auto& s : sources_) all_dates = all_dates && s->has_dates;
  time_.units = first.time_units;

  std::vector<std::vector<int64_t>> per_source_index;  // dataset (pre-subsampling) -> source index
  std::vector<int64_t> merged;                         // seconds, sorted
  if (all_dates) {
    time_.has_dates = true;
    time_.calendar = first.calendar;
    // Dates of every source in the first source's calendar, then the dates all sources share.
    std::vector<std::map<int64_t, int64_t>> by_date(sources_.size());
    for (size_t i = 0; i < sources_.size(); ++i) {
      const Source& s = *sources_[i];
      for (size_t k = 0; k < s.seconds.size(); ++k) {
        int64_t seconds = s.seconds[k];
        if (s.calendar != time_.calendar) {
          const DateTime date = from_seconds(seconds, s.calendar);
          if (!valid_date(date, time_.calendar)) {
            throw DataError("time axis mismatch: " + s.config.file + " has " + date.to_iso() + " in calendar '" +
                            calendar_name(s.calendar) + "', which does not exist in the '" + calendar_name(time_.calendar) +
                            "' calendar of " + first.config.file);
          }
          seconds = to_seconds(date, time_.calendar);
        }
        if (!by_date[i].emplace(seconds, static_cast<int64_t>(k)).second) {
          throw DataError(s.config.file + " has the time " + from_seconds(seconds, time_.calendar).to_iso() +
                          " twice (time indices " + std::to_string(by_date[i][seconds]) + " and " + std::to_string(k) + ")");
        }
      }
    }
    for (const auto& [seconds, k] : by_date[0]) {
      bool everywhere = true;
      for (size_t i = 1; i < sources_.size() && everywhere; ++i) everywhere = by_date[i].count(seconds) > 0;
      if (everywhere) merged.push_back(seconds);
    }
    if (merged.empty()) {
      std::string ranges;
      for (size_t i = 0; i < sources_.size(); ++i) {
        ranges += "; " + sources_[i]->config.file + ": " + from_seconds(by_date[i].begin()->first, time_.calendar).to_iso() +
                  " .. " + from_seconds(by_date[i].rbegin()->first, time_.calendar).to_iso();
      }
      throw DataError("the data sources have no time in common" + ranges);
    }
    per_source_index.resize(sources_.size());
    for (size_t i = 0; i < sources_.size(); ++i) {
      for (int64_t seconds : merged) per_source_index[i].push_back(by_date[i].at(seconds));
    }
  } else {
    if (!config.time_origin.empty() && first.has_dates) {
      throw DataError("data.time_origin is set but " + where(first.config) +
                      " has a CF time coordinate: its dates are used, remove data.time_origin");
    }
    // Without dates on every source, states are matched by position, as they are stored.
    for (const auto& s : sources_) {
      if (s->raw_times.size() != first.raw_times.size()) {
        throw DataError("time axis mismatch: " + where(s->config) + " has " + std::to_string(s->raw_times.size()) +
                        " times but " + where(first.config) + " has " + std::to_string(first.raw_times.size()) +
                        " (and without CF time units on every source they can only be matched by position)");
      }
      for (size_t k = 0; k < s->raw_times.size(); ++k) {
        if (s->has_time_coordinate && first.has_time_coordinate && s->time_units == first.time_units &&
            !close_to(s->raw_times[k], first.raw_times[k])) {
          std::ostringstream message;
          message << "time axis mismatch: " << where(s->config) << " and " << where(first.config)
                  << " differ at time index " << k << " (" << s->raw_times[k] << " vs " << first.raw_times[k] << ")";
          throw DataError(message.str());
        }
      }
    }
    std::vector<int64_t> identity(first.raw_times.size());
    for (size_t k = 0; k < identity.size(); ++k) identity[k] = static_cast<int64_t>(k);
    per_source_index.assign(sources_.size(), identity);
  }

  const int64_t n = static_cast<int64_t>(per_source_index.front().size());
  source_times_ = n;
  source_step_seconds_ = common_spacing(merged);
  source_monthly_ = time_.has_dates && time_.calendar != Calendar::k360Day &&
                    monthly_states(merged, source_step_seconds_, time_.calendar);
  const std::string step_key = "data.time_step = \"" + config.time_step + "\"";
  // data.time_step, read: a duration or calendar months (a fixed 30 days each in 360_day).
  auto parse_step = [&](Calendar calendar) {
    TimeStep step;
    try {
      step = fixed_where_possible(parse_time_step(config.time_step), calendar);
    } catch (const DataError& error) {
      throw DataError("data.time_step: " + std::string(error.what()));
    }
    if (step.seconds < 0) throw DataError(step_key + " must be a positive duration");
    if (step.seconds == 0 && step.months == 0) throw DataError(step_key + " must be a positive duration");
    return step;
  };
  std::vector<int64_t> keep;
  if (!config.time_origin.empty() && !time_.has_dates) {
    // Undated states one time_step apart from a given first date (the storm files: six-hourly
    // from their reftime): every state gets a date, so forcings and climatology can use it.
    if (config.time_step.empty()) {
      throw DataError("data.time_origin = \"" + config.time_origin +
                      "\" needs data.time_step, the spacing of the states (e.g. \"6h\")");
    }
    DateTime origin;
    try {
      origin = parse_date(config.time_origin);
    } catch (const DataError& error) {
      throw DataError(std::string("data.time_origin: ") + error.what());
    }
    const TimeStep step = parse_step(Calendar::kStandard);
    time_.has_dates = true;
    time_.calendar = Calendar::kStandard;
    time_.step_seconds = step.seconds;
    time_.step_months = step.months;
    const int64_t start = to_seconds(origin, Calendar::kStandard);
    for (int64_t k = 0; k < n; ++k) {
      keep.push_back(k);
      merged.push_back(steps_after(start, step, k, Calendar::kStandard));
    }
    source_step_seconds_ = step.seconds;
    source_monthly_ = step.months != 0;
  } else if (!config.time_step.empty()) {
    if (!time_.has_dates) {
      throw DataError(step_key + " needs dates, but the time coordinate of " +
                      (first.has_dates ? where(sources_.back()->config) : where(first.config)) +
                      " has no CF units (\"hours since 1979-01-01\")");
    }
    const TimeStep step = parse_step(time_.calendar);
    const std::string spacing_of = "the most common spacing between the states of " + first.config.file;
    if (step.months == 0 && source_monthly_) {
      throw DataError(step_key + ": the data is monthly (one state per calendar month, " + spacing_of +
                      " being " + format_duration(source_step_seconds_) + ") and months differ in length in the " +
                      calendar_name(time_.calendar) + " calendar; use calendar months, data.time_step = \"1mo\"");
    }
    if (step.months == 0 && source_step_seconds_ > 0 && step.seconds % source_step_seconds_ != 0) {
      const std::string d = format_duration(source_step_seconds_);
      throw DataError(step_key + " must be a multiple of the data's spacing, " + d + " (" + spacing_of +
                      "): e.g. \"" + d + "\", \"" + format_duration(2 * source_step_seconds_) + "\" or \"" +
                      format_duration(3 * source_step_seconds_) + "\"");
    }
    time_.step_seconds = step.seconds;
    time_.step_months = step.months;
    if (step.months == 0) {
      for (int64_t k = 0; k < n; ++k) {
        if ((merged[k] - merged.front()) % step.seconds == 0) keep.push_back(k);
      }
    } else {
      // Every step.months-th month from the first state's; with finer data than monthly, the
      // states on the first one's day of the month and time of day (a month without that day,
      // the 31st, has none: a gap).
      const DateTime first_date = from_seconds(merged.front(), time_.calendar);
      const int64_t first_month = month_number(merged.front(), time_.calendar);
      for (int64_t k = 0; k < n; ++k) {
        if ((month_number(merged[k], time_.calendar) - first_month) % step.months != 0) continue;
        const DateTime date = from_seconds(merged[k], time_.calendar);
        const bool same_time_of_month = date.day == first_date.day && date.hour == first_date.hour &&
                                        date.minute == first_date.minute && date.second == first_date.second;
        if (source_monthly_ || same_time_of_month) keep.push_back(k);
      }
    }
  } else {
    if (source_monthly_) {
      time_.step_months = 1;
    } else {
      time_.step_seconds = source_step_seconds_;
    }
    for (int64_t k = 0; k < n; ++k) keep.push_back(k);
  }

  for (size_t i = 0; i < sources_.size(); ++i) {
    for (int64_t k : keep) sources_[i]->time_index.push_back(per_source_index[i][k]);
  }
  for (int64_t k : keep) {
    time_.raw.push_back(first.raw_times[per_source_index[0][k]]);
    if (time_.has_dates) time_.seconds.push_back(merged[k]);
  }
}

std::vector<int64_t> Dataset::channel_indices(const std::string& role) const {
  std::vector<int64_t> out;
  for (size_t i = 0; i < variables_.size(); ++i)
    if (variables_[i].role == role) out.push_back(static_cast<int64_t>(i));
  return out;
}

bool Dataset::forcings_need_dates() const {
  for (const auto& name : computed_forcings_)
    if (forcing_needs_time(name)) return true;
  return false;
}

torch::Tensor Dataset::computed_forcings(int64_t seconds) const {
  if (point_set_) return compute_cell_forcings(computed_forcings_, lat_, lon_, seconds, time_.calendar);
  return compute_forcings(computed_forcings_, lat_, lon_, seconds, time_.calendar);
}

void Dataset::read_statics(const DataConfig& config) {
  std::vector<torch::Tensor> fields;
  if (point_set_ && !config.statics.empty()) {
    throw DataError("[[data.static]] '" + config.statics.front().name + "': static fields are read onto latitude x "
                    "longitude rectangles only, but " + where(sources_.front()->config) + " is a list of " +
                    std::to_string(lat_.size()) + " cells; add the field to the data as a source with role = "
                    "\"forcing\" instead");
  }
  for (const auto& field : config.statics) {
    if (!has_coordinates_ && field.regrid != "none") {
      throw DataError("[[data.static]] '" + field.name + "': regrid = \"" + field.regrid + "\" needs latitudes and "
                      "longitudes, but " + no_coordinates_);
    }
    fields.push_back(read_static_field(field.file, field.variable, field.regrid, lat_, lon_));
    static_names_.push_back(field.name);
  }
  statics_ = fields.empty() ? torch::empty({0, num_lat(), num_lon()}, torch::kFloat32) : torch::stack(fields);
}

void Dataset::cut_region(const DataConfig& config) {
  if (!config.region.set) return;
  const Region& r = config.region;
  if (!has_coordinates_) {
    throw DataError("data.region needs latitudes and longitudes, but " + no_coordinates_);
  }
  auto wrap = [](double v) { return std::fmod(std::fmod(v, 360.0) + 360.0, 360.0); };
  const double tolerance = 1e-6;
  std::ostringstream range;
  range << "lat = [" << r.lat_min << ", " << r.lat_max << "], lon = [" << r.lon_min << ", " << r.lon_max << "]";
  if (point_set_) {
    // The cells inside the region, in their order; they keep their area weights.
    double width = wrap(r.lon_max - r.lon_min);
    if (width == 0) width = 360;
    region_rows_ = {0};
    for (size_t c = 0; c < lat_.size(); ++c) {
      double d = wrap(lon_[c] - r.lon_min);
      if (d > 360 - tolerance) d = 0;
      if (lat_[c] >= r.lat_min - tolerance && lat_[c] <= r.lat_max + tolerance && d <= width + tolerance)
        region_cols_.push_back(static_cast<int64_t>(c));
    }
    if (region_cols_.empty()) {
      throw DataError("data.region { " + range.str() + " } holds no cell of " + sources_.front()->config.file + " (" +
                      std::to_string(lat_.size()) + " cells)");
    }
    grid_ = select_cells(grid_, region_cols_);
    lat_ = grid_.latitudes;
    lon_ = grid_.longitudes;
    const auto cols_t = torch::tensor(region_cols_, torch::kInt64);
    statics_ = statics_.index_select(2, cols_t).contiguous();
    return;
  }
  for (size_t i = 0; i < lat_.size(); ++i)
    if (lat_[i] >= r.lat_min - tolerance && lat_[i] <= r.lat_max + tolerance) region_rows_.push_back(static_cast<int64_t>(i));
  // Longitudes as distances east of the west edge: the region is [0, width], which crosses the
  // seam when west > east (350 .. 10 is 20 degrees wide); columns run west to east.
  double width = wrap(r.lon_max - r.lon_min);
  if (width == 0) width = 360;  // [0, 360]: the whole circle
  std::vector<std::pair<double, int64_t>> east_of_edge;
  for (size_t j = 0; j < lon_.size(); ++j) {
    double d = wrap(lon_[j] - r.lon_min);
    if (d > 360 - tolerance) d = 0;
    if (d <= width + tolerance) east_of_edge.emplace_back(d, static_cast<int64_t>(j));
  }
  std::stable_sort(east_of_edge.begin(), east_of_edge.end());
  for (const auto& [d, j] : east_of_edge) region_cols_.push_back(j);
  if (region_rows_.empty() || region_cols_.empty()) {
    std::ostringstream message;
    message << "data.region { " << range.str() << " } holds no grid point of " << sources_.front()->config.file
            << " (latitudes " << lat_.front() << " .. " << lat_.back() << ", longitudes " << lon_.front() << " .. "
            << lon_.back() << ")";
    throw DataError(message.str());
  }
  const int64_t rows = static_cast<int64_t>(region_rows_.size()), cols = static_cast<int64_t>(region_cols_.size());
  if (config.boundary > 0 && (rows <= 2 * config.boundary || cols <= 2 * config.boundary)) {
    throw DataError("data.boundary = " + std::to_string(config.boundary) + " leaves no interior in data.region { " +
                    range.str() + " }, which is " + std::to_string(rows) + " x " + std::to_string(cols) + " points");
  }
  std::vector<double> lat, lon;
  for (int64_t i : region_rows_) lat.push_back(lat_[static_cast<size_t>(i)]);
  for (int64_t j : region_cols_) lon.push_back(lon_[static_cast<size_t>(j)]);
  lat_ = std::move(lat);
  lon_ = std::move(lon);
  grid_ = rectangle_grid(lat_, lon_);
  const auto rows_t = torch::tensor(region_rows_, torch::kInt64), cols_t = torch::tensor(region_cols_, torch::kInt64);
  statics_ = statics_.index_select(1, rows_t).index_select(2, cols_t).contiguous();
}

std::vector<std::string> Dataset::variable_names() const {
  std::vector<std::string> names;
  for (const auto& info : variables_) names.push_back(info.name);
  return names;
}

int64_t Dataset::grid_extent() const { return point_set_ ? num_lon() : num_lat(); }

void Dataset::read_state(int64_t t, float* out) const { read_rows(t, 0, grid_extent(), out); }

void Dataset::read_rows(int64_t t, int64_t begin, int64_t length, float* out) const {
  // The band's rows (cells) in the sources' whole grid: with data.region the region's rows
  // (cells) from `begin`, ascending and contiguous for a rectangle's latitudes, ascending for a
  // point set's cells; the span between the lowest and highest is read and the band cut from it.
  const bool region = !region_rows_.empty();
  const std::vector<int64_t>& band_index = point_set_ ? region_cols_ : region_rows_;
  int64_t lo = begin, hi = begin + length - 1;
  if (region) {
    lo = band_index[static_cast<size_t>(begin)];
    hi = band_index[static_cast<size_t>(begin + length - 1)];
    for (int64_t i = begin; i < begin + length; ++i) {
      lo = std::min(lo, band_index[static_cast<size_t>(i)]);
      hi = std::max(hi, band_index[static_cast<size_t>(i)]);
    }
  }
  const int64_t span = hi - lo + 1;
  const int64_t plane = point_set_ ? span : span * full_lon_;
  thread_local std::vector<float> scratch;  // one per loader worker, reused state after state
  thread_local std::vector<float> full;     // the span of the sources' grid, when a region is cut from it
  float* target = out;
  if (region) {
    full.resize(static_cast<size_t>(num_variables() * plane));
    target = full.data();
  }
  int64_t bytes = 0;
  for (const auto& s : sources_) {
    bytes += s->read_channels(s->time_index[static_cast<size_t>(t)], target + static_cast<int64_t>(s->first_channel) * plane,
                              scratch, static_cast<size_t>(lo), static_cast<size_t>(span));
  }
  archive_bytes_ += bytes;
  if (!region) return;
  // The region's columns are cut from whole rows: a rectangle's rows are read whole (a rolled or
  // seam-crossing region needs them), so a region of a global archive costs its rows' global read.
  const int64_t out_plane = point_set_ ? length : length * num_lon();
  for (int64_t v = 0; v < num_variables(); ++v) {
    const float* source = full.data() + v * plane;
    float* dest = out + v * out_plane;
    if (point_set_) {
      for (int64_t i = 0; i < length; ++i) dest[i] = source[region_cols_[static_cast<size_t>(begin + i)] - lo];
      continue;
    }
    for (int64_t i = 0; i < length; ++i) {
      const float* row = source + (region_rows_[static_cast<size_t>(begin + i)] - lo) * full_lon_;
      float* line = dest + i * num_lon();
      for (int64_t j = 0; j < num_lon(); ++j) line[j] = row[region_cols_[static_cast<size_t>(j)]];
    }
  }
}

torch::Tensor Dataset::state(int64_t t) const { return shared_state(t).clone(); }

torch::Tensor Dataset::shared_state(int64_t t) const {
  TORCH_CHECK(t >= 0 && t < num_times(), "time index ", t, " outside [0, ", num_times(), ")");
  if (preloaded_.defined()) return preloaded_[t];
  if (banded()) {
    // The whole grid after set_band (the normalisation statistics' pass over the training split,
    // which stay the whole grid's): read each time, never cached, so the cache holds the band only.
    torch::Tensor state = torch::empty({num_variables(), num_lat(), num_lon()}, torch::kFloat32);
    read_state(t, state.data_ptr<float>());
    return state;
  }
  return cached(t);
}

torch::Tensor Dataset::band_state(int64_t t) const {
  if (!banded()) return shared_state(t);
  TORCH_CHECK(t >= 0 && t < num_times(), "time index ", t, " outside [0, ", num_times(), ")");
  if (band_preloaded_.defined()) return band_preloaded_[t];
  return cached(t);
}

torch::Tensor Dataset::cached(int64_t t) const {
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto hit = cache_.find(t);
    if (hit != cache_.end()) {
      cache_order_.splice(cache_order_.begin(), cache_order_, hit->second.second);
      return hit->second.first;
    }
  }
  const int64_t begin = banded() ? band_begin_ : 0, length = banded() ? band_length_ : grid_extent();
  torch::Tensor state = point_set_ ? torch::empty({num_variables(), 1, length}, torch::kFloat32)
                                   : torch::empty({num_variables(), length, num_lon()}, torch::kFloat32);
  read_rows(t, begin, length, state.data_ptr<float>());
  if (options_.cache_states > 0) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.find(t) == cache_.end()) {
      cache_order_.push_front(t);
      cache_.emplace(t, std::make_pair(state, cache_order_.begin()));
      while (static_cast<int64_t>(cache_.size()) > options_.cache_states) {
        cache_.erase(cache_order_.back());
        cache_order_.pop_back();
      }
    }
  }
  return state;
}

void Dataset::set_band(int64_t begin, int64_t length) {
  const int64_t extent = grid_extent();
  if (begin < 0 || length < 1 || begin + length > extent) {
    throw DataError("a band of " + std::to_string(length) + " " + (point_set_ ? "cells" : "latitude rows") + " from " +
                    std::to_string(begin) + " does not fit the grid's " + std::to_string(extent));
  }
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    cache_.clear();
    cache_order_.clear();
  }
  if (begin == 0 && length == extent) {  // the whole grid: no band
    band_begin_ = 0;
    band_length_ = 0;
    band_preloaded_ = torch::Tensor();
    return;
  }
  band_begin_ = begin;
  band_length_ = length;
  // Small data was read whole at construction: keep the band of it, so this rank holds 1/P (a
  // second set_band reads its band lazily).
  band_preloaded_ = preloaded_.defined() ? preloaded_.narrow(point_set_ ? 3 : 2, begin, length).clone() : torch::Tensor();
  preloaded_ = torch::Tensor();
}

torch::Tensor Dataset::band(const torch::Tensor& t) const {
  if (!banded() || !t.defined()) return t;
  return t.narrow(point_set_ ? -1 : -2, band_begin_, band_length_);
}

torch::Tensor Dataset::band_static_fields() const { return band(statics_); }

torch::Tensor Dataset::band_computed_forcings(int64_t seconds) const {
  if (!banded()) return computed_forcings(seconds);
  const auto first = static_cast<std::ptrdiff_t>(band_begin_), last = static_cast<std::ptrdiff_t>(band_begin_ + band_length_);
  if (point_set_) {
    const std::vector<double> lat(lat_.begin() + first, lat_.begin() + last), lon(lon_.begin() + first, lon_.begin() + last);
    return compute_cell_forcings(computed_forcings_, lat, lon, seconds, time_.calendar);
  }
  const std::vector<double> lat(lat_.begin() + first, lat_.begin() + last);
  return compute_forcings(computed_forcings_, lat, lon_, seconds, time_.calendar);
}

std::pair<int64_t, int64_t> grid_band(int64_t extent, int64_t parts, int64_t index) {
  int64_t begin = 0;
  for (int64_t r = 0; r < index; ++r) begin += extent / parts + (r < extent % parts ? 1 : 0);
  return {begin, extent / parts + (index < extent % parts ? 1 : 0)};
}

void take_grid(RunConfig& config, const Dataset& dataset) {
  // A point set: lat = 1 with one coordinate per cell (models::model_shape reads that as a point set).
  config.data.lat = dataset.num_lat();
  config.data.lon = dataset.num_lon();
  if (dataset.has_coordinates()) {
    config.data.lat_coords = dataset.lat();
    config.data.lon_coords = dataset.lon();
  }
}

void take_named_grid(RunConfig& config) {
  if (config.data.grid_name.empty()) return;
  const Grid grid = named_grid(config.data.grid_name);
  config.data.lat = 1;
  config.data.lon = grid.size();
  config.data.lat_coords = grid.latitudes;
  config.data.lon_coords = grid.longitudes;
}

}  // namespace wxtrain::data
