// Dataset on the real storm files: shapes, names, values as netCDF stores them, fill masking,
// the error messages a user sees for bad inputs, and normalisation statistics.
#include <gtest/gtest.h>
#include <netcdf.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "data/readers/classic_header.h"
#include "data/dataset.h"
#include "data/readers/netcdf_file.h"
#include "data/normalization.h"
#include "data/samples.h"
#include "storm_fixture.h"

using namespace wxtrain;
using namespace wxtrain::data;
using namespace wxtrain::data::testing;

namespace {

// The value netCDF-C itself returns, without wxtrain in between.
float raw_value(const std::string& path, const std::string& variable, size_t t, size_t y, size_t x) {
  std::lock_guard<std::mutex> lock(netcdf_mutex());
  int ncid = -1, varid = -1;
  EXPECT_EQ(nc_open(path.c_str(), NC_NOWRITE, &ncid), NC_NOERR);
  EXPECT_EQ(nc_inq_varid(ncid, variable.c_str(), &varid), NC_NOERR);
  const size_t index[3] = {t, y, x};
  float value = 0;
  EXPECT_EQ(nc_get_var1_float(ncid, varid, index, &value), NC_NOERR);
  nc_close(ncid);
  return value;
}

// Message of the DataError that `build` throws ("" when it throws nothing).
template <typename F>
std::string data_error(F build) {
  try {
    build();
  } catch (const DataError& error) {
    return error.what();
  }
  return "";
}

// A small netCDF-4 file with `variable`(time, lat, lon) = 1 and lat/lon coordinates.
void write_small_file(const std::string& path, const std::string& variable, size_t times, size_t lat, size_t lon) {
  NetcdfFile file = NetcdfFile::create(path);
  file.define_dimension("time", 0);
  file.define_dimension("lat", lat);
  file.define_dimension("lon", lon);
  file.define_variable("lat", NC_DOUBLE, {"lat"});
  file.define_variable("lon", NC_DOUBLE, {"lon"});
  file.define_variable(variable, NC_FLOAT, {"time", "lat", "lon"});
  file.end_define();
  std::vector<double> lats(lat), lons(lon);
  for (size_t i = 0; i < lat; ++i) lats[i] = 20.0 + 1.25 * static_cast<double>(i);
  for (size_t i = 0; i < lon; ++i) lons[i] = -140.0 + 2.5 * static_cast<double>(i);
  file.write_doubles("lat", lats);
  file.write_doubles("lon", lons);
  std::vector<float> ones(times * lat * lon, 1.0f);
  file.write_floats(variable, {0, 0, 0}, {times, lat, lon}, ones.data());
  file.close();
}

}  // namespace

TEST(Dataset, StormShapesNamesAndCoordinates) {
  Dataset dataset(storm_sources());
  EXPECT_EQ(dataset.num_times(), 64);
  EXPECT_EQ(dataset.num_variables(), 6);
  EXPECT_EQ(dataset.num_lat(), 33);
  EXPECT_EQ(dataset.num_lon(), 36);
  EXPECT_EQ(dataset.variable_names(), (std::vector<std::string>{"p", "t", "u", "v", "u500", "v500"}));
  EXPECT_EQ(dataset.variables()[4].file, kStormDir + "U500storm.cdf");
  EXPECT_EQ(dataset.variables()[4].file_variable, "u");
  EXPECT_TRUE(dataset.has_coordinates());
  EXPECT_DOUBLE_EQ(dataset.lat().front(), 20.0);
  EXPECT_DOUBLE_EQ(dataset.lat().back(), 60.0);
  EXPECT_DOUBLE_EQ(dataset.lon().front(), -140.0);
  EXPECT_DOUBLE_EQ(dataset.lon().back(), -52.5);
  const TimeAxis& axis = dataset.time_axis();
  EXPECT_FALSE(axis.has_dates);                  // timestep has no units: positions only
  ASSERT_EQ(axis.raw.size(), 64u);
  EXPECT_DOUBLE_EQ(axis.raw[1], 6.0);            // six-hourly
  EXPECT_DOUBLE_EQ(axis.raw[63], 378.0);
  EXPECT_TRUE(dataset.has_fill_values());        // p:_FillValue = -9999
  EXPECT_TRUE(dataset.preloaded());              // 1.8 MB is read at once
  const torch::Tensor state = dataset.state(0);
  EXPECT_EQ(state.sizes(), (std::vector<int64_t>{6, 33, 36}));
  EXPECT_EQ(state.scalar_type(), torch::kFloat32);
}

TEST(Dataset, KnownValueMatchesRawNetcdfAndFillIsNaN) {
  Dataset dataset(storm_sources());
  // ncdump shows p(0, 0, 0..6) = _ and p(0, 0, 7) = 101515.5 Pa.
  EXPECT_FLOAT_EQ(dataset.state(0)[0][0][7].item<float>(), 101515.5f);
  EXPECT_TRUE(std::isnan(dataset.state(0)[0][0][0].item<float>()));
  EXPECT_FLOAT_EQ(raw_value(kStormDir + "Pstorm.cdf", "p", 0, 0, 0), -9999.0f);

  DatasetOptions lazy;
  lazy.preload_max_bytes = 0;
  Dataset lazy_dataset(storm_sources(), lazy);
  EXPECT_FALSE(lazy_dataset.preloaded());
  const std::vector<std::tuple<int64_t, size_t, size_t, size_t>> points = {
      {0, 0, 7, 10}, {5, 20, 20, 31}, {4, 32, 35, 63}, {1, 16, 18, 40}};
  for (const auto& [v, y, x, t] : points) {
    const auto& info = dataset.variables()[v];
    const float raw = raw_value(info.file, info.file_variable, t, y, x);
    ASSERT_NE(raw, -9999.0f) << "pick valid points";
    EXPECT_FLOAT_EQ(dataset.state(t)[v][y][x].item<float>(), raw) << info.name;
    EXPECT_FLOAT_EQ(lazy_dataset.state(t)[v][y][x].item<float>(), raw) << info.name;
  }
}

TEST(Dataset, LazyReadingEqualsPreloadedEverywhere) {
  DatasetOptions lazy;
  lazy.preload_max_bytes = 0;
  lazy.cache_states = 3;  // forces evictions
  Dataset eager(storm_sources()), reader(storm_sources(), lazy);
  for (int64_t t : {0, 1, 2, 3, 0, 40, 63, 1}) {
    EXPECT_TRUE(torch::equal(torch::nan_to_num(eager.state(t), -1), torch::nan_to_num(reader.state(t), -1)))
        << "t=" << t;
  }
}

TEST(Dataset, ScaleFactorAndOffsetAreApplied) {
  TempDir dir;
  const std::string path = dir.file("packed.nc");
  write_small_file(path, "x", 2, 3, 4);  // stored value 1
  {
    std::lock_guard<std::mutex> lock(netcdf_mutex());
    int ncid = -1, varid = -1;
    ASSERT_EQ(nc_open(path.c_str(), NC_WRITE, &ncid), NC_NOERR);
    ASSERT_EQ(nc_inq_varid(ncid, "x", &varid), NC_NOERR);
    ASSERT_EQ(nc_redef(ncid), NC_NOERR);
    const double scale = 0.5, offset = 273.15;
    ASSERT_EQ(nc_put_att_double(ncid, varid, "scale_factor", NC_DOUBLE, 1, &scale), NC_NOERR);
    ASSERT_EQ(nc_put_att_double(ncid, varid, "add_offset", NC_DOUBLE, 1, &offset), NC_NOERR);
    ASSERT_EQ(nc_put_att_text(ncid, varid, "units", 1, "K"), NC_NOERR);
    nc_close(ncid);
  }
  Dataset dataset({{path, "x", "temperature"}});
  EXPECT_FLOAT_EQ(dataset.state(1)[0][2][3].item<float>(), 273.65f);  // 1 * 0.5 + 273.15
  EXPECT_EQ(dataset.variables()[0].units, "K");
  EXPECT_FALSE(dataset.has_fill_values());
}

// A pressure-level variable stored as (time, level, lat, lon) with one level reads like 3-D data;
// with several levels it is refused with a hint.
void write_level_file(const std::string& path, size_t levels) {
  NetcdfFile file = NetcdfFile::create(path);
  file.define_dimension("time", 0);
  file.define_dimension("level", levels);
  file.define_dimension("lat", 3);
  file.define_dimension("lon", 4);
  file.define_variable("z", NC_FLOAT, {"time", "level", "lat", "lon"});
  file.end_define();
  std::vector<float> values(2 * levels * 12);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  file.write_floats("z", {0, 0, 0, 0}, {2, levels, 3, 4}, values.data());
  file.close();
}

TEST(Dataset, SingletonLevelDimensionIsAccepted) {
  TempDir dir;
  write_level_file(dir.file("z500.nc"), 1);
  DatasetOptions lazy;
  lazy.preload_max_bytes = 0;
  for (const DatasetOptions& options : {DatasetOptions{}, lazy}) {
    Dataset dataset({{dir.file("z500.nc"), "z", "z500"}}, options);
    EXPECT_EQ(dataset.num_times(), 2);
    EXPECT_FALSE(dataset.has_coordinates());  // no lat/lon variables: indices
    EXPECT_EQ(dataset.lat(), (std::vector<double>{0, 1, 2}));
    EXPECT_FLOAT_EQ(dataset.state(1)[0][2][3].item<float>(), 23.0f);
  }
  write_level_file(dir.file("z.nc"), 3);
  const std::string message = data_error([&] { Dataset dataset({{dir.file("z.nc"), "z", "z"}}); });
  EXPECT_NE(message.find("has 3 levels in 'level'"), std::string::npos) << message;
  EXPECT_NE(message.find(dir.file("z.nc")), std::string::npos) << message;
}

// ERA5's ensemble files add `number`: reading member 0 without being asked would be silently wrong.
TEST(DatasetErrors, ASecondNonSingletonDimensionIsRefused) {
  TempDir dir;
  const std::string path = dir.file("ensemble.nc");
  {
    NetcdfFile file = NetcdfFile::create(path);
    file.define_dimension("time", 0);
    file.define_dimension("number", 2);
    file.define_dimension("level", 3);
    file.define_dimension("lat", 3);
    file.define_dimension("lon", 4);
    file.define_variable("z", NC_FLOAT, {"time", "number", "level", "lat", "lon"});
    file.end_define();
    std::vector<float> values(2 * 2 * 3 * 12, 1.0f);
    file.write_floats("z", {0, 0, 0, 0, 0}, {2, 2, 3, 3, 4}, values.data());
    file.close();
  }
  DataSource source{path, "z", "z", {0}};
  const std::string message = data_error([&] { Dataset dataset({source}); });
  EXPECT_NE(message.find("more than one dimension of length > 1 besides time, lat and lon"), std::string::npos) << message;
  EXPECT_NE(message.find("number=2, level=3"), std::string::npos) << message;
}

TEST(DatasetErrors, MissingFileNamesThePath) {
  auto sources = storm_sources();
  sources[2].file = "/nonexistent/Ustorm.cdf";
  const std::string message = data_error([&] { Dataset dataset(sources); });
  EXPECT_NE(message.find("not found"), std::string::npos) << message;
  EXPECT_NE(message.find("/nonexistent/Ustorm.cdf"), std::string::npos) << message;
}

TEST(DatasetErrors, CorruptFileNamesThePath) {
  TempDir dir;
  const std::string path = dir.file("garbage.nc");
  std::ofstream(path) << "this is not a netcdf file, just some bytes \x01\x02\x03 that look nothing like one";
  const std::string message = data_error([&] { Dataset dataset({{path, "p", "p"}}); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("not a readable NetCDF file"), std::string::npos) << message;
}

namespace {
// The first `bytes` of `from`, as an interrupted copy leaves them.
void copy_prefix(const std::string& from, const std::string& to, std::streamsize bytes) {
  std::ifstream in(from, std::ios::binary);
  std::vector<char> buffer(static_cast<size_t>(bytes));
  in.read(buffer.data(), bytes);
  ASSERT_EQ(in.gcount(), bytes) << from;
  std::ofstream(to, std::ios::binary).write(buffer.data(), bytes);
}
}  // namespace

// netCDF-C reads the missing part of a short classic file as zeros without an error; the storm
// grid would then load as zeros and be reported as a grid mismatch.
TEST(DatasetErrors, TruncatedClassicFileIsNamedAsTruncated) {
  const std::string original = kStormDir + "Tstorm.cdf";
  EXPECT_EQ(classic_data_end(original), std::filesystem::file_size(original));  // the whole file is data
  TempDir dir;
  const std::string path = dir.file("Tstorm.cdf");
  copy_prefix(original, path, 200000);
  auto sources = storm_sources();
  sources[1].file = path;
  const std::string message = data_error([&] { Dataset dataset(sources); });
  EXPECT_NE(message.find(path + " is truncated"), std::string::npos) << message;
  EXPECT_NE(message.find("the file has 200000 bytes"), std::string::npos) << message;
  EXPECT_EQ(message.find("grid mismatch"), std::string::npos) << message;
}

// CDF-5 (8-byte counts and offsets) with two record variables: the header's promise is exactly the
// size netCDF-C writes, and one byte less is a truncated file.
TEST(DatasetErrors, TruncatedRecordFileIsNamedAsTruncated) {
  TempDir dir;
  const std::string path = dir.file("records.nc");
  {
    std::lock_guard<std::mutex> lock(netcdf_mutex());
    int ncid = -1, time = -1, lat = -1, lon = -1, a = -1, b = -1, c = -1;
    ASSERT_EQ(nc_create(path.c_str(), NC_CLOBBER | NC_CDF5, &ncid), NC_NOERR);
    ASSERT_EQ(nc_def_dim(ncid, "time", NC_UNLIMITED, &time), NC_NOERR);
    ASSERT_EQ(nc_def_dim(ncid, "lat", 3, &lat), NC_NOERR);
    ASSERT_EQ(nc_def_dim(ncid, "lon", 5, &lon), NC_NOERR);
    const int record_dims[] = {time, lat, lon};
    ASSERT_EQ(nc_def_var(ncid, "a", NC_FLOAT, 3, record_dims, &a), NC_NOERR);
    ASSERT_EQ(nc_def_var(ncid, "c", NC_FLOAT, 1, &lat, &c), NC_NOERR);  // fixed-size, between them
    ASSERT_EQ(nc_def_var(ncid, "b", NC_FLOAT, 3, record_dims, &b), NC_NOERR);
    ASSERT_EQ(nc_put_att_text(ncid, a, "units", 1, "K"), NC_NOERR);
    ASSERT_EQ(nc_enddef(ncid), NC_NOERR);
    std::vector<float> values(4 * 3 * 5, 1.0f);
    const size_t start[] = {0, 0, 0}, count[] = {4, 3, 5};
    ASSERT_EQ(nc_put_vara_float(ncid, a, start, count, values.data()), NC_NOERR);
    ASSERT_EQ(nc_put_vara_float(ncid, b, start, count, values.data()), NC_NOERR);
    ASSERT_EQ(nc_put_var_float(ncid, c, values.data()), NC_NOERR);
    ASSERT_EQ(nc_close(ncid), NC_NOERR);
  }
  const auto size = static_cast<std::streamsize>(std::filesystem::file_size(path));
  EXPECT_EQ(classic_data_end(path), static_cast<uint64_t>(size));
  EXPECT_NO_THROW(NetcdfFile::open(path));
  const std::string cut = dir.file("cut.nc");
  copy_prefix(path, cut, size - 1);
  const std::string message = data_error([&] { NetcdfFile::open(cut); });
  EXPECT_NE(message.find(cut + " is truncated"), std::string::npos) << message;
}

TEST(DatasetErrors, MissingVariableListsWhatTheFileHas) {
  auto sources = storm_sources();
  sources[1].variable = "temperature";
  const std::string message = data_error([&] { Dataset dataset(sources); });
  EXPECT_NE(message.find("'temperature'"), std::string::npos) << message;
  EXPECT_NE(message.find("Tstorm.cdf"), std::string::npos) << message;
  EXPECT_NE(message.find("t, timestep, lat, lon, reftime"), std::string::npos) << message;
}

TEST(DatasetErrors, GridMismatchGivesBothShapesAndFiles) {
  TempDir dir;
  const std::string path = dir.file("coarse.nc");
  write_small_file(path, "q", 64, 10, 12);
  auto sources = storm_sources();
  sources.push_back({path, "q", "q"});
  const std::string message = data_error([&] { Dataset dataset(sources); });
  EXPECT_NE(message.find("grid mismatch"), std::string::npos) << message;
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("10 x 12"), std::string::npos) << message;
  EXPECT_NE(message.find("Pstorm.cdf"), std::string::npos) << message;
  EXPECT_NE(message.find("33 x 36"), std::string::npos) << message;
}

TEST(DatasetErrors, ShiftedGridWithSameShapeIsAMismatch) {
  TempDir dir;
  const std::string path = dir.file("shifted.nc");
  write_small_file(path, "q", 64, 33, 36);
  {
    std::lock_guard<std::mutex> lock(netcdf_mutex());
    int ncid = -1, varid = -1;
    ASSERT_EQ(nc_open(path.c_str(), NC_WRITE, &ncid), NC_NOERR);
    ASSERT_EQ(nc_inq_varid(ncid, "lon", &varid), NC_NOERR);
    const size_t index = 3;
    const double value = 0.0;
    ASSERT_EQ(nc_put_var1_double(ncid, varid, &index, &value), NC_NOERR);
    nc_close(ncid);
  }
  const std::string message = data_error([&] { Dataset dataset({storm_sources()[0], {path, "q", "q"}}); });
  EXPECT_NE(message.find("grid mismatch"), std::string::npos) << message;
  EXPECT_NE(message.find("has longitudes -140 .. -52.5"), std::string::npos) << message;
  EXPECT_NE(message.find("-180..180 against 0..360"), std::string::npos) << message;
}

TEST(DatasetErrors, TimeAxisLengthMismatch) {
  TempDir dir;
  const std::string path = dir.file("short.nc");
  write_small_file(path, "q", 10, 33, 36);
  const std::string message = data_error([&] { Dataset dataset({storm_sources()[0], {path, "q", "q"}}); });
  EXPECT_NE(message.find("time axis mismatch"), std::string::npos) << message;
  EXPECT_NE(message.find("has 10 times"), std::string::npos) << message;
  EXPECT_NE(message.find("has 64"), std::string::npos) << message;
}

TEST(DatasetErrors, VariableWithoutTimeLatLonDims) {
  const std::string message = data_error([&] { Dataset dataset({{kStormDir + "Pstorm.cdf", "lat", "lat"}}); });
  EXPECT_NE(message.find("variable 'lat'"), std::string::npos) << message;
  EXPECT_NE(message.find("(lat=33)"), std::string::npos) << message;
  EXPECT_NE(message.find("expects (time, [level,] lat, lon)"), std::string::npos) << message;
}

TEST(DatasetErrors, SameNameTwiceAsksForARename) {
  auto sources = storm_sources();
  sources[4].name = "";  // U500storm's u would collide with Ustorm's u
  const std::string message = data_error([&] { Dataset dataset(sources); });
  EXPECT_NE(message.find("both called 'u'"), std::string::npos) << message;
}

TEST(Normalization, TrainSplitHasZeroMeanUnitStdIgnoringFill) {
  Dataset dataset(storm_sources());
  TimeSplit split(dataset.num_times(), 0.2, {2, 1});
  const Normalization norm = Normalization::compute(dataset, 0, split.end(Split::kTrain));
  EXPECT_EQ(norm.mean().sizes(), (std::vector<int64_t>{6}));
  EXPECT_GT(norm.mean()[0].item<float>(), 95000.0f);  // surface pressure in Pa, fill values excluded
  EXPECT_LT(norm.mean()[0].item<float>(), 105000.0f);

  std::vector<torch::Tensor> states;
  for (int64_t t = 0; t < split.end(Split::kTrain); ++t) states.push_back(dataset.state(t));
  const torch::Tensor raw = torch::stack(states);  // [T, V, lat, lon]
  const torch::Tensor normalized = norm.normalize(raw);
  const torch::Tensor valid = ~torch::isnan(raw);
  EXPECT_EQ(torch::isnan(normalized).sum().item<int64_t>(), 0);
  for (int64_t v = 0; v < 6; ++v) {
    const torch::Tensor values = normalized.select(1, v).masked_select(valid.select(1, v)).to(torch::kFloat64);
    EXPECT_NEAR(values.mean().item<double>(), 0.0, 1e-4) << dataset.variable_names()[v];
    EXPECT_NEAR(values.std(/*unbiased=*/false).item<double>(), 1.0, 1e-4) << dataset.variable_names()[v];
  }
  // Masked points become 0 and denormalize inverts normalize on valid points.
  EXPECT_EQ(normalized.masked_select(~valid).abs().max().item<float>(), 0.0f);
  const torch::Tensor back = norm.denormalize(normalized);
  EXPECT_TRUE(torch::allclose(back.masked_select(valid), raw.masked_select(valid), 1e-5, 1e-2));
}

TEST(Normalization, MapRoundTripKeepsNamesAndOrder) {
  const Normalization norm({"p", "t", "u500"}, torch::tensor({101000.f, 270.f, 5.f}), torch::tensor({900.f, 10.f, 8.f}));
  auto map = norm.to_map();
  EXPECT_EQ(map.count("norm/mean/u500"), 1u);
  EXPECT_FLOAT_EQ(map.at("norm/std/t").item<float>(), 10.f);
  map["model.weight"] = torch::ones({2});  // other checkpoint entries are ignored
  const Normalization back = Normalization::from_map(map);
  EXPECT_EQ(back.names(), norm.names());
  EXPECT_TRUE(torch::equal(back.mean(), norm.mean()));
  EXPECT_TRUE(torch::equal(back.std(), norm.std()));
  map.erase("norm/std/t");
  EXPECT_THROW(Normalization::from_map(map), DataError);
}

namespace {
// A netCDF-4 file of t(time, <lat_dim>, <lon_dim>) with `lat_var`(lat_dim) and `lon_var`(lon_dim)
// in degrees (none when the names are empty), and a time coordinate in `time_units`.
void write_grid_file(const std::string& path, const std::string& lat_dim, const std::string& lon_dim,
                     const std::string& lat_var, const std::string& lon_var, const std::string& time_units,
                     const std::string& calendar, const std::vector<double>& times) {
  NetcdfFile file = NetcdfFile::create(path);
  file.define_dimension("time", times.size());
  file.define_dimension(lat_dim, 4);
  file.define_dimension(lon_dim, 6);
  file.define_variable("time", NC_DOUBLE, {"time"});
  file.put_text_attribute("time", "units", time_units);
  file.put_text_attribute("time", "calendar", calendar);
  if (!lat_var.empty()) {
    file.define_variable(lat_var, NC_DOUBLE, {lat_dim});
    file.put_text_attribute(lat_var, "units", "degrees_north");
    file.define_variable(lon_var, NC_DOUBLE, {lon_dim});
    file.put_text_attribute(lon_var, "units", "degrees_east");
  }
  file.define_variable("t", NC_FLOAT, {"time", lat_dim, lon_dim});
  file.end_define();
  file.write_doubles("time", times);
  if (!lat_var.empty()) {
    file.write_doubles(lat_var, {50, 45, 40, 35});
    file.write_doubles(lon_var, {10, 12, 14, 16, 18, 20});
  }
  std::vector<float> values(times.size() * 24);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 7);
  file.write_floats("t", {0, 0, 0}, {times.size(), 4, 6}, values.data());
  file.close();
}
}  // namespace

// float lat(latitude), float lon(longitude): no coordinate variables in the netCDF sense, yet the
// grid's degrees, found as CF finds them, not the indices 0..3.
TEST(Dataset, LatitudesOnADimensionWithoutCoordinateVariable) {
  const std::string path = ::testing::TempDir() + "/wxtrain_lat_latitude.nc";
  write_grid_file(path, "latitude", "longitude", "lat", "lon", "hours since 2000-01-01", "standard", {0, 6, 12});
  Dataset dataset(std::vector<DataSource>{{path, "t", "", {}, "prognostic"}});
  EXPECT_TRUE(dataset.has_coordinates());
  EXPECT_EQ(dataset.lat(), (std::vector<double>{50, 45, 40, 35}));
  EXPECT_EQ(dataset.lon(), (std::vector<double>{10, 12, 14, 16, 18, 20}));
  DataConfig region;
  region.sources = {{path, "t", "", {}, "prognostic"}};
  region.region = {true, 38, 46, 11, 15};
  Dataset cropped(region);
  EXPECT_EQ(cropped.lat(), (std::vector<double>{45, 40}));
  EXPECT_EQ(cropped.lon(), (std::vector<double>{12, 14}));
}

// Nothing in the file says where the points are: indices stand in, and say so.
TEST(Dataset, WithoutLatitudesTheGridSaysSoAndNeedsOfDegreesAreRefused) {
  const std::string path = ::testing::TempDir() + "/wxtrain_no_latitudes.nc";
  write_grid_file(path, "y", "x", "", "", "hours since 2000-01-01", "standard", {0, 6, 12});
  Dataset dataset(std::vector<DataSource>{{path, "t", "", {}, "prognostic"}});
  EXPECT_FALSE(dataset.has_coordinates());
  EXPECT_EQ(dataset.no_coordinates(), "variable 't' in " + path + " (time=3, y=4, x=6) has no latitudes (no 1-D "
                                       "variable along dimension 'y' has units degrees_north or standard_name latitude)");
  DataConfig region;
  region.sources = {{path, "t", "", {}, "prognostic"}};
  region.region = {true, 38, 46, 11, 15};
  EXPECT_EQ(data_error([&] { Dataset cropped(region); }),
            "data.region needs latitudes and longitudes, but " + dataset.no_coordinates());
}

// "months since" on the standard calendar: calendar months, a model step of one month, and every
// window of consecutive months a sample (none skipped for February's 28 days).
TEST(Dataset, MonthlyDataStepsInCalendarMonths) {
  const std::string path = ::testing::TempDir() + "/wxtrain_monthly.nc";
  std::vector<double> months(24);
  for (size_t i = 0; i < months.size(); ++i) months[i] = static_cast<double>(i);
  write_grid_file(path, "lat", "lon", "lat", "lon", "months since 1990-01-01", "standard", months);
  DataConfig config;
  config.sources = {{path, "t", "", {}, "prognostic"}};
  config.time_step = "1mo";
  config.val_fraction = 0.25;
  Dataset dataset(config);
  const TimeAxis& axis = dataset.time_axis();
  ASSERT_EQ(axis.size(), 24);
  EXPECT_EQ(axis.label(1), "1990-02-01T00:00:00");
  EXPECT_EQ(axis.label(2), "1990-03-01T00:00:00");
  EXPECT_EQ(axis.label(23), "1991-12-01T00:00:00");
  EXPECT_EQ(axis.step_months, 1);
  EXPECT_EQ(axis.step_text(), "1mo");
  const TimeSplit split(axis, config, {2, 1});
  EXPECT_EQ(split.sample_times(Split::kTrain).size(), 16u);  // 18 training months, windows of 3
  EXPECT_EQ(split.skipped(Split::kTrain), 0);
  // The forecast's next valid times: one calendar month each.
  EXPECT_EQ(from_seconds(axis.after(axis.seconds[23], 2), axis.calendar).to_iso(), "1992-02-01T00:00:00");
  // Quarterly: every third month.
  config.time_step = "3mo";
  Dataset quarterly(config);
  ASSERT_EQ(quarterly.num_times(), 8);
  EXPECT_EQ(quarterly.time_axis().label(1), "1990-04-01T00:00:00");
  // A fixed step on monthly data is refused, pointing to months.
  config.time_step = "30d";
  EXPECT_NE(data_error([&] { Dataset fixed(config); }).find("use calendar months, data.time_step = \"1mo\""),
            std::string::npos);
}

// A model step the data's spacing does not divide: the spacing, and what would work.
TEST(DatasetErrors, TimeStepMustBeAMultipleOfTheDataSpacing) {
  const std::string path = ::testing::TempDir() + "/wxtrain_six_hourly.nc";
  write_grid_file(path, "lat", "lon", "lat", "lon", "hours since 2000-01-01", "standard", {0, 6, 12, 18, 24, 30});
  DataConfig config;
  config.sources = {{path, "t", "", {}, "prognostic"}};
  config.time_step = "9h";
  EXPECT_EQ(data_error([&] { Dataset dataset(config); }),
            "data.time_step = \"9h\" must be a multiple of the data's spacing, 6h (the most common spacing between "
            "the states of " + path + "): e.g. \"6h\", \"12h\" or \"18h\"");
}
