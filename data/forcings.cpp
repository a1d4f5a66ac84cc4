#include "data/forcings.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include "core/config.h"
#include "core/error.h"
#include "data/readers/reader.h"

namespace wxtrain::data {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kDegree = kPi / 180.0;
constexpr double kSecondsPerDay = 86400.0;
// IAU 2015 Resolution B3: nominal total solar irradiance.
constexpr double kSolarConstant = 1361.0;

enum class Forcing {
  kCosLatitude,
  kSinLatitude,
  kCosLongitude,
  kSinLongitude,
  kCosLocalTime,
  kSinLocalTime,
  kCosDayOfYear,
  kSinDayOfYear,
  kInsolation,
};

std::string comma_list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

Forcing parse_forcing(const std::string& name) {
  const auto& names = computed_forcing_names();
  auto found = std::find(names.begin(), names.end(), name);
  if (found == names.end()) {
    throw DataError("unknown computed forcing '" + name + "'; the computed forcings are " + comma_list(names));
  }
  return static_cast<Forcing>(found - names.begin());
}

std::string number_text(double value) {
  std::ostringstream s;
  s.precision(10);
  s << value;
  return s.str();
}

void check_grid(const std::vector<double>& lat_deg, const std::vector<double>& lon_deg) {
  // A Dataset without coordinate variables reports indices as latitudes: 0..720 would give
  // plausible-looking but wrong forcings, so refuse what cannot be a latitude.
  for (size_t i = 0; i < lat_deg.size(); ++i) {
    if (!(lat_deg[i] >= -90.0 - 1e-9 && lat_deg[i] <= 90.0 + 1e-9)) {
      throw DataError("computed forcings: latitude " + std::to_string(i) + " is " + number_text(lat_deg[i]) +
                      "; latitudes must be degrees in [-90, 90] (does the dataset have lat/lon coordinate variables?)");
    }
  }
  for (size_t j = 0; j < lon_deg.size(); ++j) {
    if (!std::isfinite(lon_deg[j])) {
      throw DataError("computed forcings: longitude " + std::to_string(j) + " is " + number_text(lon_deg[j]) +
                      "; longitudes must be finite degrees");
    }
  }
}

// What every time-dependent forcing needs at one valid time, worked out once per call.
struct SolarTime {
  double seconds_of_day = 0;  // UTC, [0, 86400)
  double year_angle = 0;      // 2*pi * fraction of the calendar year elapsed
};

SolarTime solar_time(int64_t seconds, Calendar calendar) {
  SolarTime out;
  // Every day has 86400 seconds in every CF calendar and the origin is a midnight, so the time of
  // day is a floor modulo (negative time points are before 1970).
  int64_t of_day = seconds % 86400;
  if (of_day < 0) of_day += 86400;
  out.seconds_of_day = static_cast<double>(of_day);
  const DateTime date = from_seconds(seconds, calendar);
  DateTime start;
  start.year = date.year;
  DateTime next = start;
  next.year = date.year + 1;
  const int64_t year_start = to_seconds(start, calendar);
  const int64_t year_length = to_seconds(next, calendar) - year_start;
  out.year_angle = 2.0 * kPi * static_cast<double>(seconds - year_start) / static_cast<double>(year_length);
  return out;
}

// Sun position at fractional-year angle g (radians), from Spencer, J. W. (1971), "Fourier series
// representation of the position of the sun", Search 2(5), 172, with the coefficients as NOAA's
// Global Monitoring Laboratory gives them in "General Solar Position Calculations"
// (https://gml.noaa.gov/grad/solcalc/solareqns.PDF); the (r0/r)^2 series is Spencer's, as quoted in
// Iqbal (1983), "An Introduction to Solar Radiation", eq. 1.2.1.
struct SunPosition {
  double declination = 0;          // radians
  double equation_of_time_min = 0;  // minutes, true minus mean solar time
  double distance_factor = 0;      // (r0/r)^2
};

SunPosition sun_position(double g) {
  SunPosition sun;
  sun.declination = 0.006918 - 0.399912 * std::cos(g) + 0.070257 * std::sin(g) - 0.006758 * std::cos(2 * g) +
                    0.000907 * std::sin(2 * g) - 0.002697 * std::cos(3 * g) + 0.00148 * std::sin(3 * g);
  sun.equation_of_time_min = 229.18 * (0.000075 + 0.001868 * std::cos(g) - 0.032077 * std::sin(g) -
                                       0.014615 * std::cos(2 * g) - 0.040849 * std::sin(2 * g));
  sun.distance_factor = 1.000110 + 0.034221 * std::cos(g) + 0.001280 * std::sin(g) + 0.000719 * std::cos(2 * g) +
                        0.000077 * std::sin(2 * g);
  return sun;
}

// One forcing into out ([H, W], row-major). `solar` is only read for time-dependent forcings.
void fill_forcing(Forcing forcing, const std::vector<double>& lat_deg, const std::vector<double>& lon_deg,
                  const SolarTime& solar, float* out) {
  const size_t H = lat_deg.size(), W = lon_deg.size();
  // A forcing constant along longitude: one value per row.
  auto by_lat = [&](auto f) {
    for (size_t i = 0; i < H; ++i) std::fill(out + i * W, out + (i + 1) * W, static_cast<float>(f(lat_deg[i] * kDegree)));
  };
  // A forcing constant along latitude: one row, repeated.
  auto by_lon = [&](auto f) {
    if (H == 0) return;
    for (size_t j = 0; j < W; ++j) out[j] = static_cast<float>(f(lon_deg[j] * kDegree));
    for (size_t i = 1; i < H; ++i) std::copy(out, out + W, out + i * W);
  };
  auto constant = [&](double value) { std::fill(out, out + H * W, static_cast<float>(value)); };
  switch (forcing) {
    case Forcing::kCosLatitude: return by_lat([](double phi) { return std::cos(phi); });
    case Forcing::kSinLatitude: return by_lat([](double phi) { return std::sin(phi); });
    case Forcing::kCosLongitude: return by_lon([](double lambda) { return std::cos(lambda); });
    case Forcing::kSinLongitude: return by_lon([](double lambda) { return std::sin(lambda); });
    case Forcing::kCosLocalTime:
    case Forcing::kSinLocalTime: {
      // 2*pi*(t + lon/360*86400)/86400 = the UTC angle of the day + the longitude in radians.
      const double utc = 2.0 * kPi * solar.seconds_of_day / kSecondsPerDay;
      if (forcing == Forcing::kCosLocalTime) return by_lon([&](double lambda) { return std::cos(utc + lambda); });
      return by_lon([&](double lambda) { return std::sin(utc + lambda); });
    }
    case Forcing::kCosDayOfYear: return constant(std::cos(solar.year_angle));
    case Forcing::kSinDayOfYear: return constant(std::sin(solar.year_angle));
    case Forcing::kInsolation: {
      const SunPosition sun = sun_position(solar.year_angle);
      // cos(zenith) = sin(phi) sin(decl) + cos(phi) cos(decl) cos(hour angle): a per-latitude a + b
      // times a per-longitude cos(h). The hour angle is 15 degrees per hour of true solar time from
      // noon, true solar time = UTC + 4 min per degree east + the equation of time.
      const double utc_minutes = solar.seconds_of_day / 60.0;
      const double h0 = ((utc_minutes + sun.equation_of_time_min) / 4.0 - 180.0) * kDegree;
      std::vector<double> cos_hour(W);
      for (size_t j = 0; j < W; ++j) cos_hour[j] = std::cos(h0 + lon_deg[j] * kDegree);
      const double scale = kSolarConstant * sun.distance_factor;
      for (size_t i = 0; i < H; ++i) {
        const double phi = lat_deg[i] * kDegree;
        const double a = std::sin(phi) * std::sin(sun.declination);
        const double b = std::cos(phi) * std::cos(sun.declination);
        float* row = out + i * W;
        for (size_t j = 0; j < W; ++j) row[j] = static_cast<float>(scale * std::max(0.0, a + b * cos_hour[j]));
      }
      return;
    }
  }
}

// ---- static fields ----

double wrap360(double v) {
  double w = std::fmod(v, 360.0);
  if (w < 0) w += 360.0;
  return w;
}

// Distance on the circle, in degrees.
double lon_distance(double a, double b) {
  const double d = std::abs(wrap360(a) - wrap360(b));
  return std::min(d, 360.0 - d);
}

constexpr double kCoordinateTolerance = 1e-4;  // degrees

// Source index per target latitude for regrid = "none": the same values, possibly reversed.
std::vector<size_t> match_latitudes(const std::vector<double>& source, const std::vector<double>& target,
                                    const std::string& where) {
  const std::string hint = "; use regrid = \"nearest\" to regrid it onto the grid";
  if (source.size() != target.size()) {
    throw DataError(where + " has " + std::to_string(source.size()) + " latitudes (" + number_text(source.front()) +
                    " .. " + number_text(source.back()) + ") but the grid has " + std::to_string(target.size()) + " (" +
                    (target.empty() ? std::string("none") : number_text(target.front()) + " .. " + number_text(target.back())) +
                    ")" + hint);
  }
  const size_t n = source.size();
  // Flip when the file runs the other way (north-to-south against south-to-north).
  const bool flip = n > 1 && ((source.back() - source.front()) * (target.back() - target.front()) < 0);
  std::vector<size_t> index(n);
  for (size_t i = 0; i < n; ++i) {
    index[i] = flip ? n - 1 - i : i;
    if (std::abs(source[index[i]] - target[i]) > kCoordinateTolerance) {
      throw DataError(where + " does not match the grid in latitude: grid latitude " + std::to_string(i) + " is " +
                      number_text(target[i]) + " but the file's" + (flip ? " (flipped)" : "") + " is " +
                      number_text(source[index[i]]) + hint);
    }
  }
  return index;
}

// Source index per target longitude for regrid = "none": the same points on the circle, rolled.
std::vector<size_t> match_longitudes(const std::vector<double>& source, const std::vector<double>& target,
                                     const std::string& where) {
  const std::string hint = "; use regrid = \"nearest\" to regrid it onto the grid";
  if (source.size() != target.size()) {
    throw DataError(where + " has " + std::to_string(source.size()) + " longitudes (" + number_text(source.front()) +
                    " .. " + number_text(source.back()) + ") but the grid has " + std::to_string(target.size()) + " (" +
                    (target.empty() ? std::string("none") : number_text(target.front()) + " .. " + number_text(target.back())) +
                    ")" + hint);
  }
  const size_t n = source.size();
  // The roll is fixed by where the grid's first longitude sits in the file.
  std::optional<size_t> first_mismatch_shift;
  for (size_t k = 0; k < n; ++k) {
    if (lon_distance(source[k], target[0]) > kCoordinateTolerance) continue;
    bool all = true;
    for (size_t j = 0; j < n && all; ++j) all = lon_distance(source[(j + k) % n], target[j]) <= kCoordinateTolerance;
    if (all) {
      std::vector<size_t> index(n);
      for (size_t j = 0; j < n; ++j) index[j] = (j + k) % n;
      return index;
    }
    if (!first_mismatch_shift) first_mismatch_shift = k;
  }
  if (!first_mismatch_shift) {
    throw DataError(where + " does not match the grid in longitude: grid longitude 0 is " + number_text(target[0]) +
                    ", which is not among the file's longitudes (" + number_text(source.front()) + " .. " +
                    number_text(source.back()) + ", even allowing for -180..180 against 0..360)" + hint);
  }
  const size_t k = *first_mismatch_shift;
  for (size_t j = 0; j < n; ++j) {
    const double s = source[(j + k) % n];
    if (lon_distance(s, target[j]) > kCoordinateTolerance) {
      throw DataError(where + " does not match the grid in longitude: grid longitude " + std::to_string(j) + " is " +
                      number_text(target[j]) + " but the file's (rolled onto the grid mod 360) is " + number_text(s) + hint);
    }
  }
  throw DataError(where + " does not match the grid in longitude" + hint);  // not reached
}

// Source index per target latitude for regrid = "nearest".
std::vector<size_t> nearest_latitudes(const std::vector<double>& source, const std::vector<double>& target,
                                      const std::string& where) {
  std::vector<size_t> order(source.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return source[a] < source[b]; });
  std::vector<double> sorted(order.size());
  for (size_t k = 0; k < order.size(); ++k) sorted[k] = source[order[k]];
  const size_t n = sorted.size();
  // How far past its edges the file may be extended: one source spacing there.
  const double below = n > 1 ? sorted[1] - sorted[0] : 0.0;
  const double above = n > 1 ? sorted[n - 1] - sorted[n - 2] : 0.0;
  std::vector<size_t> index(target.size());
  for (size_t i = 0; i < target.size(); ++i) {
    const double t = target[i];
    if (t < sorted.front() - below - kCoordinateTolerance || t > sorted.back() + above + kCoordinateTolerance) {
      throw DataError(where + " covers latitudes " + number_text(sorted.front()) + " .. " + number_text(sorted.back()) +
                      " but grid latitude " + std::to_string(i) + " is " + number_text(t) +
                      ", more than one source spacing outside them; regrid = \"nearest\" does not extrapolate that far");
    }
    const size_t hi = static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), t) - sorted.begin());
    size_t k = hi;
    if (hi == n) k = n - 1;
    else if (hi > 0 && t - sorted[hi - 1] <= sorted[hi] - t) k = hi - 1;  // ties to the lower latitude
    index[i] = order[k];
  }
  return index;
}

// Source index per target longitude for regrid = "nearest", distances on the circle.
std::vector<size_t> nearest_longitudes(const std::vector<double>& source, const std::vector<double>& target,
                                       const std::string& where) {
  const size_t n = source.size();
  std::vector<double> wrapped(n);
  for (size_t k = 0; k < n; ++k) wrapped[k] = wrap360(source[k]);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return wrapped[a] < wrapped[b]; });
  std::vector<double> sorted(n);
  for (size_t k = 0; k < n; ++k) sorted[k] = wrapped[order[k]];
  // The source's spacing: its largest gap on the circle once the largest one is set aside (that one
  // is the uncovered arc of a regional grid; a global grid's gaps are all alike).
  std::vector<double> gaps;
  for (size_t k = 0; k < n; ++k) gaps.push_back(k + 1 < n ? sorted[k + 1] - sorted[k] : sorted[0] + 360.0 - sorted[k]);
  std::sort(gaps.begin(), gaps.end());
  const double spacing = n > 1 ? gaps[n - 2] : 0.0;
  std::vector<size_t> index(target.size());
  for (size_t j = 0; j < target.size(); ++j) {
    const double t = wrap360(target[j]);
    const size_t hi = static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), t) - sorted.begin());
    // The neighbours on the circle: the one below (wrapping to the last) and the one at or above
    // (wrapping to the first).
    const size_t up = hi % n, down = (hi + n - 1) % n;
    const double d_up = lon_distance(sorted[up], t), d_down = lon_distance(sorted[down], t);
    const size_t k = d_down <= d_up ? down : up;  // ties to the lower (western) longitude
    if (std::min(d_up, d_down) > spacing + kCoordinateTolerance) {
      throw DataError(where + " covers longitudes " + number_text(source.front()) + " .. " + number_text(source.back()) +
                      " but grid longitude " + std::to_string(j) + " is " + number_text(target[j]) + ", " +
                      number_text(std::min(d_up, d_down)) + " degrees from the nearest (more than the file's spacing of " +
                      number_text(spacing) + "); regrid = \"nearest\" does not extrapolate that far");
    }
    index[j] = order[k];
  }
  return index;
}

}  // namespace


bool is_computed_forcing(const std::string& name) {
  const auto& names = computed_forcing_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool forcing_needs_time(const std::string& name) {
  switch (parse_forcing(name)) {
    case Forcing::kCosLatitude:
    case Forcing::kSinLatitude:
    case Forcing::kCosLongitude:
    case Forcing::kSinLongitude: return false;
    default: return true;
  }
}

std::string forcing_units(const std::string& name) {
  return parse_forcing(name) == Forcing::kInsolation ? "W m-2" : "1";
}

torch::Tensor compute_forcing(const std::string& name, const std::vector<double>& lat_deg,
                              const std::vector<double>& lon_deg, int64_t seconds, Calendar calendar) {
  return compute_forcings({name}, lat_deg, lon_deg, seconds, calendar)[0];
}

torch::Tensor compute_forcings(const std::vector<std::string>& names, const std::vector<double>& lat_deg,
                               const std::vector<double>& lon_deg, int64_t seconds, Calendar calendar) {
  std::vector<Forcing> forcings;
  bool timed = false;
  for (const auto& name : names) {
    forcings.push_back(parse_forcing(name));
    timed = timed || forcing_needs_time(name);
  }
  check_grid(lat_deg, lon_deg);
  const int64_t H = static_cast<int64_t>(lat_deg.size()), W = static_cast<int64_t>(lon_deg.size());
  torch::Tensor out = torch::empty({static_cast<int64_t>(names.size()), H, W}, torch::kFloat32);
  const SolarTime solar = timed ? solar_time(seconds, calendar) : SolarTime{};
  float* data = out.data_ptr<float>();
  for (size_t f = 0; f < forcings.size(); ++f) fill_forcing(forcings[f], lat_deg, lon_deg, solar, data + f * H * W);
  return out;
}

torch::Tensor compute_cell_forcings(const std::vector<std::string>& names, const std::vector<double>& lat_deg,
                                    const std::vector<double>& lon_deg, int64_t seconds, Calendar calendar) {
  if (lat_deg.size() != lon_deg.size())
    throw DataError("forcings on a point set need one latitude and longitude per cell, got " +
                    std::to_string(lat_deg.size()) + " latitudes and " + std::to_string(lon_deg.size()) + " longitudes");
  std::vector<Forcing> forcings;
  bool timed = false;
  for (const auto& name : names) {
    forcings.push_back(parse_forcing(name));
    timed = timed || forcing_needs_time(name);
  }
  check_grid(lat_deg, lon_deg);
  const int64_t N = static_cast<int64_t>(lat_deg.size());
  torch::Tensor out = torch::empty({static_cast<int64_t>(names.size()), 1, N}, torch::kFloat32);
  const SolarTime solar = timed ? solar_time(seconds, calendar) : SolarTime{};
  float* data = out.data_ptr<float>();
  // Each cell a 1 x 1 grid of its own: the rectangle's formulas, cell by cell.
  std::vector<double> lat(1), lon(1);
  for (size_t f = 0; f < forcings.size(); ++f) {
    for (int64_t c = 0; c < N; ++c) {
      lat[0] = lat_deg[static_cast<size_t>(c)];
      lon[0] = lon_deg[static_cast<size_t>(c)];
      fill_forcing(forcings[f], lat, lon, solar, data + f * N + c);
    }
  }
  return out;
}

torch::Tensor read_static_field(const std::string& file, const std::string& variable, const std::string& regrid,
                                const std::vector<double>& lat_deg, const std::vector<double>& lon_deg) {
  const std::string where = "static field '" + variable + "' in " + file;
  if (regrid != "none" && regrid != "nearest") {
    throw DataError(where + ": unknown regrid \"" + regrid + "\"; expected \"none\" or \"nearest\"");
  }
  std::unique_ptr<Reader> reader;
  try {
    reader = open_reader(file);
  } catch (const DataError& error) {
    throw DataError("static field '" + variable + "': " + error.what());
  }
  const VariableMeta* found = nullptr;
  try {
    found = &reader->variable(variable);  // names the file and lists its variables when missing
  } catch (const DataError& error) {
    throw DataError("static field: " + std::string(error.what()));
  }
  const VariableMeta& meta = *found;
  const std::vector<Dimension>& dims = meta.dims;
  const std::string expected = "; a static field must be (lat, lon), or (time, lat, lon) with a single time";
  if (dims.size() != 2 && dims.size() != 3) {
    throw DataError(where + " has dimensions " + dims_text(dims) + expected);
  }
  if (dims.size() == 3 && dims[0].length != 1) {
    throw DataError(where + " has " + std::to_string(dims[0].length) + " entries in its leading dimension '" +
                    dims[0].name + "' " + dims_text(dims) + expected + "; select one out of the file first");
  }
  const size_t first = dims.size() - 2;  // the two grid dimensions are the last two
  size_t lat_dim = first, lon_dim = first + 1;
  if (is_lon_dimension(*reader, dims[first], &meta) && is_lat_dimension(*reader, dims[first + 1], &meta))
    std::swap(lat_dim, lon_dim);
  else if (is_lat_dimension(*reader, dims[first + 1], &meta) || is_lon_dimension(*reader, dims[first], &meta)) {
    throw DataError(where + " has dimensions " + dims_text(dims) + " whose last two are not latitude and longitude" + expected);
  }
  auto coordinate = [&](const Dimension& dim, GridAxis axis) {
    if (auto name = grid_coordinate(*reader, &meta, dim, axis)) return reader->read_doubles(*name);
    throw DataError(where + " " + dims_text(dims) + " has no " +
                    (axis == GridAxis::kLatitude ? "latitudes" : "longitudes") + " (" +
                    missing_grid_coordinate(*reader, &meta, dim, axis) +
                    "); a static field is placed on the grid by its coordinate values");
  };
  const std::vector<double> src_lat = coordinate(dims[lat_dim], GridAxis::kLatitude);
  const std::vector<double> src_lon = coordinate(dims[lon_dim], GridAxis::kLongitude);
  if (src_lat.empty() || src_lon.empty()) throw DataError(where + " is empty " + dims_text(dims));

  std::vector<size_t> lat_index, lon_index;
  if (regrid == "none") {
    lat_index = match_latitudes(src_lat, lat_deg, where);
    lon_index = match_longitudes(src_lon, lon_deg, where);
  } else {
    lat_index = nearest_latitudes(src_lat, lat_deg, where);
    lon_index = nearest_longitudes(src_lon, lon_deg, where);
  }

  const size_t H = src_lat.size(), W = src_lon.size();
  std::vector<float> values(H * W);
  reader->read(variable, std::vector<size_t>(dims.size(), 0), [&] {
    std::vector<size_t> count(dims.size(), 1);
    count[lat_dim] = H;
    count[lon_dim] = W;
    return count;
  }(), values.data());
  // Strides of the stored (possibly (lon, lat)) layout.
  const size_t lat_stride = lat_dim < lon_dim ? W : 1, lon_stride = lat_dim < lon_dim ? 1 : H;

  // CF decoding as in Dataset: fill values compared as stored, then scale and offset.
  std::vector<float> fills;
  for (const char* attribute : {"_FillValue", "missing_value"}) {
    auto it = meta.attributes.find(attribute);
    if (it == meta.attributes.end()) continue;
    for (double value : it->second.numbers) {
      if (!std::isnan(value)) fills.push_back(static_cast<float>(value));
    }
  }
  const double scale = meta.number("scale_factor").value_or(1.0);
  const double offset = meta.number("add_offset").value_or(0.0);
  const float nan = std::numeric_limits<float>::quiet_NaN();

  torch::Tensor out = torch::empty({static_cast<int64_t>(lat_deg.size()), static_cast<int64_t>(lon_deg.size())},
                                   torch::kFloat32);
  float* data = out.data_ptr<float>();
  for (size_t i = 0; i < lat_deg.size(); ++i) {
    for (size_t j = 0; j < lon_deg.size(); ++j) {
      float value = values[lat_index[i] * lat_stride + lon_index[j] * lon_stride];
      if (std::find(fills.begin(), fills.end(), value) != fills.end()) value = nan;
      data[i * lon_deg.size() + j] = static_cast<float>(value * scale + offset);
    }
  }
  return out;
}

}  // namespace wxtrain::data
