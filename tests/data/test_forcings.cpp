// Computed forcings against values a user can check from an almanac (equinox noon, polar night,
// solstice at the pole, the equator's daily mean), and static fields read onto a grid: by value
// (flipped and rolled), by nearest point, and the real NCAR 1-degree land-sea mask onto the storm
// grid.
#include <gtest/gtest.h>
#include <netcdf.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "data/forcings.h"
#include "data/readers/netcdf_file.h"
#include "storm_fixture.h"

using namespace wxtrain;
using namespace wxtrain::data;
using namespace wxtrain::data::testing;

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kS0 = 1361.0;  // W m-2, IAU 2015 nominal total solar irradiance

template <typename F>
std::string data_error(F call) {
  try {
    call();
  } catch (const DataError& error) {
    return error.what();
  }
  return "";
}

int64_t time_at(const std::string& date, Calendar calendar = Calendar::kStandard) {
  return to_seconds(parse_date(date, calendar), calendar);
}

double insolation(double lat, double lon, int64_t seconds) {
  return compute_forcing("insolation", {lat}, {lon}, seconds, Calendar::kStandard)[0][0].item<double>();
}

std::vector<double> storm_lat() {
  std::vector<double> lat;
  for (int i = 0; i < 33; ++i) lat.push_back(20.0 + 1.25 * i);
  return lat;
}

std::vector<double> storm_lon() {
  std::vector<double> lon;
  for (int j = 0; j < 36; ++j) lon.push_back(-140.0 + 2.5 * j);
  return lon;
}

}  // namespace

TEST(Forcings, NamesUnitsAndTimeDependence) {
  EXPECT_EQ(computed_forcing_names(),
            (std::vector<std::string>{"cos_latitude", "sin_latitude", "cos_longitude", "sin_longitude", "cos_local_time",
                                      "sin_local_time", "cos_day_of_year", "sin_day_of_year", "insolation"}));
  EXPECT_TRUE(is_computed_forcing("insolation"));
  EXPECT_FALSE(is_computed_forcing("toa_incident_solar_radiation"));
  EXPECT_FALSE(forcing_needs_time("cos_latitude"));
  EXPECT_FALSE(forcing_needs_time("sin_longitude"));
  EXPECT_TRUE(forcing_needs_time("cos_local_time"));
  EXPECT_TRUE(forcing_needs_time("insolation"));
  EXPECT_EQ(forcing_units("sin_day_of_year"), "1");
  EXPECT_EQ(forcing_units("insolation"), "W m-2");
}

TEST(ForcingErrors, UnknownNameListsTheAcceptedOnes) {
  const std::string message =
      data_error([] { compute_forcing("solar_radiation", {0.0}, {0.0}, 0, Calendar::kStandard); });
  EXPECT_NE(message.find("solar_radiation"), std::string::npos) << message;
  for (const auto& name : computed_forcing_names()) EXPECT_NE(message.find(name), std::string::npos) << message;
  EXPECT_NE(data_error([] { forcing_units("tisr"); }).find("insolation"), std::string::npos);
  EXPECT_NE(data_error([] { compute_forcings({"cos_latitude", "tisr"}, {0.0}, {0.0}, 0, Calendar::kStandard); })
                .find("'tisr'"),
            std::string::npos);
}

// A Dataset without coordinate variables reports indices as latitudes: refused, not computed.
TEST(ForcingErrors, LatitudeOutsideMinus90To90IsRefused) {
  const std::string message =
      data_error([] { compute_forcing("cos_latitude", {0.0, 1.0, 120.0}, {0.0}, 0, Calendar::kStandard); });
  EXPECT_NE(message.find("latitude 2 is 120"), std::string::npos) << message;
}

TEST(Forcings, CoordinateForcingsAreCosAndSinOfTheCoordinates) {
  const std::vector<double> lat = {-60.0, 0.0, 30.0, 90.0};
  const std::vector<double> lon = {-90.0, 0.0, 45.0, 270.0, 359.0};
  const torch::Tensor f =
      compute_forcings({"cos_latitude", "sin_latitude", "cos_longitude", "sin_longitude"}, lat, lon, 0, Calendar::kStandard);
  ASSERT_EQ(f.sizes(), (std::vector<int64_t>{4, 4, 5}));
  EXPECT_EQ(f.dtype(), torch::kFloat32);
  for (size_t i = 0; i < lat.size(); ++i) {
    for (size_t j = 0; j < lon.size(); ++j) {
      const double phi = lat[i] * kPi / 180, lambda = lon[j] * kPi / 180;
      EXPECT_NEAR(f[0][i][j].item<double>(), std::cos(phi), 1e-6);
      EXPECT_NEAR(f[1][i][j].item<double>(), std::sin(phi), 1e-6);
      EXPECT_NEAR(f[2][i][j].item<double>(), std::cos(lambda), 1e-6);
      EXPECT_NEAR(f[3][i][j].item<double>(), std::sin(lambda), 1e-6);
    }
  }
  // -90 and 270 are the same meridian.
  EXPECT_NEAR(f[3][1][0].item<double>(), -1.0, 1e-6);
  EXPECT_NEAR(f[3][1][3].item<double>(), -1.0, 1e-6);
}

TEST(Forcings, LocalTimeAtUtcNoon) {
  // At 12:00 UTC it is noon at Greenwich (angle pi) and 18:00 at 90E (angle 3*pi/2); 90E written as
  // -270 is the same meridian.
  const torch::Tensor f = compute_forcings({"cos_local_time", "sin_local_time"}, {0.0, 45.0}, {0.0, 90.0, -270.0},
                                           time_at("2024-03-20T12:00"), Calendar::kStandard);
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR(f[0][i][0].item<double>(), -1.0, 1e-6);
    EXPECT_NEAR(f[1][i][0].item<double>(), 0.0, 1e-6);
    for (int j : {1, 2}) {
      EXPECT_NEAR(f[0][i][j].item<double>(), 0.0, 1e-6);
      EXPECT_NEAR(f[1][i][j].item<double>(), -1.0, 1e-6);
    }
  }
  // Local midnight at Greenwich: angle 0.
  const torch::Tensor midnight = compute_forcings({"cos_local_time", "sin_local_time"}, {0.0}, {0.0},
                                                  time_at("1969-07-21T00:00"), Calendar::kStandard);
  EXPECT_NEAR(midnight[0][0][0].item<double>(), 1.0, 1e-6);
  EXPECT_NEAR(midnight[1][0][0].item<double>(), 0.0, 1e-6);
}

TEST(Forcings, DayOfYearInSeveralCalendars) {
  auto day_of_year = [](int64_t seconds, Calendar calendar) {
    const torch::Tensor f = compute_forcings({"cos_day_of_year", "sin_day_of_year"}, {10.0}, {20.0}, seconds, calendar);
    return std::make_pair(f[0][0][0].item<double>(), f[1][0][0].item<double>());
  };
  auto [c0, s0] = day_of_year(time_at("2023-01-01T00:00"), Calendar::kStandard);
  EXPECT_NEAR(c0, 1.0, 1e-6);
  EXPECT_NEAR(s0, 0.0, 1e-6);
  // 360_day: April 1 starts day 91, 90 of 360 days gone: a quarter turn.
  auto [c1, s1] = day_of_year(time_at("2001-04-01T00:00", Calendar::k360Day), Calendar::k360Day);
  EXPECT_NEAR(c1, 0.0, 1e-6);
  EXPECT_NEAR(s1, 1.0, 1e-6);
  // noleap: July 2 12:00 is 182.5 of 365 days, half a turn.
  auto [c2, s2] = day_of_year(time_at("2001-07-02T12:00", Calendar::kNoLeap), Calendar::kNoLeap);
  EXPECT_NEAR(c2, -1.0, 1e-6);
  EXPECT_NEAR(s2, 0.0, 1e-6);
  // A leap year in the standard calendar has 366 days: July 2 00:00 2024 is 183 of 366 days gone.
  auto [c3, s3] = day_of_year(time_at("2024-07-02T00:00"), Calendar::kStandard);
  EXPECT_NEAR(c3, -1.0, 1e-6);
  EXPECT_NEAR(s3, 0.0, 1e-6);
}

// 2024-03-20, a few hours after the equinox (03:06 UTC): at the equator where true solar time is
// noon the Sun is overhead, so insolation is S0 * (r0/r)^2 with the Earth 0.9958 AU from the Sun.
// The equation of time is about -7.5 min that day, so solar noon at 12:00 UTC is at 1.875E.
TEST(Forcings, InsolationAtEquinoxNoonIsTheSolarConstantAtThatDistance) {
  const double expected = kS0 / (0.9958 * 0.9958);  // ~1372 W m-2
  const double value = insolation(0.0, 1.875, time_at("2024-03-20T12:00"));
  EXPECT_NEAR(value, expected, 0.005 * expected);
  // Longitude convention does not matter.
  EXPECT_FLOAT_EQ(insolation(0.0, 361.875, time_at("2024-03-20T12:00")), static_cast<float>(value));
}

// The equation of time peaks at about +16.4 min on November 3 (the sundial is ahead of the clock):
// at 12:00 UTC the Sun culminates 16.4 min / 4 min per degree = 4.1 degrees west of Greenwich.
TEST(Forcings, SolarNoonFollowsTheEquationOfTime) {
  std::vector<double> lon;
  for (int k = -100; k <= 100; ++k) lon.push_back(0.1 * k);
  const torch::Tensor f = compute_forcing("insolation", {0.0}, lon, time_at("2023-11-03T12:00"), Calendar::kStandard);
  const int64_t best = f[0].argmax().item<int64_t>();
  EXPECT_NEAR(lon[static_cast<size_t>(best)], -4.1, 0.3);
}

TEST(Forcings, PolarNightAndPolarDayAtTheDecemberSolstice) {
  const int64_t day = time_at("2023-12-21T00:00");
  for (int hour = 0; hour < 24; ++hour) {
    const torch::Tensor f =
        compute_forcing("insolation", {80.0, -85.0}, {-120.0, 0.0, 45.0, 179.0}, day + hour * 3600, Calendar::kStandard);
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(f[0][j].item<float>(), 0.0f) << "80N at hour " << hour;
      EXPECT_GT(f[1][j].item<float>(), 100.0f) << "85S at hour " << hour;
    }
  }
}

// At the North Pole on the June solstice the Sun circles at the declination's height all day:
// S0 * sin(23.44 deg) at 1.0163 AU.
TEST(Forcings, NorthPoleAtTheJuneSolstice) {
  const double expected = kS0 * std::sin(23.44 * kPi / 180) / (1.0163 * 1.0163);  // ~524 W m-2
  for (int hour : {0, 5, 12, 19}) {
    const int64_t t = time_at("2023-06-21T00:00") + hour * 3600;
    EXPECT_NEAR(insolation(90.0, 0.0, t), expected, 0.01 * expected) << "hour " << hour;
    EXPECT_NEAR(insolation(90.0, -135.0, t), expected, 0.01 * expected) << "hour " << hour;
  }
}

TEST(Forcings, NothingAtLocalMidnight) {
  // 12:00 UTC is about midnight on the date line; at 40N in June too (the Sun is 50-23 deg below).
  const int64_t t = time_at("2024-03-20T12:00");
  EXPECT_EQ(insolation(0.0, 180.0, t), 0.0);
  EXPECT_EQ(insolation(0.0, -180.0, t), 0.0);
  EXPECT_EQ(insolation(40.0, -178.0, time_at("2024-06-20T12:00")), 0.0);
}

// Averaged over a day, the equator at equinox gets S0 * (r0/r)^2 / pi.
TEST(Forcings, DailyMeanAtTheEquatorAtEquinox) {
  const int64_t day = time_at("2024-03-20T00:00");
  double sum = 0;
  const int steps = 288;  // every 5 minutes
  for (int k = 0; k < steps; ++k) sum += insolation(0.0, 0.0, day + k * 300);
  const double expected = kS0 / (0.9958 * 0.9958) / kPi;  // ~437 W m-2
  EXPECT_NEAR(sum / steps, expected, 0.01 * expected);
}

// One rollout step on a 0.25-degree global grid: the outer-product form keeps it in milliseconds.
TEST(Forcings, AllForcingsOnAQuarterDegreeGrid) {
  std::vector<double> lat(721), lon(1440);
  for (size_t i = 0; i < lat.size(); ++i) lat[i] = -90.0 + 0.25 * static_cast<double>(i);
  for (size_t j = 0; j < lon.size(); ++j) lon[j] = 0.25 * static_cast<double>(j);
  const auto start = std::chrono::steady_clock::now();
  const torch::Tensor f = compute_forcings(computed_forcing_names(), lat, lon, time_at("2024-03-20T12:00"), Calendar::kStandard);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(f.sizes(), (std::vector<int64_t>{9, 721, 1440}));
  EXPECT_FALSE(f.isnan().any().item<bool>());
  EXPECT_LT(seconds, 2.0);  // generous for a loaded CI machine; ~0.05 s on one core
  // The sunlit half of the globe: insolation is positive on about half the points.
  const double lit = (f[8] > 0).to(torch::kFloat64).mean().item<double>();
  EXPECT_NEAR(lit, 0.5, 0.01);
}

// ---- static fields ----

namespace {

// mask(lat, lon) on lat 30, 20, 10 (north to south) and lon -180, -90, 0, 90, stored as
// 10 * row + column with scale_factor 0.5 and add_offset 100; the point (20N, 0E) is _FillValue.
void write_mask(const std::string& path, size_t times = 0,
                const std::vector<double>& lons = {-180.0, -90.0, 0.0, 90.0}) {
  NetcdfFile file = NetcdfFile::create(path);
  if (times) file.define_dimension("time", times);
  file.define_dimension("lat", 3);
  file.define_dimension("lon", 4);
  file.define_variable("lat", NC_DOUBLE, {"lat"});
  file.define_variable("lon", NC_DOUBLE, {"lon"});
  if (times) {
    file.define_variable("mask", NC_FLOAT, {"time", "lat", "lon"});
  } else {
    file.define_variable("mask", NC_FLOAT, {"lat", "lon"});
  }
  file.put_text_attribute("lat", "units", "degrees_north");
  file.put_text_attribute("lon", "units", "degrees_east");
  file.put_float_attribute("mask", "_FillValue", -999.0f);
  file.put_float_attribute("mask", "scale_factor", 0.5f);
  file.put_float_attribute("mask", "add_offset", 100.0f);
  file.end_define();
  file.write_doubles("lat", {30.0, 20.0, 10.0});
  file.write_doubles("lon", lons);
  std::vector<float> values;
  for (size_t t = 0; t < std::max<size_t>(times, 1); ++t) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 4; ++j) values.push_back(i == 1 && j == 2 ? -999.0f : static_cast<float>(10 * i + j));
    }
  }
  if (times) {
    file.write_floats("mask", {0, 0, 0}, {times, 3, 4}, values.data());
  } else {
    file.write_floats("mask", {0, 0}, {3, 4}, values.data());
  }
  file.close();
}

// Decoded: stored * 0.5 + 100.
float decoded(int row, int column) { return static_cast<float>((10 * row + column) * 0.5 + 100.0); }

void expect_same(const torch::Tensor& actual, const std::vector<std::vector<float>>& expected) {
  ASSERT_EQ(actual.dim(), 2);
  ASSERT_EQ(actual.size(0), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(actual.size(1), static_cast<int64_t>(expected[i].size()));
    for (size_t j = 0; j < expected[i].size(); ++j) {
      const float value = actual[i][j].item<float>();
      if (std::isnan(expected[i][j])) {
        EXPECT_TRUE(std::isnan(value)) << i << ", " << j << ": " << value;
      } else {
        EXPECT_FLOAT_EQ(value, expected[i][j]) << i << ", " << j;
      }
    }
  }
}

}  // namespace

TEST(StaticField, FlippedAndRolledOntoTheGridByValue) {
  TempDir dir;
  write_mask(dir.file("mask.nc"));
  // South to north, 0..360: target (i, j) is the file's row 2 - i and column (j + 2) mod 4.
  const torch::Tensor field =
      read_static_field(dir.file("mask.nc"), "mask", "none", {10.0, 20.0, 30.0}, {0.0, 90.0, 180.0, 270.0});
  EXPECT_EQ(field.dtype(), torch::kFloat32);
  const float nan = std::nanf("");
  expect_same(field, {{decoded(2, 2), decoded(2, 3), decoded(2, 0), decoded(2, 1)},
                      {nan, decoded(1, 3), decoded(1, 0), decoded(1, 1)},
                      {decoded(0, 2), decoded(0, 3), decoded(0, 0), decoded(0, 1)}});
  // The file's own grid gives the file's own order.
  expect_same(read_static_field(dir.file("mask.nc"), "mask", "none", {30.0, 20.0, 10.0}, {-180.0, -90.0, 0.0, 90.0}),
              {{decoded(0, 0), decoded(0, 1), decoded(0, 2), decoded(0, 3)},
               {decoded(1, 0), decoded(1, 1), nan, decoded(1, 3)},
               {decoded(2, 0), decoded(2, 1), decoded(2, 2), decoded(2, 3)}});
}

TEST(StaticField, NearestOntoACoarserOffsetGrid) {
  TempDir dir;
  write_mask(dir.file("mask.nc"));
  // 12N -> 10N (row 2), 29N -> 30N (row 0); 190E -> -180 (column 0, 10 degrees away across the
  // date line), 100E -> 90E (column 3), 350E -> 0E (column 2).
  expect_same(read_static_field(dir.file("mask.nc"), "mask", "nearest", {12.0, 29.0}, {190.0, 100.0, 350.0}),
              {{decoded(2, 0), decoded(2, 3), decoded(2, 2)}, {decoded(0, 0), decoded(0, 3), decoded(0, 2)}});
  // Up to one source spacing (10 degrees) past the file's edge is the edge row; farther is refused.
  expect_same(read_static_field(dir.file("mask.nc"), "mask", "nearest", {39.0}, {0.0}), {{decoded(0, 2)}});
  const std::string message =
      data_error([&] { read_static_field(dir.file("mask.nc"), "mask", "nearest", {-5.0, 10.0}, {0.0}); });
  EXPECT_NE(message.find(dir.file("mask.nc")), std::string::npos) << message;
  EXPECT_NE(message.find("'mask'"), std::string::npos) << message;
  EXPECT_NE(message.find("grid latitude 0 is -5"), std::string::npos) << message;
}

// Stored as (lon, lat), as some Fortran-written files are: read the same as (lat, lon).
TEST(StaticField, LongitudeFirstLayoutIsTransposed) {
  TempDir dir;
  const std::string path = dir.file("transposed.nc");
  {
    NetcdfFile file = NetcdfFile::create(path);
    file.define_dimension("longitude", 2);
    file.define_dimension("latitude", 3);
    file.define_variable("latitude", NC_DOUBLE, {"latitude"});
    file.define_variable("longitude", NC_DOUBLE, {"longitude"});
    file.define_variable("orography", NC_FLOAT, {"longitude", "latitude"});
    file.end_define();
    file.write_doubles("latitude", {-10.0, 0.0, 10.0});
    file.write_doubles("longitude", {0.0, 180.0});
    const std::vector<float> values = {1, 2, 3, 4, 5, 6};  // (lon 0: lat -10, 0, 10), (lon 180: ...)
    file.write_floats("orography", {0, 0}, {2, 3}, values.data());
    file.close();
  }
  expect_same(read_static_field(path, "orography", "none", {10.0, 0.0, -10.0}, {-180.0, 0.0}),
              {{6, 3}, {5, 2}, {4, 1}});
}

TEST(StaticField, SingletonTimeDimensionIsAccepted) {
  TempDir dir;
  write_mask(dir.file("mask1.nc"), 1);
  expect_same(read_static_field(dir.file("mask1.nc"), "mask", "none", {10.0, 20.0, 30.0}, {0.0, 90.0, 180.0, 270.0}),
              {{decoded(2, 2), decoded(2, 3), decoded(2, 0), decoded(2, 1)},
               {std::nanf(""), decoded(1, 3), decoded(1, 0), decoded(1, 1)},
               {decoded(0, 2), decoded(0, 3), decoded(0, 0), decoded(0, 1)}});
}

TEST(StaticFieldErrors, MismatchedGridWithoutRegridSuggestsNearest) {
  TempDir dir;
  write_mask(dir.file("mask.nc"));
  const std::string lat_message = data_error(
      [&] { read_static_field(dir.file("mask.nc"), "mask", "none", {10.0, 20.0, 31.0}, {0.0, 90.0, 180.0, 270.0}); });
  EXPECT_NE(lat_message.find(dir.file("mask.nc")), std::string::npos) << lat_message;
  EXPECT_NE(lat_message.find("'mask'"), std::string::npos) << lat_message;
  EXPECT_NE(lat_message.find("latitude 2 is 31"), std::string::npos) << lat_message;
  EXPECT_NE(lat_message.find("regrid = \"nearest\""), std::string::npos) << lat_message;
  const std::string lon_message = data_error(
      [&] { read_static_field(dir.file("mask.nc"), "mask", "none", {10.0, 20.0, 30.0}, {0.0, 90.0, 185.0, 270.0}); });
  EXPECT_NE(lon_message.find("longitude 2 is 185"), std::string::npos) << lon_message;
  EXPECT_NE(lon_message.find("regrid = \"nearest\""), std::string::npos) << lon_message;
  const std::string size_message =
      data_error([&] { read_static_field(dir.file("mask.nc"), "mask", "none", storm_lat(), storm_lon()); });
  EXPECT_NE(size_message.find("has 3 latitudes"), std::string::npos) << size_message;
  EXPECT_NE(size_message.find("regrid = \"nearest\""), std::string::npos) << size_message;
}

TEST(StaticFieldErrors, TimeVaryingVariableIsRefused) {
  TempDir dir;
  write_mask(dir.file("mask3.nc"), 3);
  const std::string message =
      data_error([&] { read_static_field(dir.file("mask3.nc"), "mask", "none", {10.0}, {0.0}); });
  EXPECT_NE(message.find("'mask'"), std::string::npos) << message;
  EXPECT_NE(message.find(dir.file("mask3.nc")), std::string::npos) << message;
  EXPECT_NE(message.find("time=3"), std::string::npos) << message;
}

TEST(StaticFieldErrors, MissingFileVariableAndUnknownRegrid) {
  TempDir dir;
  write_mask(dir.file("mask.nc"));
  const std::string file_message =
      data_error([&] { read_static_field(dir.file("absent.nc"), "mask", "none", {10.0}, {0.0}); });
  EXPECT_NE(file_message.find(dir.file("absent.nc")), std::string::npos) << file_message;
  EXPECT_NE(file_message.find("not found"), std::string::npos) << file_message;
  const std::string variable_message =
      data_error([&] { read_static_field(dir.file("mask.nc"), "lsm", "none", {10.0}, {0.0}); });
  EXPECT_NE(variable_message.find("'lsm'"), std::string::npos) << variable_message;
  EXPECT_NE(variable_message.find("the file has: lat, lon, mask"), std::string::npos) << variable_message;
  EXPECT_NE(variable_message.find(dir.file("mask.nc")), std::string::npos) << variable_message;
  // A coordinate is not a 2-D field.
  const std::string dims_message = data_error([&] { read_static_field(dir.file("mask.nc"), "lat", "none", {10.0}, {0.0}); });
  EXPECT_NE(dims_message.find("has dimensions (lat=3)"), std::string::npos) << dims_message;
  const std::string regrid_message =
      data_error([&] { read_static_field(dir.file("mask.nc"), "mask", "bilinear", {10.0}, {0.0}); });
  EXPECT_NE(regrid_message.find("bilinear"), std::string::npos) << regrid_message;
  EXPECT_NE(regrid_message.find("\"none\""), std::string::npos) << regrid_message;
  EXPECT_NE(regrid_message.find("\"nearest\""), std::string::npos) << regrid_message;
}

// NCAR's 1-degree mask (0 ocean, 1 land) onto the storm grid: the Gulf of Mexico is sea, Kansas land.
TEST(StaticField, NcarLandSeaMaskOntoTheStormGrid) {
  const std::vector<double> lat = storm_lat(), lon = storm_lon();
  const torch::Tensor mask = read_static_field(kStormDir + "landsea.nc", "LSMASK", "nearest", lat, lon);
  ASSERT_EQ(mask.sizes(), (std::vector<int64_t>{33, 36}));
  auto value = [&](double la, double lo) {
    const auto i = std::find(lat.begin(), lat.end(), la) - lat.begin();
    const auto j = std::find(lon.begin(), lon.end(), lo) - lon.begin();
    return mask[i][j].item<float>();
  };
  EXPECT_EQ(value(25.0, -90.0), 0.0f);     // Gulf of Mexico
  EXPECT_EQ(value(38.75, -100.0), 1.0f);   // Kansas
  EXPECT_EQ(value(40.0, -140.0), 0.0f);    // the Pacific
  EXPECT_EQ(mask.isnan().sum().item<int64_t>(), 0);
}

// A regional field (lon 0..3E) takes its edge column up to one spacing past the edge; a grid point
// farther away is refused rather than filled from the edge.
TEST(StaticFieldErrors, RegionalFieldIsNotStretchedInLongitude) {
  TempDir dir;
  write_mask(dir.file("regional.nc"), 0, {0.0, 1.0, 2.0, 3.0});
  expect_same(read_static_field(dir.file("regional.nc"), "mask", "nearest", {30.0}, {-0.75, 3.9}),
              {{decoded(0, 0), decoded(0, 3)}});
  const std::string message =
      data_error([&] { read_static_field(dir.file("regional.nc"), "mask", "nearest", {30.0}, {1.0, 10.0}); });
  EXPECT_NE(message.find("grid longitude 1 is 10"), std::string::npos) << message;
  EXPECT_NE(message.find(dir.file("regional.nc")), std::string::npos) << message;
}
