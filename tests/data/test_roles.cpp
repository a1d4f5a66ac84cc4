// What a sample holds when variables have roles (prognostic, forcing, diagnostic), when static
// fields and computed forcings are inputs, and when a region is cut out of a global grid: checked
// against values computed here independently (from the file's own numbers and data/forcings.h).
#include <gtest/gtest.h>
#include <netcdf.h>

#include <cmath>

#include "core/config.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/forcings.h"
#include "data/normalization.h"
#include "data/readers/netcdf_file.h"
#include "data/samples.h"
#include "storm_fixture.h"

using namespace wxtrain;
using namespace wxtrain::data;
using namespace wxtrain::data::testing;

namespace {

// A global field on lat -30..30 (step 10) x lon `lon0`, lon0 + 10, ... (36 points), six-hourly
// from 2000-01-01 with CF time units; value(t, i, j) = offset + 10000 t + 100 i + j, so every
// value says where it came from.
void write_global_file(const std::string& path, const std::string& variable, size_t times, double lon0,
                       float offset) {
  NetcdfFile file = NetcdfFile::create(path);
  file.define_dimension("time", 0);
  file.define_dimension("lat", 7);
  file.define_dimension("lon", 36);
  file.define_variable("time", NC_DOUBLE, {"time"});
  file.put_text_attribute("time", "units", "hours since 2000-01-01 00:00:00");
  file.define_variable("lat", NC_DOUBLE, {"lat"});
  file.put_text_attribute("lat", "units", "degrees_north");
  file.define_variable("lon", NC_DOUBLE, {"lon"});
  file.put_text_attribute("lon", "units", "degrees_east");
  file.define_variable(variable, NC_FLOAT, {"time", "lat", "lon"});
  file.end_define();
  std::vector<double> hours(times), lats(7), lons(36);
  for (size_t t = 0; t < times; ++t) hours[t] = 6.0 * static_cast<double>(t);
  for (size_t i = 0; i < 7; ++i) lats[i] = -30.0 + 10.0 * static_cast<double>(i);
  for (size_t j = 0; j < 36; ++j) lons[j] = lon0 + 10.0 * static_cast<double>(j);
  file.write_doubles("time", hours);
  file.write_doubles("lat", lats);
  file.write_doubles("lon", lons);
  std::vector<float> values(times * 7 * 36);
  for (size_t t = 0; t < times; ++t)
    for (size_t i = 0; i < 7; ++i)
      for (size_t j = 0; j < 36; ++j)
        values[(t * 7 + i) * 36 + j] = offset + 10000.0f * static_cast<float>(t) + 100.0f * static_cast<float>(i) +
                                       static_cast<float>(j);
  file.write_floats(variable, {0, 0, 0}, {times, 7, 36}, values.data());
  file.close();
}

// A static 2-D field on the same grid: orography(i, j) = 7 i + j.
void write_static_file(const std::string& path) {
  NetcdfFile file = NetcdfFile::create(path);
  file.define_dimension("lat", 7);
  file.define_dimension("lon", 36);
  file.define_variable("lat", NC_DOUBLE, {"lat"});
  file.define_variable("lon", NC_DOUBLE, {"lon"});
  file.define_variable("orography", NC_FLOAT, {"lat", "lon"});
  file.end_define();
  std::vector<double> lats(7), lons(36);
  for (size_t i = 0; i < 7; ++i) lats[i] = -30.0 + 10.0 * static_cast<double>(i);
  for (size_t j = 0; j < 36; ++j) lons[j] = 10.0 * static_cast<double>(j);
  file.write_doubles("lat", lats);
  file.write_doubles("lon", lons);
  std::vector<float> values(7 * 36);
  for (size_t i = 0; i < 7; ++i)
    for (size_t j = 0; j < 36; ++j) values[i * 36 + j] = static_cast<float>(7 * i + j);
  file.write_floats("orography", {0, 0}, {7, 36}, values.data());
  file.close();
}

DataConfig three_roles(const TempDir& dir) {
  write_global_file(dir.file("a.nc"), "a", 12, 0.0, 0.0f);
  write_global_file(dir.file("b.nc"), "b", 12, 0.0, 5.0f);
  write_global_file(dir.file("c.nc"), "c", 12, 0.0, 7.0f);
  write_static_file(dir.file("static.nc"));
  DataConfig config;
  config.sources = {{dir.file("a.nc"), "a", "a"},
                    {dir.file("b.nc"), "b", "b", {}, "forcing"},
                    {dir.file("c.nc"), "c", "c", {}, "diagnostic"}};
  config.statics = {{dir.file("static.nc"), "orography", "orog", "none"}};
  config.forcings = {"insolation", "cos_day_of_year"};
  return config;
}

}  // namespace

TEST(Region, CrossingLongitudeZeroEqualsTheHandBuiltCut) {
  TempDir dir;
  write_global_file(dir.file("global.nc"), "z", 3, 0.0, 0.0f);
  // The same region written two ways: west > east on 0..360, and -20..20.
  for (const auto& [west, east] : {std::pair<double, double>{340, 20}, {-20, 20}}) {
    DataConfig config;
    config.sources = {{dir.file("global.nc"), "z", "z"}};
    config.region = {true, -10, 20, west, east};
    Dataset dataset(config);
    ASSERT_EQ(dataset.num_lat(), 4);
    ASSERT_EQ(dataset.num_lon(), 5);
    EXPECT_EQ(dataset.lat(), (std::vector<double>{-10, 0, 10, 20}));
    EXPECT_EQ(dataset.lon(), (std::vector<double>{340, 350, 0, 10, 20})) << "west to east across the seam";
    // By hand: rows 2..5 (lat -10..20), columns 34, 35, 0, 1, 2.
    const std::vector<int> rows = {2, 3, 4, 5}, cols = {34, 35, 0, 1, 2};
    for (int64_t t = 0; t < 3; ++t) {
      const torch::Tensor state = dataset.state(t);
      for (size_t i = 0; i < rows.size(); ++i)
        for (size_t j = 0; j < cols.size(); ++j)
          EXPECT_FLOAT_EQ(state[0][static_cast<int64_t>(i)][static_cast<int64_t>(j)].item<float>(),
                          10000.0f * t + 100.0f * rows[i] + cols[j])
              << "t " << t << " row " << i << " column " << j;
    }
  }
}

TEST(Region, AppliesToSourcesOnTheOtherLongitudeConventionAndToStaticFields) {
  TempDir dir;
  write_global_file(dir.file("a.nc"), "a", 3, 0.0, 0.0f);
  write_global_file(dir.file("b.nc"), "b", 3, -180.0, 0.0f);  // -180..170: the same grid rolled
  write_static_file(dir.file("static.nc"));
  DataConfig config;
  config.sources = {{dir.file("a.nc"), "a", "a"}, {dir.file("b.nc"), "b", "b"}};
  config.statics = {{dir.file("static.nc"), "orography", "orog", "none"}};
  config.region = {true, 0, 10, 350, 10};
  Dataset dataset(config);
  ASSERT_EQ(dataset.lon(), (std::vector<double>{350, 0, 10}));
  const torch::Tensor state = dataset.state(1);
  // b's column for lon 350 is index 17 of its own -180.. axis (-10); for lon 0, index 18.
  EXPECT_FLOAT_EQ(state[1][0][0].item<float>(), 10000.0f + 100.0f * 3 + 17);
  EXPECT_FLOAT_EQ(state[1][1][1].item<float>(), 10000.0f + 100.0f * 4 + 18);
  const torch::Tensor orog = dataset.static_fields();
  ASSERT_EQ(orog.sizes(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_FLOAT_EQ(orog[0][0][0].item<float>(), 7.0f * 3 + 35);
  EXPECT_FLOAT_EQ(orog[0][1][2].item<float>(), 7.0f * 4 + 1);
}

TEST(Region, ThatHoldsNoPointOrNoInteriorIsRefused) {
  TempDir dir;
  write_global_file(dir.file("global.nc"), "z", 3, 0.0, 0.0f);
  DataConfig config;
  config.sources = {{dir.file("global.nc"), "z", "z"}};
  config.region = {true, 31, 40, 0, 10};
  try {
    Dataset dataset(config);
    FAIL() << "a region north of the grid was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("holds no grid point"), std::string::npos) << e.what();
  }
  config.region = {true, 0, 10, 0, 20};
  config.boundary = 1;  // 2 x 3 points: a one-cell frame leaves nothing inside
  try {
    Dataset dataset(config);
    FAIL() << "a boundary wider than the region was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("data.boundary = 1 leaves no interior"), std::string::npos) << e.what();
  }
}

TEST(Roles, SampleTakesPrognosticInputsForcingsAtEachStepsValidTimeAndPredictsPrognosticAndDiagnostic) {
  TempDir dir;
  const DataConfig config = three_roles(dir);
  Dataset dataset(config);
  EXPECT_EQ(dataset.channel_indices("prognostic"), (std::vector<int64_t>{0}));
  EXPECT_EQ(dataset.channel_indices("forcing"), (std::vector<int64_t>{1}));
  EXPECT_EQ(dataset.channel_indices("diagnostic"), (std::vector<int64_t>{2}));
  const Normalization norm = Normalization::compute(dataset, 0, 8);
  EXPECT_EQ(norm.names(), (std::vector<std::string>{"a", "b", "c", "orog", "insolation", "cos_day_of_year"}));

  const SampleWindow window{2, 3};
  const int64_t t = 4;
  const Sample sample = make_sample(dataset, norm, window, t);
  ASSERT_EQ(sample.input.sizes(), (std::vector<int64_t>{2, 7, 36})) << "only the prognostic a, twice";
  ASSERT_EQ(sample.target.sizes(), (std::vector<int64_t>{3, 2, 7, 36})) << "a and c, never the forcing b";
  ASSERT_EQ(sample.forcings.sizes(), (std::vector<int64_t>{3, 4, 7, 36})) << "b, insolation, cos_day_of_year, orog";

  auto normalized = [&](const std::string& name, const torch::Tensor& raw) {
    const Normalization one = norm.subset({name});
    return (raw - one.mean()[0]) / one.std()[0];
  };
  const TimeAxis& axis = dataset.time_axis();
  // The inputs: a at t-1 and t.
  EXPECT_TRUE(torch::allclose(sample.input[0], normalized("a", dataset.state(t - 1)[0]), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(sample.input[1], normalized("a", dataset.state(t)[0]), 1e-5, 1e-5));
  for (int64_t k = 0; k < 3; ++k) {
    const int64_t valid = t + 1 + k;
    // Targets: a and the diagnostic c at the step's valid time.
    EXPECT_TRUE(torch::allclose(sample.target[k][0], normalized("a", dataset.state(valid)[0]), 1e-5, 1e-5));
    EXPECT_TRUE(torch::allclose(sample.target[k][1], normalized("c", dataset.state(valid)[2]), 1e-5, 1e-5));
    // Forcings of the step's own valid time: b from the file, insolation and day of year computed
    // for that time (not for t, not for the previous step).
    EXPECT_TRUE(torch::allclose(sample.forcings[k][0], normalized("b", dataset.state(valid)[1]), 1e-5, 1e-5));
    const int64_t seconds = axis.seconds[static_cast<size_t>(valid)];
    EXPECT_EQ(seconds, 6 * 3600 * valid + 946684800) << "2000-01-01 + 6 h steps";
    const torch::Tensor insolation = compute_forcing("insolation", dataset.lat(), dataset.lon(), seconds, axis.calendar);
    EXPECT_TRUE(torch::allclose(sample.forcings[k][1], normalized("insolation", insolation), 1e-4, 1e-4)) << "step " << k;
    const torch::Tensor earlier =
        compute_forcing("insolation", dataset.lat(), dataset.lon(), seconds - 6 * 3600, axis.calendar);
    EXPECT_FALSE(torch::allclose(sample.forcings[k][1], normalized("insolation", earlier), 1e-3, 1e-3))
        << "the sun moves in six hours: a forcing of the wrong time would not pass the check above";
    const torch::Tensor doy = compute_forcing("cos_day_of_year", dataset.lat(), dataset.lon(), seconds, axis.calendar);
    EXPECT_TRUE(torch::allclose(sample.forcings[k][2], normalized("cos_day_of_year", doy), 1e-4, 1e-4));
    EXPECT_TRUE(torch::allclose(sample.forcings[k][3], normalized("orog", dataset.static_fields()[0]), 1e-5, 1e-5));
  }
}

TEST(Roles, DifferenceStatisticsAreThoseOfOneStepChangesInTheTrainingSplit) {
  TempDir dir;
  const DataConfig config = three_roles(dir);
  Dataset dataset(config);
  const Normalization norm = Normalization::compute(dataset, 0, 8);
  ASSERT_TRUE(norm.diff_std().defined());
  // a(t+1) - a(t) = 10000 everywhere: the differences do not spread (std 1 by convention), while
  // the states spread over 10000 per step.
  EXPECT_FLOAT_EQ(norm.diff_std()[0].item<float>(), 1.0f);
  EXPECT_GT(norm.std()[0].item<float>(), 20000.0f);
  EXPECT_TRUE(std::isnan(norm.diff_std()[3].item<float>())) << "a static field has no tendency";
  const Normalization back = Normalization::from_map(norm.to_map());
  EXPECT_TRUE(torch::allclose(back.diff_std().nan_to_num(-1), norm.diff_std().nan_to_num(-1)));
}

TEST(Roles, TimeOriginDatesTheStormFilesSoTimeForcingsWork) {
  DataConfig config;
  config.sources = storm_sources();
  config.forcings = {"cos_local_time"};
  try {
    Dataset undated(config);
    FAIL() << "a time forcing on undated data was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("data.time_origin"), std::string::npos) << e.what();
  }
  config.time_origin = "1996-01-05T00:00";
  config.time_step = "6h";
  Dataset dataset(config);
  const TimeAxis& axis = dataset.time_axis();
  ASSERT_TRUE(axis.has_dates);
  EXPECT_EQ(axis.label(0), "1996-01-05T00:00:00");
  EXPECT_EQ(axis.label(63), "1996-01-20T18:00:00");
  // 18:00 UTC at lon -140 is 08:40 local mean time.
  const torch::Tensor f = dataset.computed_forcings(axis.seconds[3]);
  EXPECT_NEAR(f[0][0][0].item<float>(), std::cos(2 * M_PI * (18.0 - 140.0 / 15.0) / 24.0), 1e-5);
}
