// Weather archives as the field writes them (tests/data/era5_fixture.py: xarray's to_zarr with its
// default Blosc and with Zstd per-step chunks, Zarr v3 with sharding, to_netcdf with int16 packing,
// GRIB2 from ecCodes),
// read through one Dataset with pressure levels and a 6-hour step on hourly data: every value equals
// what xarray reads, the gap in the archive removes exactly the samples that need it, dates and
// periods split the data, and forecasts written as NetCDF and Zarr open in xarray with their levels,
// CF time and values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "core/error.h"
#include "data/dataset.h"
#include "data/forecast_writer.h"
#include "data/samples.h"
#include "storm_fixture.h"

using namespace wxtrain;
using namespace wxtrain::data;
using namespace wxtrain::data::testing;

namespace {

const std::string kPython = WXTRAIN_SYSTEM_PYTHON;
const std::string kScripts = std::string(WXTRAIN_SOURCE_DIR) + "/tests/data/";

// The fixture is written once per test process (it takes a few seconds).
class Archives : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string command = kPython + " " + kScripts + "era5_fixture.py " + dir_->path().string() + " > " +
                                dir_->file("fixture.log") + " 2>&1";
    fixture_ok_ = std::system(command.c_str()) == 0;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(fixture_ok_) << "era5_fixture.py failed: see " << dir_->file("fixture.log");
  }

  static std::string file(const std::string& name) { return dir_->file(name); }
  // era5.nc written by xarray to `path` south to north on longitudes -180..170: the same grid in
  // another orientation.
  static void write_flipped_copy(const std::string& path) {
    const std::string command = kPython + " -c \"import xarray as xr; ds = xr.open_dataset('" + file("era5.nc") +
                                "'); ds = ds.isel(latitude=slice(None, None, -1)); ds = ds.assign_coords(longitude="
                                "(((ds.longitude + 180) % 360) - 180)).sortby('longitude'); ds.to_netcdf('" + path + "')\"";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }

  // z at 500 and 850 hPa, t at 850, t2m, sst: the channels the fixture's expected_*.f32 hold.
  static DataConfig era5_config(const std::string& store, bool grib = false) {
    DataConfig config;
    const std::string path = file(store);
    config.sources = {{path, "z", "z", {500, 850}}, {path, "t", "t", {850}}, {path, grib ? "2t" : "t2m", "t2m", {}}};
    if (!grib) config.sources.push_back({path, "sst", "sst", {}});
    config.time_step = "6h";
    return config;
  }

  // [time, channel, lat, lon] as xarray read it.
  static torch::Tensor expected(const std::string& store, int64_t channels) {
    std::ifstream in(file("expected_" + store + ".f32"), std::ios::binary);
    std::vector<float> values(19 * 5 * 19 * 36);
    in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
    EXPECT_TRUE(in) << "expected_" << store << ".f32";
    return torch::from_blob(values.data(), {19, 5, 19, 36}, torch::kFloat32).slice(1, 0, channels).clone();
  }

  static TempDir* dir_;
  static bool fixture_ok_;
};
TempDir* Archives::dir_ = nullptr;
bool Archives::fixture_ok_ = false;

std::string data_error(const std::function<void()>& build) {
  try {
    build();
  } catch (const DataError& error) {
    return error.what();
  }
  return "";
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_F(Archives, EveryFormatReadsWhatXarrayReadsWithLevelsAndA6HourStep) {
  const std::vector<std::string> dates = lines_of(file("expected_times.txt"));
  ASSERT_EQ(dates.size(), 19u);  // 120 hours, every sixth, one of them missing
  for (const std::string store : {"era5.zarr", "era5_zstd.zarr", "era5_v3.zarr", "era5.nc", "era5.grib2"}) {
    SCOPED_TRACE(store);
    const bool grib = store == "era5.grib2";
    const int64_t channels = grib ? 4 : 5;
    DatasetOptions lazy;  // also read lazily: state by state, through the chunk cache
    lazy.preload_max_bytes = 0;
    for (const DatasetOptions& options : {DatasetOptions{}, lazy}) {
      Dataset dataset(era5_config(store, grib), options);
      const std::vector<std::string> names = {"z_500", "z_850", "t_850", "t2m", "sst"};
      EXPECT_EQ(dataset.variable_names(), std::vector<std::string>(names.begin(), names.begin() + channels));
      EXPECT_EQ(dataset.num_lat(), 19);
      EXPECT_EQ(dataset.num_lon(), 36);
      EXPECT_DOUBLE_EQ(dataset.lat().front(), 90.0);  // north to south, as stored
      EXPECT_DOUBLE_EQ(dataset.lon().back(), 350.0);
      EXPECT_EQ(*dataset.variables()[1].level, 850.0);
      EXPECT_EQ(dataset.source_times(), 119);
      EXPECT_EQ(dataset.source_step_seconds(), 3600);
      ASSERT_EQ(dataset.num_times(), 19);
      EXPECT_EQ(dataset.time_axis().step_seconds, 6 * 3600);
      for (int64_t t = 0; t < 19; ++t) EXPECT_EQ(dataset.time_axis().label(t), dates[static_cast<size_t>(t)]);
      const torch::Tensor truth = expected(store, channels);
      for (int64_t t = 0; t < 19; ++t) {
        const torch::Tensor state = dataset.state(t);
        const torch::Tensor want = truth[t];
        ASSERT_TRUE(torch::equal(torch::isnan(state), torch::isnan(want))) << "NaN mask at " << dates[t];
        // Equal element for element; t2m in the NetCDF file is int16-packed, decoded in float32 by
        // xarray and in double by wxtrain, so it may differ in the last bit.
        const double worst = (torch::nan_to_num(state, 0) - torch::nan_to_num(want, 0)).abs().max().item<double>();
        EXPECT_LE(worst, store == "era5.nc" ? 1e-4 : 0.0) << "at " << dates[t];
      }
      if (!grib) {
        EXPECT_TRUE(dataset.has_fill_values());  // sst is NaN over land
      }
    }
  }
}

TEST_F(Archives, TheGapRemovesExactlyTheSamplesThatNeedIt) {
  Dataset dataset(era5_config("era5.zarr"));
  DataConfig config = era5_config("era5.zarr");
  config.val_fraction = 0.0;
  const TimeSplit split(dataset.time_axis(), config, {2, 1});
  // Hour 54 is missing: the 6-hourly axis jumps 48 -> 60, which breaks the windows (42, 48, 60) and
  // (48, 60, 66). 19 states give 17 windows of 3, 2 of them broken.
  EXPECT_EQ(split.sample_times(Split::kTrain).size(), 15u);
  EXPECT_EQ(split.skipped(Split::kTrain), 2);
  const std::string line = describe_samples(dataset, split);
  EXPECT_NE(line.find("15 training (2 skipped"), std::string::npos) << line;
  EXPECT_NE(line.find("2020-01-01T00:00:00 .. 2020-01-05T18:00:00 every 6h (of 119 every 1h)"), std::string::npos)
      << line;

  // A step the data's spacing does not divide is an error that names the spacing (it once took
  // every third hour and reported the data as "spaced 3h").
  DataConfig coarse = era5_config("era5.zarr");
  coarse.time_step = "90min";
  const std::string message = data_error([&] { Dataset every_90(coarse); });
  EXPECT_NE(message.find("data.time_step = \"90min\" must be a multiple of the data's spacing, 1h"), std::string::npos)
      << message;
  EXPECT_NE(message.find("e.g. \"1h\", \"2h\" or \"3h\""), std::string::npos) << message;
}

TEST_F(Archives, PeriodsSplitByDate) {
  DataConfig config = era5_config("era5.nc");
  config.train_period = {"2020-01-01", "2020-01-03"};
  config.val_period = {"2020-01-04T00:00", "2020-01-05T18:00"};
  Dataset dataset(config);
  const TimeSplit split(dataset.time_axis(), config, {2, 1});
  const TimeAxis& axis = dataset.time_axis();
  EXPECT_EQ(axis.label(split.begin(Split::kTrain)), "2020-01-01T00:00:00");
  EXPECT_EQ(axis.label(split.end(Split::kTrain) - 1), "2020-01-03T18:00:00");  // the whole last day
  EXPECT_EQ(axis.label(split.begin(Split::kValidation)), "2020-01-04T00:00:00");
  EXPECT_EQ(axis.label(split.end(Split::kValidation) - 1), "2020-01-05T18:00:00");
  for (int64_t t : split.sample_times(Split::kValidation)) EXPECT_GE(t - 1, split.begin(Split::kValidation));

  config.val_period = {"2020-01-03T12:00", "2020-01-05"};
  std::string message = data_error([&] { TimeSplit(dataset.time_axis(), config, {2, 1}); });
  EXPECT_NE(message.find("overlap"), std::string::npos) << message;
  config.val_period = {"2021-01-01", "2021-02-01"};
  message = data_error([&] { TimeSplit(dataset.time_axis(), config, {2, 1}); });
  EXPECT_NE(message.find("data.val_period"), std::string::npos) << message;
  EXPECT_NE(message.find("holds no state"), std::string::npos) << message;
  EXPECT_NE(message.find("2020-01-01T00:00:00 to 2020-01-05T18:00:00"), std::string::npos) << message;
  config.val_period = {"2020-02-30", "2020-03-01"};
  message = data_error([&] { TimeSplit(dataset.time_axis(), config, {2, 1}); });
  EXPECT_NE(message.find("2020-02-30"), std::string::npos) << message;
}

TEST_F(Archives, LevelsThatAreNotThereAreListed) {
  DataConfig config = era5_config("era5.zarr");
  config.sources[0].levels = {500, 700};
  std::string message = data_error([&] { Dataset dataset(config); });
  EXPECT_NE(message.find("no level 700"), std::string::npos) << message;
  EXPECT_NE(message.find("1000, 850, 500"), std::string::npos) << message;
  EXPECT_NE(message.find("millibars"), std::string::npos) << message;
  config.sources[0].levels = {};
  message = data_error([&] { Dataset dataset(config); });
  EXPECT_NE(message.find("has 3 levels in 'level'"), std::string::npos) << message;
  EXPECT_NE(message.find("levels = [...]"), std::string::npos) << message;
  config = era5_config("era5.zarr");
  config.sources[2].levels = {850};
  message = data_error([&] { Dataset dataset(config); });
  EXPECT_NE(message.find("variable 't2m'"), std::string::npos) << message;
  EXPECT_NE(message.find("has no level dimension"), std::string::npos) << message;
}

// The same data from NetCDF (latitude north to south, longitude 0..350) and from a copy written
// south to north on -180..170: one grid, matched by value.
TEST_F(Archives, GridsAreMatchedByValueAcrossOrientations) {
  const std::string flipped = file("era5_flipped.nc");
  ASSERT_NO_FATAL_FAILURE(write_flipped_copy(flipped));
  DataConfig config;
  config.sources = {{file("era5.nc"), "t2m", "t2m", {}}, {flipped, "t2m", "t2m_flipped", {}}};
  Dataset dataset(config);
  EXPECT_DOUBLE_EQ(dataset.lat().front(), 90.0);
  for (int64_t t : {0, 50, 118}) {
    const torch::Tensor state = dataset.state(t);
    EXPECT_TRUE(torch::allclose(state[0], state[1], 0, 1e-4)) << "t=" << t;
  }
}

// Forecasts written as NetCDF and as Zarr v2: xarray opens both and finds z(time, level, lat, lon)
// on levels 500 and 850, CF times 6 h apart after the start, and the values written.
TEST_F(Archives, ForecastsOpenInXarrayWithLevelsTimesAndValues) {
  Dataset dataset(era5_config("era5.nc"));
  const int64_t start = 10, steps = 3;
  const ForecastCoordinates coordinates = ForecastCoordinates::after(dataset, start, steps);
  std::vector<torch::Tensor> states;
  for (int64_t k = 1; k <= steps; ++k) states.push_back(dataset.state(start + k));  // a "perfect" forecast
  const torch::Tensor forecast = torch::stack(states);
  const torch::Tensor flat = torch::nan_to_num(forecast, -1.0).contiguous();
  std::ofstream(file("forecast_values.f32"), std::ios::binary)
      .write(reinterpret_cast<const char*>(flat.data_ptr<float>()), static_cast<std::streamsize>(flat.numel() * 4));
  for (const std::string out : {"forecast.nc", "forecast.zarr"}) {
    SCOPED_TRACE(out);
    write_forecast(file(out), forecast, coordinates);
    const std::string command = kPython + " " + kScripts + "check_forecast.py " + file(out) + " " +
                                file("forecast_values.f32") + " 2020-01-04T00:00:00 6 > " + file(out + ".log") + " 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << "check_forecast.py failed:\n"
                                               << [&] {
                                                    std::string text;
                                                    for (const auto& line : lines_of(file(out + ".log"))) text += line + "\n";
                                                    return text;
                                                  }();
    // And wxtrain reads its own output back.
    DataConfig back;
    back.sources = {{file(out), "z", "z", {500, 850}}, {file(out), "t2m", "t2m", {}}};
    Dataset reread(back);
    EXPECT_EQ(reread.num_times(), steps);
    EXPECT_EQ(reread.time_axis().label(0), "2020-01-04T00:00:00");
    EXPECT_TRUE(torch::allclose(reread.state(2)[1], forecast[2][1]));
  }
}

// Model parallelism (Dataset::set_band, docs/data.md "Bands"): a rank reads only its band of
// latitude rows from every format, and its values are xarray's rows of that band. The reader is
// asked for the band's rows only: the bytes it reads for one state are the band's share of a
// whole state's, exactly (every source reads whole rows).
TEST_F(Archives, EachBandReadsOnlyItsRowsFromEveryFormat) {
  for (const std::string store : {"era5.zarr", "era5_zstd.zarr", "era5_v3.zarr", "era5.nc", "era5.grib2"}) {
    SCOPED_TRACE(store);
    const bool grib = store == "era5.grib2";
    const torch::Tensor truth = expected(store, grib ? 4 : 5);  // [19 times, channels, 19 lat, 36 lon]
    DatasetOptions lazy;
    lazy.preload_max_bytes = 0;
    Dataset whole(era5_config(store, grib), lazy);
    const int64_t before = whole.archive_bytes_read();
    whole.state(3);
    const int64_t whole_bytes = whole.archive_bytes_read() - before;
    EXPECT_GT(whole_bytes, 0);
    for (const int64_t parts : {2, 3}) {
      for (int64_t r = 0; r < parts; ++r) {
        const auto [begin, length] = grid_band(19, parts, r);
        Dataset dataset(era5_config(store, grib), lazy);
        dataset.set_band(begin, length);
        EXPECT_TRUE(dataset.banded());
        const int64_t at_band = dataset.archive_bytes_read();
        for (const int64_t t : {0, 3, 18}) {
          const torch::Tensor band = dataset.band_state(t);
          ASSERT_EQ(band.sizes(), (std::vector<int64_t>{grib ? 4 : 5, length, 36})) << "band " << r << " of " << parts;
          const torch::Tensor want = truth[t].narrow(1, begin, length);
          ASSERT_TRUE(torch::equal(torch::isnan(band), torch::isnan(want))) << "band " << r << " of " << parts;
          EXPECT_LE((torch::nan_to_num(band, 0) - torch::nan_to_num(want, 0)).abs().max().item<double>(),
                    store == "era5.nc" ? 1e-4 : 0.0)
              << "band " << r << " of " << parts << " at time " << t;
        }
        // Three states, each the band's rows of every source: length / 19 of a whole state.
        EXPECT_EQ((dataset.archive_bytes_read() - at_band) * 19, 3 * whole_bytes * length)
            << "band " << r << " of " << parts;
        // The whole grid stays readable (the statistics' pass), read apart from the band's cache.
        EXPECT_TRUE(torch::equal(torch::nan_to_num(dataset.state(3), 0), torch::nan_to_num(whole.state(3), 0)));
      }
    }
  }
}

// A band of a region cut from a source whose latitudes run the other way (and whose longitudes
// are rolled): the rows of the band of the region, in the dataset's order; the computed forcings
// and static fields are the band's; data preloaded at open is cut to the band.
TEST_F(Archives, ABandOfARegionOfAFlippedSourceIsThoseRows) {
  const std::string flipped = file("era5_flipped_band.nc");
  ASSERT_NO_FATAL_FAILURE(write_flipped_copy(flipped));
  DataConfig config;
  config.sources = {{file("era5.nc"), "t2m", "t2m", {}}, {flipped, "t2m", "t2m_flipped", {}}};
  config.region.set = true;
  config.region.lat_min = -30, config.region.lat_max = 60, config.region.lon_min = 300, config.region.lon_max = 60;
  config.forcings = {"cos_latitude", "sin_longitude"};
  DatasetOptions lazy;
  lazy.preload_max_bytes = 0;
  const Dataset whole(config, lazy);
  ASSERT_EQ(whole.num_lat(), 10);  // 60 .. -30 every 10 degrees
  ASSERT_EQ(whole.num_lon(), 13);  // 300 .. 60 across the seam
  for (const DatasetOptions& options : {DatasetOptions{}, lazy}) {
    for (int64_t r = 0; r < 3; ++r) {
      const auto [begin, length] = grid_band(10, 3, r);
      Dataset dataset(config, options);
      dataset.set_band(begin, length);
      EXPECT_EQ(dataset.preloaded(), options.preload_max_bytes > 0);
      for (const int64_t t : {0, 50, 118}) {
        const torch::Tensor band = dataset.band_state(t), want = whole.state(t).narrow(1, begin, length);
        ASSERT_EQ(band.sizes(), (std::vector<int64_t>{2, length, 13}));
        EXPECT_TRUE(torch::equal(band, want)) << "band " << r << " at " << t;
        EXPECT_TRUE(torch::allclose(band[0], band[1], 0, 1e-4)) << "the flipped copy's rows, band " << r;
      }
      const int64_t seconds = whole.time_axis().seconds[7];
      EXPECT_TRUE(torch::allclose(dataset.band_computed_forcings(seconds),
                                  whole.computed_forcings(seconds).narrow(1, begin, length)))
          << "band " << r;
      EXPECT_EQ(dataset.band_static_fields().size(1), length);
    }
  }
  Dataset dataset(config, lazy);
  EXPECT_NE(data_error([&] { dataset.set_band(8, 3); }).find("a band of 3 latitude rows from 8 does not fit the grid's 10"),
            std::string::npos);
}
