// Zarr stores written by netCDF-C's NCZarr, read natively through the same Dataset API, and forecasts written as NetCDF
// that read back with the same names, units, grid and values.
#include <gtest/gtest.h>
#include <netcdf.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "data/dataset.h"
#include "data/forecast_writer.h"
#include "data/readers/netcdf_file.h"
#include "storm_fixture.h"

using namespace wxtrain;
using namespace wxtrain::data;
using namespace wxtrain::data::testing;

namespace {

bool same_with_nan(const torch::Tensor& a, const torch::Tensor& b) {
  return torch::equal(torch::isnan(a), torch::isnan(b)) &&
         torch::equal(torch::nan_to_num(a, 0), torch::nan_to_num(b, 0));
}

}  // namespace

TEST(NetcdfFile, ZarrUrlNamesALocalStore) {
  EXPECT_TRUE(is_zarr_url("file:///tmp/x.zarr#mode=nczarr,file"));
  EXPECT_FALSE(is_zarr_url("/tmp/x.nc"));
  EXPECT_EQ(zarr_url("/tmp/a/../store.zarr"), "file:///tmp/store.zarr#mode=nczarr,file");
  EXPECT_EQ(zarr_url("/tmp/store.zarr", true), "file:///tmp/store.zarr#mode=zarr,file");
}

TEST(Zarr, StormStoreReadsBackThroughTheSameDataset) {
  if (!nczarr_available()) GTEST_SKIP() << "netCDF-C built without NCZarr";
  Dataset storm({storm_sources()[0], storm_sources()[1]});  // p, t
  TempDir dir;
  for (bool pure_zarr : {false, true}) {
    const std::string url = zarr_url(dir.file(pure_zarr ? "storm_pure.zarr" : "storm.zarr"), pure_zarr);
    {
      NetcdfFile store = NetcdfFile::create(url);
      store.define_dimension("time", 64);
      store.define_dimension("lat", 33);
      store.define_dimension("lon", 36);
      store.define_variable("time", NC_DOUBLE, {"time"});
      store.put_text_attribute("time", "units", "hours since 1996-01-05 00:00");
      store.define_variable("lat", NC_DOUBLE, {"lat"});
      store.define_variable("lon", NC_DOUBLE, {"lon"});
      for (const char* name : {"pressure", "temperature"}) {
        store.define_variable(name, NC_FLOAT, {"time", "lat", "lon"});
        store.put_float_attribute(name, "_FillValue", -9999.0f);
      }
      store.put_text_attribute("temperature", "units", "K");
      store.end_define();
      store.write_doubles("time", storm.time_axis().raw);
      store.write_doubles("lat", storm.lat());
      store.write_doubles("lon", storm.lon());
      for (int64_t v = 0; v < 2; ++v) {
        std::vector<float> values;
        for (int64_t t = 0; t < 64; ++t) {
          torch::Tensor field = torch::nan_to_num(storm.state(t)[v], -9999.0f).contiguous();
          values.insert(values.end(), field.data_ptr<float>(), field.data_ptr<float>() + field.numel());
        }
        store.write_floats(v == 0 ? "pressure" : "temperature", {0, 0, 0}, {64, 33, 36}, values.data());
      }
      store.close();
    }
    Dataset zarr({{url, "pressure", "p"}, {url, "temperature", "t"}});
    EXPECT_EQ(zarr.num_times(), 64);
    EXPECT_EQ(zarr.num_lat(), 33);
    EXPECT_EQ(zarr.num_lon(), 36);
    EXPECT_EQ(zarr.lat(), storm.lat());
    EXPECT_EQ(zarr.time_axis().units, "hours since 1996-01-05 00:00");
    EXPECT_EQ(zarr.time_axis().label(1), "1996-01-05T06:00:00");
    EXPECT_EQ(zarr.variables()[1].units, "K");
    EXPECT_TRUE(zarr.has_fill_values());
    for (int64_t t : {0, 17, 63}) EXPECT_TRUE(same_with_nan(zarr.state(t), storm.state(t))) << "t=" << t;

    DatasetOptions lazy;
    lazy.preload_max_bytes = 0;
    Dataset lazy_zarr({{url, "pressure", "p"}, {url, "temperature", "t"}}, lazy);
    EXPECT_TRUE(same_with_nan(lazy_zarr.state(30), storm.state(30)));
  }
  const std::string missing = zarr_url(dir.file("absent.zarr"));
  try {
    Dataset absent({{missing, "p", "p"}});
    FAIL() << "expected a DataError";
  } catch (const DataError& error) {
    EXPECT_NE(std::string(error.what()).find("absent.zarr"), std::string::npos) << error.what();
  }
}

TEST(ForecastWriter, RoundTripsValuesNamesUnitsAndGrid) {
  DatasetOptions options;
  Dataset storm(storm_sources(), options);
  std::vector<torch::Tensor> states;
  for (int64_t t = 20; t < 24; ++t) states.push_back(storm.state(t));
  const torch::Tensor forecast = torch::stack(states);  // [4, 6, 33, 36] with NaN at fill points
  TempDir dir;
  const std::string path = dir.file("forecast.nc");
  auto coordinates = ForecastCoordinates::after(storm, 20, 4);  // the storm's timestep coordinate: 120 at 20
  coordinates.time_units = "hours since 1996-01-05 00:00";
  coordinates.variables[1].units = "K";
  coordinates.variables[1].long_name = "air temperature";
  write_forecast(path, forecast, coordinates);

  // Only the final file is left: the temporary was renamed.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 1);
  std::vector<DataSource> sources;
  for (const auto& name : storm.variable_names()) sources.push_back({path, name, name});
  Dataset back(sources);
  EXPECT_EQ(back.variable_names(), storm.variable_names());
  EXPECT_EQ(back.num_times(), 4);
  EXPECT_EQ(back.lat(), storm.lat());
  EXPECT_EQ(back.lon(), storm.lon());
  EXPECT_EQ(back.time_axis().raw, (std::vector<double>{126, 132, 138, 144}));
  EXPECT_EQ(back.time_axis().units, "hours since 1996-01-05 00:00");
  EXPECT_EQ(back.time_axis().label(0), "1996-01-10T06:00:00");
  EXPECT_EQ(back.variables()[1].units, "K");
  EXPECT_EQ(back.variables()[1].long_name, "air temperature");
  EXPECT_TRUE(back.has_fill_values());
  for (int64_t t = 0; t < 4; ++t) EXPECT_TRUE(same_with_nan(back.state(t), forecast[t])) << "t=" << t;

  // A folder that does not exist: the message names the file asked for, for both formats.
  for (const std::string target : {"/nonexistent-dir/forecast.nc", "/nonexistent-dir/forecast.zarr"}) {
    try {
      write_forecast(target, forecast, coordinates);
      ADD_FAILURE() << "no error writing " << target;
    } catch (const DataError& error) {
      EXPECT_NE(std::string(error.what()).find(target.substr(0, target.size() - 3)), std::string::npos) << error.what();
    }
  }

  // A forecast of the wrong shape is refused before anything is written.
  EXPECT_THROW(write_forecast(dir.file("bad.nc"), forecast.slice(1, 0, 5), coordinates), DataError);
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad.nc")));
}

// Written step by step: nothing exists under the target before commit(); a forecast that stops
// short (fewer steps than its coordinates) is refused and leaves no file; the reference time and
// lead times are CF (forecast_reference_time in the time units, lead_time in hours).
TEST(ForecastWriter, StreamsStepsAndCommitsOnlyAWholeForecast) {
  DatasetOptions options;
  Dataset storm(storm_sources(), options);
  TempDir dir;
  auto coordinates = ForecastCoordinates::after(storm, 20, 3);
  coordinates.has_dates = true;
  coordinates.time_units = "hours since 1996-01-05 00:00";
  const int64_t epoch = to_seconds(parse_date("1996-01-05T00:00"), Calendar::kStandard);
  coordinates.reference_seconds = epoch;
  coordinates.seconds = {epoch + 6 * 3600, epoch + 12 * 3600, epoch + 18 * 3600};
  for (const std::string name : {"short.nc", "short.zarr"}) {
    {
      ForecastWriter writer(dir.file(name), coordinates);
      writer.write_step(storm.state(21));
      EXPECT_FALSE(std::filesystem::exists(dir.file(name)));
      EXPECT_THROW(writer.write_step(storm.state(22).slice(0, 0, 5)), DataError);  // 5 of 6 channels
      EXPECT_THROW(writer.commit(), DataError);                                 // 1 of 3 steps
    }
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 0)
        << name << ": the temporary file was left behind";
  }
  const std::string path = dir.file("whole.nc");
  {
    ForecastWriter writer(path, coordinates);
    for (int64_t t = 21; t <= 23; ++t) writer.write_step(storm.state(t));
    writer.commit();
  }
  NetcdfFile file = NetcdfFile::open(path);
  EXPECT_EQ(file.read_doubles("time"), (std::vector<double>{6, 12, 18}));
  EXPECT_EQ(file.read_doubles("forecast_reference_time"), (std::vector<double>{0}));
  EXPECT_EQ(file.text_attribute("forecast_reference_time", "units"), "hours since 1996-01-05 00:00");
  EXPECT_EQ(file.read_doubles("lead_time"), (std::vector<double>{6, 12, 18}));
  EXPECT_EQ(file.text_attribute("lead_time", "units"), "hours");
  EXPECT_EQ(file.text_attribute("lead_time", "standard_name"), "forecast_period");
  EXPECT_EQ(file.text_attribute("p", "coordinates"), "forecast_reference_time lead_time");
}

// An ensemble (coordinates.members): a `number` dimension right after time, int64 0..N-1 with
// cfgrib's attributes, before the levels; each member's values where they belong, one chunk per
// step and member (NetCDF and Zarr alike).
TEST(ForecastWriter, MembersGetANumberDimensionAfterTime) {
  DatasetOptions options;
  Dataset storm(storm_sources(), options);
  auto coordinates = ForecastCoordinates::after(storm, 20, 2);
  // The first two channels as levels 500 and 850 of one variable z: z(time, number, level, lat, lon).
  for (int i = 0; i < 2; ++i) {
    coordinates.variables[static_cast<size_t>(i)].source_name = "z";
    coordinates.variables[static_cast<size_t>(i)].file = "z.nc";  // levels of one source
    coordinates.variables[static_cast<size_t>(i)].level = i == 0 ? 500.0 : 850.0;
    coordinates.variables[static_cast<size_t>(i)].level_units = "hPa";
  }
  coordinates.members = 3;
  const int64_t V = 6, H = 33, W = 36;
  // Member m of step k: k * 100 + m * 10 + channel everywhere.
  const torch::Tensor states = torch::arange(2).view({2, 1, 1, 1, 1}) * 100 + torch::arange(3).view({1, 3, 1, 1, 1}) * 10 +
                               torch::arange(V).view({1, 1, V, 1, 1}) + torch::zeros({2, 3, V, H, W});
  TempDir dir;
  const std::string path = dir.file("ensemble.nc");
  write_forecast(path, states.to(torch::kFloat32), coordinates);
  NetcdfFile file = NetcdfFile::open(path);
  std::vector<std::string> dims;
  for (const auto& d : file.dimensions_of("z")) dims.push_back(d.name);
  EXPECT_EQ(dims, (std::vector<std::string>{"time", "number", "level", "lat", "lon"}));
  dims.clear();
  for (const auto& d : file.dimensions_of("u")) dims.push_back(d.name);
  EXPECT_EQ(dims, (std::vector<std::string>{"time", "number", "lat", "lon"}));
  EXPECT_TRUE(file.dimensions_of("z").front().unlimited);
  EXPECT_EQ(file.type_name("number"), "int64");
  EXPECT_EQ(file.read_doubles("number"), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(file.text_attribute("number", "long_name"), "ensemble member numerical id");
  EXPECT_EQ(file.text_attribute("number", "standard_name"), "realization");
  EXPECT_EQ(file.text_attribute("number", "units"), "1");
  float value = 0;
  file.read_floats("z", {1, 2, 1, 5, 7}, {1, 1, 1, 1, 1}, &value);  // step 1, member 2, level 850 (channel 1)
  EXPECT_EQ(value, 121.0f);
  file.read_floats("u", {0, 1, 3, 4}, {1, 1, 1, 1}, &value);  // step 0, member 1, channel 2 (u)
  EXPECT_EQ(value, 12.0f);

  const std::string store = dir.file("ensemble.zarr");
  write_forecast(store, states.to(torch::kFloat32), coordinates);
  auto json = [&](const std::string& relative) {
    std::ifstream in(store + "/" + relative);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  auto squeeze = [](std::string text) {
    text.erase(std::remove_if(text.begin(), text.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); }),
               text.end());
    return text;
  };
  EXPECT_NE(squeeze(json("z/.zattrs")).find(R"("_ARRAY_DIMENSIONS":["time","number","level","lat","lon"])"),
            std::string::npos) << json("z/.zattrs");
  EXPECT_NE(squeeze(json("z/.zarray")).find(R"("chunks":[1,1,2,33,36])"), std::string::npos) << json("z/.zarray");
  EXPECT_NE(squeeze(json("number/.zarray")).find(R"("dtype":"<i8")"), std::string::npos) << json("number/.zarray");
  EXPECT_NE(squeeze(json("number/.zattrs")).find(R"("standard_name":"realization")"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(store + "/z/1.2.0.0.0"));  // step 1, member 2

  // A step without its member dimension is refused, naming the shape expected.
  ForecastWriter writer(dir.file("short.nc"), coordinates);
  try {
    writer.write_step(storm.state(21));
    ADD_FAILURE() << "a [V, lat, lon] step was written to a forecast of 3 members";
  } catch (const DataError& error) {
    EXPECT_NE(std::string(error.what()).find("[3, 6, 33, 36] (member, variable, lat, lon)"), std::string::npos)
        << error.what();
  }
}
