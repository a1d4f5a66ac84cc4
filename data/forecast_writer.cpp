#include "data/forecast_writer.h"

#include <netcdf.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
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

// The CF time values and attributes to write: the states' times and, with dates, the reference
// time in the same units and the lead times.
struct OutputTime {
  std::vector<double> values;
  std::string units;
  std::string calendar;  // "" without dates
  std::optional<double> reference;
  std::vector<double> lead;  // per state, in lead_units
  std::string lead_units;
};

// The coarsest of days, hours, minutes and seconds in which every lead is a whole number (what
// xarray chooses for timedeltas).
std::string lead_unit(const std::vector<int64_t>& leads, int64_t& seconds_per_unit) {
  for (const auto& [name, size] : std::vector<std::pair<std::string, int64_t>>{
           {"days", 86400}, {"hours", 3600}, {"minutes", 60}, {"seconds", 1}}) {
    if (std::all_of(leads.begin(), leads.end(), [size = size](int64_t l) { return l % size == 0; })) {
      seconds_per_unit = size;
      return name;
    }
  }
  seconds_per_unit = 1;
  return "seconds";
}

OutputTime output_time(const ForecastCoordinates& c) {
  OutputTime time;
  if (!c.has_dates) {
    time.values = c.times;
    time.units = c.time_units;
    return time;
  }
  time.calendar = calendar_name(c.calendar);
  // The reference time first, so it is encoded with the states in one unit and epoch.
  std::vector<int64_t> seconds = c.seconds;
  if (c.reference_seconds) seconds.insert(seconds.begin(), *c.reference_seconds);
  // The data's own units when whole numbers of them express every time; otherwise the coarsest
  // unit that does, since the first time (what xarray would choose).
  EncodedTimes encoded;
  bool own_units = false;
  if (!c.time_units.empty()) {
    try {
      const TimeUnits units = parse_time_units(c.time_units, c.calendar);
      encoded = encode_times(seconds, c.calendar, units.unit_name, units.epoch);
      own_units = std::all_of(encoded.values.begin(), encoded.values.end(), [](double v) { return v == std::round(v); });
      if (own_units) encoded.units = c.time_units;
    } catch (const DataError&) {
      // Units we cannot write back (sub-second): fall through to our own.
    }
  }
  if (!own_units) encoded = encode_times(seconds, c.calendar);
  time.units = encoded.units;
  time.values = encoded.values;
  if (c.reference_seconds) {
    time.reference = time.values.front();
    time.values.erase(time.values.begin());
    std::vector<int64_t> leads;
    for (int64_t s : c.seconds) leads.push_back(s - *c.reference_seconds);
    int64_t unit = 1;
    time.lead_units = lead_unit(leads, unit);
    for (int64_t l : leads) time.lead.push_back(static_cast<double>(l / unit));
  }
  return time;
}

// The variables' `coordinates` attribute: the scalar and auxiliary coordinates xarray attaches.
std::string auxiliary_coordinates(const OutputTime& time) {
  return time.reference ? "forecast_reference_time lead_time" : "";
}

// One output variable of a state [V, H, W]: its channels one after the other ([L, H, W]).
void gather(const float* state, int64_t plane, const OutputVariable& output, std::vector<float>& out) {
  out.resize(output.channels.size() * static_cast<size_t>(plane));
  for (size_t l = 0; l < output.channels.size(); ++l)
    std::copy_n(state + output.channels[l] * plane, plane, out.data() + l * static_cast<size_t>(plane));
}

// The member dimension (ForecastCoordinates::members > 0): cfgrib's name and attributes for
// ECMWF's ensemble members (forecast_writer.h).
const char* const kMemberDim = "number";
const std::vector<std::pair<std::string, std::string>>& member_attributes() {
  static const std::vector<std::pair<std::string, std::string>> attributes = {
      {"long_name", "ensemble member numerical id"}, {"units", "1"}, {"standard_name", "realization"}};
  return attributes;
}

// A variable's dimensions (or its chunk shape, start or count) from the outside in: time, the
// member when there is one, its levels when it has them, lat, lon (on a point set the cell alone,
// passed as `lon`).
template <typename T>
std::vector<T> layout(T time, std::optional<T> member, std::optional<T> level, T lat, T lon, bool cells = false) {
  std::vector<T> out = {time};
  if (member) out.push_back(*member);
  if (level) out.push_back(*level);
  if (!cells) out.push_back(lat);
  out.push_back(lon);
  return out;
}

const char* const kCellDim = "cell";

// The `coordinates` attribute of an output variable: the forecast's times, and on a point set the
// cells' lat and lon (auxiliary coordinates of the cell dimension).
std::string coordinates_attribute(const std::string& times, bool cells) {
  if (!cells) return times;
  return times.empty() ? "lat lon" : times + " lat lon";
}

}  // namespace

// Where the states go: one implementation per file format.
class ForecastWriter::Format {
 public:
  virtual ~Format() = default;
  virtual void write_step(int64_t k, const float* state) = 0;  // [V, H, W], [N, V, H, W] with members
  virtual void commit() = 0;
};

namespace {

class NetcdfFormat : public ForecastWriter::Format {
 public:
  NetcdfFormat(const std::string& target, const ForecastCoordinates& c, const std::vector<OutputVariable>& outputs,
               const std::vector<OutputLevels>& levels, const OutputTime& time)
      : target_(target), outputs_(outputs), time_(time), H_(static_cast<size_t>(c.rows())), W_(c.lon.size()),
        V_(c.variables.size()), members_(static_cast<size_t>(std::max<int64_t>(0, c.members))), cells_(c.point_set) {
    const std::filesystem::path file(target);
    temporary_ = (file.parent_path() / ("." + file.filename().string() + ".tmp-" + std::to_string(::getpid()))).string();
    try {
      guarded([&] { define(c, levels); });
    } catch (...) {
      discard();  // no destructor runs for a constructor that throws
      throw;
    }
  }

  ~NetcdfFormat() override {
    if (!committed_) discard();
  }

  void write_step(int64_t k, const float* state) override {
    guarded([&] {
      const size_t t = static_cast<size_t>(k);
      file_->write_doubles("time", {t}, {1}, &time_.values[t]);
      if (time_.reference) file_->write_doubles("lead_time", {t}, {1}, &time_.lead[t]);
      // One member at a time: [1, (1,) (L,) H, W] at (t, (m,) 0...).
      for (size_t m = 0; m < std::max<size_t>(1, members_); ++m) {
        const float* member = state + m * V_ * H_ * W_;
        const auto in_member = members_ ? std::optional<size_t>(m) : std::nullopt;
        const auto one = members_ ? std::optional<size_t>(1) : std::nullopt;
        for (const auto& output : outputs_) {
          gather(member, static_cast<int64_t>(H_ * W_), output, field_);
          const bool levels = !output.level_dim.empty();
          file_->write_floats(output.name,
                              layout<size_t>(t, in_member, levels ? std::optional<size_t>(0) : std::nullopt, 0, 0, cells_),
                              layout<size_t>(1, one, levels ? std::optional<size_t>(output.channels.size()) : std::nullopt,
                                             H_, W_, cells_),
                              field_.data());
        }
      }
      // HDF5 keeps written chunks of a growing (unlimited) dimension in memory until a flush,
      // whatever the chunk cache: flushed every step, memory stays flat and the temporary file
      // holds every step written so far.
      file_->sync();
    });
  }

  void commit() override {
    guarded([&] {
      file_->close();
      std::filesystem::rename(temporary_, target_);
    });
    committed_ = true;
  }

 private:
  void define(const ForecastCoordinates& c, const std::vector<OutputLevels>& levels) {
    file_ = std::make_unique<NetcdfFile>(NetcdfFile::create(temporary_));
    NetcdfFile& file = *file_;
    file.define_dimension("time", 0);  // unlimited: a record per step, as it is produced
    if (members_) file.define_dimension(kMemberDim, members_);
    for (const auto& level : levels) file.define_dimension(level.dim, level.values.size());
    if (cells_) {
      file.define_dimension(kCellDim, W_);
    } else {
      file.define_dimension("lat", H_);
      file.define_dimension("lon", W_);
    }
    file.define_variable("time", NC_DOUBLE, {"time"});
    if (!time_.units.empty()) file.put_text_attribute("time", "units", time_.units);
    if (!time_.calendar.empty()) {
      file.put_text_attribute("time", "calendar", time_.calendar);
      file.put_text_attribute("time", "standard_name", "time");
    }
    if (time_.reference) {
      file.define_variable("forecast_reference_time", NC_DOUBLE, {});
      file.put_text_attribute("forecast_reference_time", "standard_name", "forecast_reference_time");
      file.put_text_attribute("forecast_reference_time", "units", time_.units);
      file.put_text_attribute("forecast_reference_time", "calendar", time_.calendar);
      file.define_variable("lead_time", NC_DOUBLE, {"time"});
      file.put_text_attribute("lead_time", "standard_name", "forecast_period");
      file.put_text_attribute("lead_time", "long_name", "time since forecast_reference_time");
      file.put_text_attribute("lead_time", "units", time_.lead_units);
    }
    if (members_) {
      file.define_variable(kMemberDim, NC_INT64, {kMemberDim});
      for (const auto& [name, value] : member_attributes()) file.put_text_attribute(kMemberDim, name, value);
    }
    for (const auto& level : levels) {
      file.define_variable(level.dim, NC_DOUBLE, {level.dim});
      if (!level.units.empty()) file.put_text_attribute(level.dim, "units", level.units);
    }
    file.define_variable("lat", NC_DOUBLE, {cells_ ? kCellDim : "lat"});
    file.define_variable("lon", NC_DOUBLE, {cells_ ? kCellDim : "lon"});
    if (c.has_coordinates) {
      file.put_text_attribute("lat", "units", "degrees_north");
      file.put_text_attribute("lat", "standard_name", "latitude");
      file.put_text_attribute("lon", "units", "degrees_east");
      file.put_text_attribute("lon", "standard_name", "longitude");
    } else {
      // The data had no latitudes: these are grid indices, never labelled as degrees.
      file.put_text_attribute("lat", "long_name", "grid row index (the data has no latitudes)");
      file.put_text_attribute("lon", "long_name", "grid column index (the data has no longitudes)");
    }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (const auto& output : outputs_) {
      const bool has_levels = !output.level_dim.empty();
      file.define_variable(output.name, NC_FLOAT,
                           layout<std::string>("time", members_ ? std::optional<std::string>(kMemberDim) : std::nullopt,
                                               has_levels ? std::optional<std::string>(output.level_dim) : std::nullopt,
                                               "lat", cells_ ? kCellDim : "lon", cells_));
      file.define_chunking(output.name,
                           layout<size_t>(1, members_ ? std::optional<size_t>(1) : std::nullopt,
                                          has_levels ? std::optional<size_t>(output.channels.size()) : std::nullopt, H_, W_,
                                          cells_));
      // One chunk per step (and member), each written whole: no cache, so no step stays in memory.
      file.set_chunk_cache(output.name, 0);
      if (!output.info->units.empty()) file.put_text_attribute(output.name, "units", output.info->units);
      if (!output.info->long_name.empty()) file.put_text_attribute(output.name, "long_name", output.info->long_name);
      // Masked cells (always missing in the data) are NaN, and CF readers must know it.
      file.put_float_attribute(output.name, "_FillValue", nan);
      file.put_float_attribute(output.name, "missing_value", nan);
      const std::string coordinates = coordinates_attribute(auxiliary_coordinates(time_), cells_);
      if (!coordinates.empty()) file.put_text_attribute(output.name, "coordinates", coordinates);
    }
    file.put_text_attribute("", "source", "wxtrain forecast");
    file.put_text_attribute("", "Conventions", "CF-1.8");
    file.end_define();
    if (members_) {
      std::vector<double> numbers(members_);
      for (size_t m = 0; m < members_; ++m) numbers[m] = static_cast<double>(m);
      file.write_doubles(kMemberDim, numbers);  // netCDF-C converts them to the variable's int64
    }
    for (const auto& level : levels) file.write_doubles(level.dim, level.values);
    file.write_doubles("lat", c.lat);
    file.write_doubles("lon", c.lon);
    if (time_.reference) file.write_doubles("forecast_reference_time", {*time_.reference});
  }

  void discard() {
    file_.reset();  // closes it
    std::error_code ignored;
    std::filesystem::remove(temporary_, ignored);
  }

  // netCDF-C's and the file system's messages name the temporary file; the user asked for the target.
  template <typename F>
  void guarded(F&& body) {
    try {
      body();
    } catch (const std::filesystem::filesystem_error& error) {
      throw DataError("cannot write forecast " + target_ + ": " + error.what());
    } catch (const DataError& error) {
      throw DataError("cannot write forecast " + target_ + " (through " + temporary_ + "): " + error.what());
    }
  }

  std::string target_, temporary_;
  std::vector<OutputVariable> outputs_;
  OutputTime time_;
  size_t H_, W_, V_;
  size_t members_;  // 0: no member dimension
  bool cells_;      // a point set: one cell dimension
  std::unique_ptr<NetcdfFile> file_;
  std::vector<float> field_;  // one variable of one step
  bool committed_ = false;
};

class ZarrFormat : public ForecastWriter::Format {
 public:
  ZarrFormat(const std::string& target, const ForecastCoordinates& c, const std::vector<OutputVariable>& outputs,
             const std::vector<OutputLevels>& levels, const OutputTime& time)
      : store_(target), outputs_(outputs), H_(static_cast<size_t>(c.rows())), W_(c.lon.size()), V_(c.variables.size()),
        members_(static_cast<size_t>(std::max<int64_t>(0, c.members))), cells_(c.point_set) {
    auto coordinate = [&](const std::string& name, const std::vector<double>& v, nlohmann::json attributes) {
      const bool on_cells = cells_ && (name == "lat" || name == "lon");
      ZarrArraySpec spec{name, {on_cells ? std::string(kCellDim) : name}, {v.size()}, {std::max<size_t>(1, v.size())},
                         true, std::move(attributes), {}};
      store_.add_array(spec, v.data());
    };
    // Every time is known before the first step, so the coordinates are written whole now.
    nlohmann::json time_attributes = nlohmann::json::object();
    if (!time.units.empty()) time_attributes["units"] = time.units;
    if (!time.calendar.empty()) {
      time_attributes["calendar"] = time.calendar;
      time_attributes["standard_name"] = "time";
    }
    coordinate("time", time.values, time_attributes);
    if (time.reference) {
      ZarrArraySpec spec{"forecast_reference_time", {}, {}, {}, true,
                         {{"standard_name", "forecast_reference_time"}, {"units", time.units}, {"calendar", time.calendar}},
                         {}};
      store_.add_array(spec, &*time.reference);
      ZarrArraySpec lead{"lead_time", {"time"}, {time.lead.size()}, {std::max<size_t>(1, time.lead.size())}, true,
                         {{"standard_name", "forecast_period"},
                          {"long_name", "time since forecast_reference_time"},
                          {"units", time.lead_units}},
                         {}};
      store_.add_array(lead, time.lead.data());
    }
    if (members_) {
      nlohmann::json attributes = nlohmann::json::object();
      for (const auto& [name, value] : member_attributes()) attributes[name] = value;
      std::vector<int64_t> numbers(members_);
      for (size_t m = 0; m < members_; ++m) numbers[m] = static_cast<int64_t>(m);
      ZarrArraySpec spec{kMemberDim, {kMemberDim}, {members_}, {members_}, false, std::move(attributes), {}};
      spec.int64 = true;
      store_.add_array(spec, numbers.data());
    }
    for (const auto& level : levels) {
      nlohmann::json attributes = nlohmann::json::object();
      if (!level.units.empty()) attributes["units"] = level.units;
      coordinate(level.dim, level.values, attributes);
    }
    if (c.has_coordinates) {
      coordinate("lat", c.lat, {{"units", "degrees_north"}, {"standard_name", "latitude"}});
      coordinate("lon", c.lon, {{"units", "degrees_east"}, {"standard_name", "longitude"}});
    } else {  // grid indices: the data had no latitudes
      coordinate("lat", c.lat, {{"long_name", "grid row index (the data has no latitudes)"}});
      coordinate("lon", c.lon, {{"long_name", "grid column index (the data has no longitudes)"}});
    }
    const auto T = static_cast<size_t>(c.steps());
    for (const auto& output : outputs_) {
      ZarrArraySpec spec;
      spec.name = output.name;
      if (!output.info->units.empty()) spec.attributes["units"] = output.info->units;
      if (!output.info->long_name.empty()) spec.attributes["long_name"] = output.info->long_name;
      const std::string coordinates = coordinates_attribute(auxiliary_coordinates(time), cells_);
      if (!coordinates.empty()) spec.attributes["coordinates"] = coordinates;
      spec.fill_value = std::nan("");  // Zarr's own declaration of missing values
      const auto L = output.level_dim.empty() ? std::nullopt : std::optional<size_t>(output.channels.size());
      const auto N = members_ ? std::optional<size_t>(members_) : std::nullopt;
      spec.dims = layout<std::string>("time", N ? std::optional<std::string>(kMemberDim) : std::nullopt,
                                      L ? std::optional<std::string>(output.level_dim) : std::nullopt, "lat",
                                      cells_ ? kCellDim : "lon", cells_);
      spec.shape = layout<size_t>(T, N, L, H_, W_, cells_);
      // A chunk per step and member: each is written as soon as that member's step exists.
      spec.chunks = layout<size_t>(1, N ? std::optional<size_t>(1) : std::nullopt, L, H_, W_, cells_);
      store_.define_array(spec);
    }
    store_.set_group_attributes({{"source", "wxtrain forecast"}, {"Conventions", "CF-1.8"}});
  }

  void write_step(int64_t k, const float* state) override {
    for (size_t m = 0; m < std::max<size_t>(1, members_); ++m) {
      for (const auto& output : outputs_) {
        gather(state + m * V_ * H_ * W_, static_cast<int64_t>(H_ * W_), output, field_);
        const std::vector<size_t> index =
            layout<size_t>(static_cast<size_t>(k), members_ ? std::optional<size_t>(m) : std::nullopt,
                           output.level_dim.empty() ? std::nullopt : std::optional<size_t>(0), 0, 0, cells_);
        store_.write_chunk(output.name, index, field_.data());
      }
    }
  }

  void commit() override { store_.commit(); }

 private:
  ZarrV2Writer store_;
  std::vector<OutputVariable> outputs_;
  size_t H_, W_, V_;
  size_t members_;  // 0: no member dimension
  bool cells_;      // a point set: one cell dimension
  std::vector<float> field_;
};

std::string without_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace

ForecastCoordinates ForecastCoordinates::after(const Dataset& dataset, int64_t start, int64_t steps) {
  const TimeAxis& axis = dataset.time_axis();
  ForecastCoordinates c;
  c.variables = dataset.variables();
  c.lat = dataset.lat();
  c.has_coordinates = dataset.has_coordinates();
  c.lon = dataset.lon();
  c.point_set = dataset.point_set();
  c.has_dates = axis.has_dates;
  c.calendar = axis.calendar;
  c.time_units = axis.units;
  if (axis.has_dates) {
    c.reference_seconds = axis.seconds[static_cast<size_t>(start)];
    for (int64_t k = 1; k <= steps; ++k) c.seconds.push_back(*c.reference_seconds + k * axis.step_seconds);
  } else {
    const double dt = axis.size() > 1 ? axis.raw[1] - axis.raw[0] : 1.0;
    for (int64_t k = 1; k <= steps; ++k) c.times.push_back(axis.raw[static_cast<size_t>(start)] + dt * static_cast<double>(k));
  }
  return c;
}

ForecastWriter::ForecastWriter(const std::string& path, ForecastCoordinates coordinates)
    : path_(without_trailing_slashes(path)), coordinates_(std::move(coordinates)) {
  std::vector<OutputVariable> outputs;
  std::vector<OutputLevels> levels;
  group_channels(coordinates_.variables, outputs, levels);
  const OutputTime time = output_time(coordinates_);
  if (ends_with(path_, ".zarr")) format_ = std::make_unique<ZarrFormat>(path_, coordinates_, outputs, levels, time);
  else format_ = std::make_unique<NetcdfFormat>(path_, coordinates_, outputs, levels, time);
}

ForecastWriter::~ForecastWriter() = default;

void ForecastWriter::write_step(const torch::Tensor& state) {
  const auto V = static_cast<int64_t>(coordinates_.variables.size());
  const auto H = coordinates_.rows();
  const auto W = static_cast<int64_t>(coordinates_.lon.size());
  const int64_t N = coordinates_.members;
  const int64_t rank = N > 0 ? 4 : 3;
  if (state.dim() != rank || (N > 0 && state.size(0) != N) || state.size(rank - 3) != V || state.size(rank - 2) != H ||
      state.size(rank - 1) != W) {
    std::ostringstream message;
    message << "cannot write forecast " << path_ << ": step " << written_ + 1 << " is " << state.sizes()
            << " but the coordinates say ["
            << (N > 0 ? std::to_string(N) + ", " : "") << V << ", " << H << ", " << W << "] ("
            << (N > 0 ? "member, " : "") << "variable, lat, lon)";
    throw DataError(message.str());
  }
  if (written_ >= coordinates_.steps()) {
    throw DataError("cannot write forecast " + path_ + ": all " + std::to_string(coordinates_.steps()) +
                    " steps are written already");
  }
  const torch::Tensor values = state.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  format_->write_step(written_, values.data_ptr<float>());
  ++written_;
}

void ForecastWriter::commit() {
  if (written_ != coordinates_.steps()) {
    throw DataError("cannot write forecast " + path_ + ": " + std::to_string(written_) + " of " +
                    std::to_string(coordinates_.steps()) + " steps were written");
  }
  format_->commit();
}

void write_forecast(const std::string& path, const torch::Tensor& states, const ForecastCoordinates& c) {
  const int64_t T = c.steps();
  const auto V = static_cast<int64_t>(c.variables.size());
  const auto H = c.rows();
  const auto W = static_cast<int64_t>(c.lon.size());
  const int64_t N = c.members;
  const int64_t rank = N > 0 ? 5 : 4;
  if (states.dim() != rank || states.size(0) != T || (N > 0 && states.size(1) != N) || states.size(rank - 3) != V ||
      states.size(rank - 2) != H || states.size(rank - 1) != W) {
    std::ostringstream message;
    message << "cannot write forecast " << path << ": states are " << states.sizes() << " but the coordinates say ["
            << T << ", " << (N > 0 ? std::to_string(N) + ", " : "") << V << ", " << H << ", " << W << "] (time, "
            << (N > 0 ? "member, " : "") << "variable, lat, lon)";
    throw DataError(message.str());
  }
  ForecastWriter writer(path, c);
  for (int64_t t = 0; t < T; ++t) writer.write_step(states[t]);
  writer.commit();
}

}  // namespace wxtrain::data
