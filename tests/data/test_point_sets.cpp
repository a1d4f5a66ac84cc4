// Point-set grids through Dataset: the ERA5-shaped fixture on the octahedral grid O12
// (tests/data/cells_fixture.py), written by xarray as NetCDF and Zarr with a 1-D cell dimension and
// by ecCodes as reduced_gg GRIB2. Every value equals what xarray reads; the grid is recognised as
// O12 with its Gaussian area weights; the normalisation statistics are area-weighted; a region
// keeps the cells inside it; computed forcings are per cell; what cannot work on cells is refused
// naming the file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numeric>

#include "core/error.h"
#include "data/dataset.h"
#include "data/forecast_writer.h"
#include "data/normalization.h"
#include "storm_fixture.h"

using namespace wxtrain;
using namespace wxtrain::data;
using namespace wxtrain::data::testing;

namespace {

const std::string kPython = WXTRAIN_SYSTEM_PYTHON;
const std::string kScripts = std::string(WXTRAIN_SOURCE_DIR) + "/tests/data/";
constexpr int64_t kCells = 1008, kTimes = 19, kChannels = 4;

class PointSets : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string command = kPython + " " + kScripts + "cells_fixture.py " + dir_->path().string() + " > " +
                                dir_->file("fixture.log") + " 2>&1";
    fixture_ok_ = std::system(command.c_str()) == 0;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(fixture_ok_) << "cells_fixture.py failed: see " << dir_->file("fixture.log"); }

  static std::string file(const std::string& name) { return dir_->file(name); }

  static DataConfig config(const std::string& store) {
    DataConfig c;
    const std::string path = file(store);
    const bool grib = store.find(".grib") != std::string::npos;
    c.sources = {{path, "z", "z", {500, 850}}, {path, "t", "t", {850}}, {path, grib ? "2t" : "t2m", "t2m", {}}};
    c.time_step = "6h";
    return c;
  }

  // [time, channel, cell] as xarray read it.
  static torch::Tensor expected() {
    std::ifstream in(file("expected_cells.f32"), std::ios::binary);
    std::vector<float> values(kTimes * kChannels * kCells);
    in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
    EXPECT_TRUE(in);
    return torch::from_blob(values.data(), {kTimes, kChannels, kCells}, torch::kFloat32).clone();
  }

  static TempDir* dir_;
  static bool fixture_ok_;
};
TempDir* PointSets::dir_ = nullptr;
bool PointSets::fixture_ok_ = false;

std::string data_error(const std::function<void()>& build) {
  try {
    build();
  } catch (const DataError& error) {
    return error.what();
  }
  return "";
}

TEST_F(PointSets, NetCdfZarrAndReducedGaussianGribReadAsTheSameCells) {
  const torch::Tensor want = expected();
  for (const std::string store : {"cells.nc", "cells.zarr", "o12.grib2"}) {
    SCOPED_TRACE(store);
    const Dataset d(config(store));
    EXPECT_TRUE(d.point_set());
    ASSERT_EQ(d.num_lat(), 1);
    ASSERT_EQ(d.num_lon(), kCells);
    ASSERT_EQ(d.num_times(), kTimes);
    ASSERT_EQ(d.lat().size(), static_cast<size_t>(kCells));
    EXPECT_NEAR(d.lat().front(), 84.37645766, 1e-6);  // O12's first Gaussian latitude
    EXPECT_NEAR(d.lon()[21], 15.0, 1e-9);             // row 2 has 24 points
    // Recognised from the cells' coordinates as O12, weighted by its Gaussian weights.
    EXPECT_EQ(d.grid().kind, GridKind::kReducedGaussian);
    EXPECT_EQ(d.grid().gaussian_n, 12);
    EXPECT_NEAR(std::accumulate(d.grid().areas.begin(), d.grid().areas.end(), 0.0), 1.0, 1e-9);
    EXPECT_NE(d.grid().description.find("O12"), std::string::npos) << d.grid().description;
    for (int64_t t = 0; t < kTimes; ++t) {
      const torch::Tensor state = d.state(t);
      ASSERT_EQ(state.sizes(), (std::vector<int64_t>{kChannels, 1, kCells}));
      ASSERT_EQ((state.squeeze(1) - want[t]).abs().max().item<float>(), 0.0f) << "time " << t;
    }
  }
}

TEST_F(PointSets, NormalisationIsAreaWeighted) {
  const Dataset d(config("cells.nc"));
  const Normalization norm = Normalization::compute(d, 0, d.num_times());
  std::ifstream in(file("expected_stats.txt"));
  for (int64_t c = 0; c < kChannels; ++c) {
    double mean = 0, std = 0;
    in >> mean >> std;
    ASSERT_TRUE(in);
    EXPECT_NEAR(norm.mean()[c].item<double>(), mean, 1e-5 * std::abs(mean)) << c;
    EXPECT_NEAR(norm.std()[c].item<double>(), std, 1e-3 * std) << c;
  }
}

TEST_F(PointSets, ARegionKeepsTheCellsInsideWithTheirAreas) {
  DataConfig c = config("cells.nc");
  c.region.set = true;
  c.region.lat_min = 20, c.region.lat_max = 60, c.region.lon_min = 350, c.region.lon_max = 40;
  const Dataset full(config("cells.nc"));
  const Dataset d(c);
  EXPECT_TRUE(d.point_set());
  std::vector<int64_t> inside;
  double area = 0;
  for (int64_t k = 0; k < kCells; ++k) {
    const double lat = full.lat()[k], lon = full.lon()[k];
    if (lat >= 20 && lat <= 60 && (lon >= 350 || lon <= 40)) inside.push_back(k), area += full.grid().areas[k];
  }
  ASSERT_GT(inside.size(), 20u);
  ASSERT_EQ(d.num_lon(), static_cast<int64_t>(inside.size()));
  EXPECT_EQ(d.region_cols(), inside);
  EXPECT_NEAR(std::accumulate(d.grid().areas.begin(), d.grid().areas.end(), 0.0), area, 1e-12);
  const torch::Tensor cut = d.state(3), whole = full.state(3);
  for (size_t k = 0; k < inside.size(); ++k)
    ASSERT_EQ(cut[0][0][static_cast<int64_t>(k)].item<float>(), whole[0][0][inside[k]].item<float>());
  c.region.lat_min = 89.5, c.region.lat_max = 90;
  EXPECT_NE(data_error([&] { Dataset again(c); }).find("holds no cell"), std::string::npos);
}

TEST_F(PointSets, ComputedForcingsArePerCell) {
  DataConfig c = config("cells.nc");
  c.forcings = {"cos_latitude", "sin_longitude"};
  const Dataset d(c);
  const torch::Tensor f = d.computed_forcings(d.time_axis().seconds[0]);
  ASSERT_EQ(f.sizes(), (std::vector<int64_t>{2, 1, kCells}));
  for (int64_t k : {0L, 100L, 517L, kCells - 1}) {
    EXPECT_NEAR(f[0][0][k].item<float>(), std::cos(d.lat()[k] * M_PI / 180), 1e-6);
    EXPECT_NEAR(f[1][0][k].item<float>(), std::sin(d.lon()[k] * M_PI / 180), 1e-6);
  }
}

TEST_F(PointSets, TakeGridGivesOneRowOfCellsWithTheirCoordinates) {
  // What models::model_shape reads as a point set (tests/models: lat = 1, a latitude per cell).
  RunConfig run;
  run.data = config("cells.nc");
  const Dataset d(run.data);
  take_grid(run, d);
  EXPECT_EQ(run.data.lat, 1);
  EXPECT_EQ(run.data.lon, kCells);
  EXPECT_EQ(run.data.lat_coords, d.lat());
  EXPECT_EQ(run.data.lon_coords, d.lon());
}

// A forecast on cells is written with a `cell` dimension and lat(cell), lon(cell) coordinates:
// xarray opens it (NetCDF and Zarr), attaches the coordinates and reads the values written.
TEST_F(PointSets, ForecastsHaveACellDimensionXarrayReads) {
  const Dataset d(config("cells.nc"));
  const ForecastCoordinates c = ForecastCoordinates::after(d, 4, 2);  // valid at states 5 and 6
  EXPECT_TRUE(c.point_set);
  const torch::Tensor states = torch::stack({d.state(5), d.state(6)});
  for (const std::string name : {"forecast.nc", "forecast.zarr"}) {
    SCOPED_TRACE(name);
    write_forecast(file(name), states, c);
    const std::string check =
        "import sys, numpy as np, xarray as xr\n"
        "f = xr.open_dataset(sys.argv[1], engine='zarr' if sys.argv[1].endswith('.zarr') else None)\n"
        "s = xr.open_dataset(sys.argv[2])\n"
        "assert f.t2m.dims == ('time', 'cell'), f.t2m.dims\n"
        "assert f.z.dims == ('time', 'level', 'cell'), f.z.dims\n"
        "assert 'lat' in f.t2m.coords and 'lon' in f.t2m.coords, list(f.t2m.coords)\n"
        "assert np.abs(f.lat.values - s.latitude.values).max() < 1e-9\n"
        "assert np.abs(f.lon.values - s.longitude.values).max() < 1e-9\n"
        "assert (f.t2m.values == s.t2m.sel(time=f.time).values).all()\n"
        "assert (f.z.sel(level=850).values == s.z.sel(level=850, time=f.time).values).all()\n"
        "print('ok', f.t2m.shape)\n";
    {
      std::ofstream script(file("check_cells_forecast.py"));
      script << check;
    }
    const std::string command = kPython + " " + file("check_cells_forecast.py") + " " + file(name) + " " +
                                file("cells.nc") + " > " + file("check.log") + " 2>&1";
    const int status = std::system(command.c_str());
    std::ifstream log(file("check.log"));
    const std::string said((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_EQ(status, 0) << said;
    EXPECT_NE(said.find("ok (2, 1008)"), std::string::npos) << said;
  }
}

// anemoi-datasets' store (cells_fixture.py writes it as anemoi lays one out; anemoi's own
// open_dataset reads it: data.reference.anemoi_open_dataset): variables chosen by name, the
// missing date left out of the time axis, the values xarray read, its statistics usable.
TEST_F(PointSets, AnemoiDatasetsStoreReadsVariablesByName) {
  DataConfig c;
  const std::string store = file("anemoi.zarr");
  c.sources = {{store, "2t", "t2m", {}}, {store, "z_500", "z_500", {}}};
  c.time_step = "6h";
  const Dataset d(c);
  EXPECT_TRUE(d.point_set());
  ASSERT_EQ(d.num_lon(), kCells);
  ASSERT_EQ(d.num_times(), kTimes);  // 20 dates, one of them missing
  EXPECT_EQ(d.time_axis().label(9), "2020-01-03T12:00:00");
  EXPECT_EQ(d.grid().kind, GridKind::kReducedGaussian);
  const torch::Tensor want = expected();
  for (int64_t t = 0; t < kTimes; ++t) {
    const torch::Tensor state = d.state(t).squeeze(1);
    ASSERT_EQ((state[0] - want[t][3]).abs().max().item<float>(), 0.0f) << t;
    ASSERT_EQ((state[1] - want[t][0]).abs().max().item<float>(), 0.0f) << t;
  }
  // The store's statistics, per variable, replace the computed ones on request.
  std::ifstream in(file("anemoi_statistics.txt"));
  std::vector<double> mean(4), stdev(4);
  for (int v = 0; v < 4; ++v) in >> mean[v] >> stdev[v];
  ASSERT_TRUE(d.variables()[0].stored_mean.has_value());
  EXPECT_NEAR(*d.variables()[0].stored_mean, mean[3], 1e-6 * mean[3]);
  Normalization norm = Normalization::compute(d, 0, d.num_times());
  EXPECT_EQ(norm.take_stored_statistics(d), 2);
  EXPECT_NEAR(norm.mean()[0].item<double>(), mean[3], 1e-4);
  EXPECT_NEAR(norm.std()[1].item<double>(), stdev[0], 1e-3);

  // A name the store lacks lists the ones it has; an ensemble store is refused naming its members.
  c.sources = {{store, "msl", "msl", {}}};
  const std::string missing = data_error([&] { Dataset again(c); });
  EXPECT_NE(missing.find("z_500, z_850, t_850, 2t"), std::string::npos) << missing;
  c.sources = {{file("anemoi_ensemble.zarr"), "2t", "t2m", {}}};
  const std::string ensemble = data_error([&] { Dataset again(c); });
  EXPECT_NE(ensemble.find("anemoi_ensemble.zarr"), std::string::npos) << ensemble;
  EXPECT_NE(ensemble.find("2 ensemble members"), std::string::npos) << ensemble;
}

TEST_F(PointSets, WhatCellsCannotDoIsRefusedByName) {
  // A rectangle beside cells.
  DataConfig mixed = config("cells.nc");
  mixed.sources.push_back(storm_sources()[1]);
  const std::string grid = data_error([&] { Dataset d(mixed); });
  EXPECT_NE(grid.find("Tstorm.cdf"), std::string::npos) << grid;
  EXPECT_NE(grid.find("list of cells"), std::string::npos) << grid;
  // Static fields are regridded onto rectangles only.
  DataConfig statics = config("cells.nc");
  statics.statics.push_back({kStormDir + "Tstorm.cdf", "t", "lsm", "nearest"});
  const std::string refused = data_error([&] { Dataset d(statics); });
  EXPECT_NE(refused.find("'lsm'"), std::string::npos) << refused;
  EXPECT_NE(refused.find("1008 cells"), std::string::npos) << refused;
}

}  // namespace

// Model parallelism on a point set (Dataset::set_band): a band is a range of cells, read as one
// hyperslab of the cell dimension from NetCDF and Zarr (GRIB decodes the message and keeps the
// cells), with its cells' computed forcings.
TEST_F(PointSets, ABandIsARangeOfCellsReadAlone) {
  const torch::Tensor want = expected();
  for (const std::string store : {"cells.nc", "cells.zarr", "o12.grib2"}) {
    SCOPED_TRACE(store);
    DataConfig c = config(store);
    c.forcings = {"cos_latitude", "sin_longitude"};
    DatasetOptions lazy;
    lazy.preload_max_bytes = 0;
    const Dataset whole(c, lazy);
    for (int64_t r = 0; r < 2; ++r) {
      const auto [begin, length] = grid_band(kCells, 2, r);
      Dataset d(c, lazy);
      d.set_band(begin, length);
      const int64_t before = d.archive_bytes_read();
      for (int64_t t = 0; t < kTimes; ++t) {
        const torch::Tensor band = d.band_state(t);
        ASSERT_EQ(band.sizes(), (std::vector<int64_t>{kChannels, 1, length}));
        ASSERT_EQ((band.squeeze(1) - want[t].narrow(1, begin, length)).abs().max().item<float>(), 0.0f) << "time " << t;
      }
      // z at two levels, t at one, t2m: 4 planes of the band's cells per state, float32.
      EXPECT_EQ(d.archive_bytes_read() - before, kTimes * 4 * length * 4);
      const int64_t seconds = d.time_axis().seconds[2];
      EXPECT_TRUE(torch::allclose(d.band_computed_forcings(seconds), whole.computed_forcings(seconds).narrow(2, begin, length)));
    }
    // A band of a region's cells (across the seam): the span of the file's cells between the
    // band's first and last is read, and the region's cells kept.
    c.region.set = true;
    c.region.lat_min = -50, c.region.lat_max = 70, c.region.lon_min = 300, c.region.lon_max = 100;
    const Dataset region(c, lazy);
    const int64_t n = region.num_lon();
    ASSERT_GT(n, 200);
    for (int64_t r = 0; r < 3; ++r) {
      const auto [begin, length] = grid_band(n, 3, r);
      Dataset d(c, lazy);
      d.set_band(begin, length);
      for (const int64_t t : {0, 9, 18}) {
        const torch::Tensor band = d.band_state(t);
        ASSERT_EQ(band.sizes(), (std::vector<int64_t>{kChannels, 1, length}));
        EXPECT_TRUE(torch::equal(band, region.state(t).narrow(2, begin, length))) << "band " << r << " at " << t;
        const auto cols = torch::tensor(std::vector<int64_t>(region.region_cols().begin() + begin,
                                                             region.region_cols().begin() + begin + length));
        EXPECT_TRUE(torch::equal(band.squeeze(1), want[t].index_select(1, cols))) << "band " << r << " at " << t;
      }
    }
  }
}
