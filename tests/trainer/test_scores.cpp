// trainer/scores.h: WeatherBench-style RMSE and ACC, the day-of-year climatology, and the table,
// CSV and SVG they are reported in.
#include <gtest/gtest.h>
#include <netcdf.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "data/dataset.h"
#include "data/readers/netcdf_file.h"
#include "trainer/scores.h"

using namespace wxtrain;
using namespace wxtrain::trainer;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/wxtrain_scores_" + name + "_" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// cos-latitude weights on a 3 x 4 grid at -60, 0, 60 degrees: rows weigh 0.5, 1, 0.5.
torch::Tensor weights_3x4() {
  return torch::tensor({0.5f, 1.0f, 0.5f}).view({3, 1}).expand({3, 4}).contiguous();
}

const std::vector<std::string> kForecasters = {"model", "persistence", "climatology"};

// [B, 1, 3, 4] with a pattern that varies over the grid and between samples.
torch::Tensor pattern(int64_t B, double scale = 1.0) {
  return (torch::arange(B * 12, torch::kFloat32).view({B, 1, 3, 4}).sin() * scale + 2.0f).contiguous();
}

// A NetCDF file with one float variable x(time, lat, lon) on a 2 x 3 grid, daily states over
// 2000-01-01..2001-12-31 (731 states, 2000 a leap year) whose value is the state's day of year; at
// (lat 1, lon 2) every tenth state is a fill value. Without dates the time coordinate is left out.
std::string write_day_of_year_file(const std::string& dir, bool dates) {
  const std::string path = dir + (dates ? "/doy.nc" : "/nodates.nc");
  const size_t T = 731, lat = 2, lon = 3;
  data::NetcdfFile file = data::NetcdfFile::create(path);
  file.define_dimension("time", T);
  file.define_dimension("lat", lat);
  file.define_dimension("lon", lon);
  if (dates) {
    file.define_variable("time", NC_DOUBLE, {"time"});
    file.put_text_attribute("time", "units", "hours since 2000-01-01");
    file.put_text_attribute("time", "calendar", "standard");
  }
  file.define_variable("lat", NC_DOUBLE, {"lat"});
  file.define_variable("lon", NC_DOUBLE, {"lon"});
  file.define_variable("x", NC_FLOAT, {"time", "lat", "lon"});
  file.put_float_attribute("x", "_FillValue", -999.0f);
  file.put_text_attribute("x", "units", "1");
  file.end_define();
  if (dates) {
    std::vector<double> hours(T);
    for (size_t t = 0; t < T; ++t) hours[t] = 24.0 * static_cast<double>(t);
    file.write_doubles("time", hours);
  }
  file.write_doubles("lat", {10.0, 20.0});
  file.write_doubles("lon", {0.0, 1.0, 2.0});
  std::vector<float> values(T * lat * lon);
  for (size_t t = 0; t < T; ++t) {
    const int doy = t < 366 ? static_cast<int>(t) + 1 : static_cast<int>(t) - 365;
    for (size_t i = 0; i < lat * lon; ++i) values[t * lat * lon + i] = static_cast<float>(doy);
    if (t % 10 == 0) values[t * lat * lon + 1 * lon + 2] = -999.0f;
  }
  file.write_floats("x", {0, 0, 0}, {T, lat, lon}, values.data());
  file.close();
  return path;
}

int64_t seconds_of(const std::string& date) {
  return data::to_seconds(data::parse_date(date), data::Calendar::kStandard);
}

// The windowed mean of day-of-year values at one point, by brute force over the training states.
double brute_force_mean(int day, int window, int64_t begin, int64_t end, bool skip_fill_states) {
  double sum = 0;
  int64_t n = 0;
  for (int64_t t = begin; t < end; ++t) {
    if (skip_fill_states && t % 10 == 0) continue;
    const int doy = t < 366 ? static_cast<int>(t) + 1 : static_cast<int>(t) - 365;
    int d = std::abs(doy - day) % 366;
    d = std::min(d, 366 - d);
    if (d > window) continue;
    sum += doy;
    ++n;
  }
  return sum / static_cast<double>(n);
}

}  // namespace

TEST(Scores, PerfectForecastHasAccOneAndRmseZero) {
  ScoreAccumulator scores({"x"}, 1, kForecasters, weights_3x4());
  const torch::Tensor truth = pattern(2), clim = torch::zeros_like(truth);
  scores.add(0, 0, truth, truth, clim);
  const LeadScores s = scores.result(7, 6 * 3600);
  EXPECT_NEAR(s.acc[0][0][0], 1.0, 1e-12);
  EXPECT_EQ(s.rmse[0][0][0], 0.0);
  EXPECT_EQ(s.samples[0], 2);
  EXPECT_EQ(s.step, 7);
  ASSERT_EQ(s.lead_hours.size(), 1u);
  EXPECT_EQ(s.lead_hours[0], 6.0);
}

TEST(Scores, ClimatologyForecastHasAccZero) {
  ScoreAccumulator scores({"x"}, 1, kForecasters, weights_3x4());
  const torch::Tensor truth = pattern(2), clim = pattern(2, 0.3);
  scores.add(2, 0, clim, truth, clim);
  const LeadScores s = scores.result(0, 0);
  EXPECT_EQ(s.acc[2][0][0], 0.0);  // zero denominator: acc_t = 0 by definition
  EXPECT_GT(s.rmse[2][0][0], 0.0);
  EXPECT_TRUE(s.lead_hours.empty());
}

TEST(Scores, AntiCorrelatedForecastHasAccMinusOne) {
  ScoreAccumulator scores({"x"}, 2, kForecasters, weights_3x4());
  const torch::Tensor truth = pattern(3), clim = pattern(3, 0.3);
  const torch::Tensor anti = clim - 2.5f * (truth - clim);  // the anomaly reversed and scaled
  scores.add(0, 1, anti, truth, clim);
  const LeadScores s = scores.result(0, 0);
  EXPECT_NEAR(s.acc[0][1][0], -1.0, 1e-6);
  EXPECT_TRUE(std::isnan(s.acc[0][0][0]));  // lead 0 never scored
  EXPECT_EQ(s.samples[0], 0);
  EXPECT_EQ(s.samples[1], 3);
}

// Per sample the weighted spatial mean of squared error, then the mean over samples, then the
// root. Sample 0: error 1, 2, 3 by latitude row over the whole grid -> (0.5*1 + 1*4 + 0.5*9) * 4
// / 8 = 4.5. Sample 1: error 1 everywhere, but only the equator row verified -> 1. RMSE =
// sqrt((4.5 + 1) / 2). Pooling both samples' points would give (36 + 4) / (8 + 4) = 10/3 instead.
TEST(Scores, RmseIsPerSampleThenMeanWithLatitudeWeights) {
  ScoreAccumulator scores({"x"}, 1, kForecasters, weights_3x4());
  torch::Tensor truth = torch::zeros({2, 1, 3, 4});
  torch::Tensor forecast = torch::zeros({2, 1, 3, 4});
  forecast[0][0] = torch::tensor({1.0f, 2.0f, 3.0f}).view({3, 1}).expand({3, 4});
  forecast[1][0] = torch::ones({3, 4});
  torch::Tensor mask = torch::ones({2, 1, 3, 4});
  mask[1][0][0] = 0;
  mask[1][0][2] = 0;
  scores.add(0, 0, forecast, truth, torch::zeros_like(truth), mask);
  const LeadScores s = scores.result(0, 0);
  EXPECT_NEAR(s.rmse[0][0][0], std::sqrt((4.5 + 1.0) / 2.0), 1e-12);
  EXPECT_GT(std::abs(s.rmse[0][0][0] - std::sqrt(10.0 / 3.0)), 1e-3);
}

TEST(Scores, MaskedAndFillPointsDoNotContribute) {
  const torch::Tensor truth = pattern(2), clim = pattern(2, 0.3);
  const torch::Tensor forecast = truth + 0.5f * (truth - clim) + 0.1f;
  ScoreAccumulator plain({"x"}, 1, kForecasters, weights_3x4());
  // Two samples, V=1, so the last sample's point (2, 3) is masked, and there the forecast is
  // wild and the truth a fill value.
  torch::Tensor mask = torch::ones({2, 1, 3, 4});
  mask[1][0][2][3] = 0;
  torch::Tensor wild = forecast.clone(), filled = truth.clone();
  wild[1][0][2][3] = 1e6f;
  filled[1][0][2][3] = std::numeric_limits<float>::quiet_NaN();
  ScoreAccumulator masked({"x"}, 1, kForecasters, weights_3x4());
  masked.add(0, 0, wild, filled, clim, mask);
  // The reference: the same point given zero weight for that sample only, by scoring the samples
  // separately with weights that leave it out.
  torch::Tensor w = weights_3x4().clone();
  plain.add(0, 0, forecast.slice(0, 0, 1), truth.slice(0, 0, 1), clim.slice(0, 0, 1));
  const LeadScores first = plain.result(0, 0);
  w[2][3] = 0;
  ScoreAccumulator second({"x"}, 1, kForecasters, w);
  second.add(0, 0, forecast.slice(0, 1, 2), truth.slice(0, 1, 2), clim.slice(0, 1, 2));
  const LeadScores b = second.result(0, 0);
  const LeadScores m = masked.result(0, 0);
  const double expected_rmse =
      std::sqrt((first.rmse[0][0][0] * first.rmse[0][0][0] + b.rmse[0][0][0] * b.rmse[0][0][0]) / 2);
  EXPECT_NEAR(m.rmse[0][0][0], expected_rmse, 1e-9);
  EXPECT_NEAR(m.acc[0][0][0], (first.acc[0][0][0] + b.acc[0][0][0]) / 2, 1e-9);
}

TEST(Scores, NanForecastAtAVerifiedPointShows) {
  ScoreAccumulator scores({"x"}, 1, kForecasters, weights_3x4());
  const torch::Tensor truth = pattern(1);
  torch::Tensor forecast = truth.clone();
  forecast[0][0][1][1] = std::numeric_limits<float>::quiet_NaN();
  scores.add(0, 0, forecast, truth, torch::zeros_like(truth));
  const LeadScores s = scores.result(0, 0);
  EXPECT_TRUE(std::isnan(s.rmse[0][0][0]));
  EXPECT_TRUE(std::isnan(s.acc[0][0][0]));
}

TEST(Scores, SumsRoundTripAsAnAllreduceWould) {
  const torch::Tensor truth = pattern(4), clim = pattern(4, 0.3), forecast = truth * 1.1f;
  ScoreAccumulator whole({"x"}, 1, kForecasters, weights_3x4());
  whole.add(0, 0, forecast, truth, clim);
  ScoreAccumulator rank0({"x"}, 1, kForecasters, weights_3x4()), rank1({"x"}, 1, kForecasters, weights_3x4());
  rank0.add(0, 0, forecast.slice(0, 0, 1), truth.slice(0, 0, 1), clim.slice(0, 0, 1));
  rank1.add(0, 0, forecast.slice(0, 1, 4), truth.slice(0, 1, 4), clim.slice(0, 1, 4));
  rank0.set_sums(rank0.sums() + rank1.sums());
  EXPECT_NEAR(rank0.result(0, 0).rmse[0][0][0], whole.result(0, 0).rmse[0][0][0], 1e-12);
  EXPECT_NEAR(rank0.result(0, 0).acc[0][0][0], whole.result(0, 0).acc[0][0][0], 1e-12);
  EXPECT_THROW(rank0.set_sums(torch::zeros({1, 1, 1, 3}, torch::kFloat64)), Error);
  EXPECT_THROW(rank0.add(0, 0, forecast, truth.slice(3, 0, 2), clim), Error);
  EXPECT_THROW(rank0.add(3, 0, forecast, truth, clim), Error);
  EXPECT_THROW(rank0.add(0, 1, forecast, truth, clim), Error);
}

TEST(Climatology, DayOfYearWithWindowZeroIsTheDayOfYear) {
  const std::string dir = fresh_dir("clim0");
  data::Dataset dataset({{write_day_of_year_file(dir, true), "x", "x"}});
  ASSERT_TRUE(dataset.time_axis().has_dates);
  const std::vector<int64_t> valid = {seconds_of("2001-03-01"), seconds_of("2001-12-31"), seconds_of("2000-12-31"),
                                      seconds_of("2001-07-04T12:00")};
  const Climatology c = Climatology::compute(dataset, 0, dataset.num_times(), valid, 0);
  EXPECT_EQ(c.days_needed(), 4);  // 60, 365, 366, 185
  EXPECT_EQ(c.fallback_days(), 0);
  EXPECT_EQ(c.at(seconds_of("2001-03-01")).sizes(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(torch::all(c.at(seconds_of("2001-03-01")) == 60).item<bool>());
  EXPECT_TRUE(torch::all(c.at(seconds_of("2001-12-31")) == 365).item<bool>());
  EXPECT_TRUE(torch::all(c.at(seconds_of("2000-12-31")) == 366).item<bool>());
  EXPECT_TRUE(torch::all(c.at(seconds_of("2001-07-04")) == 185).item<bool>());
  EXPECT_THROW(c.at(seconds_of("2001-01-01")), Error);  // not among the valid times
  EXPECT_EQ(c.describe(), "climatology: day of year ±0 days over 2000-01-01..2001-12-31 (731 states), 4 days needed");
}

TEST(Climatology, WindowIsCircularAndSkipsFill) {
  const std::string dir = fresh_dir("clim3");
  data::Dataset dataset({{write_day_of_year_file(dir, true), "x", "x"}});
  const int64_t end = 700;  // training ends 2001-11-30
  const std::vector<int64_t> valid = {seconds_of("2002-01-02"), seconds_of("2001-06-15")};
  const Climatology c = Climatology::compute(dataset, 0, end, valid, 3);
  for (const auto& [date, day] : std::vector<std::pair<std::string, int>>{{"2002-01-02", 2}, {"2001-06-15", 166}}) {
    const torch::Tensor m = c.at(seconds_of(date));
    EXPECT_NEAR(m[0][0][0].item<float>(), brute_force_mean(day, 3, 0, end, false), 1e-4) << date;
    EXPECT_NEAR(m[0][1][2].item<float>(), brute_force_mean(day, 3, 0, end, true), 1e-4) << date;  // fill skipped
  }
  // Around New Year the window wraps: day 2 +-3 takes days 365, 366 (2000 only: training ends
  // before December 2001) and 1..5 of both years.
  EXPECT_NEAR(c.at(seconds_of("2002-01-02"))[0][0][0].item<float>(), (365 + 366 + 2 * 15) / 12.0, 1e-4);
}

TEST(Climatology, DaysWithoutTrainingStatesFallBackToTheMean) {
  const std::string dir = fresh_dir("climfb");
  data::Dataset dataset({{write_day_of_year_file(dir, true), "x", "x"}});
  const std::vector<int64_t> valid = {seconds_of("2001-01-10"), seconds_of("2001-07-01")};
  const Climatology c = Climatology::compute(dataset, 0, 31, valid, 5);  // January 2000 only
  EXPECT_EQ(c.fallback_days(), 1);
  EXPECT_TRUE(torch::equal(c.at(seconds_of("2001-07-01")), c.mean()));
  EXPECT_NEAR(c.mean()[0][0][0].item<float>(), 16.0, 1e-5);  // mean of 1..31
  EXPECT_NEAR(c.at(seconds_of("2001-01-10"))[0][0][0].item<float>(), 10.0, 1e-5);
  EXPECT_NE(c.describe().find("1 of them from the all-time mean"), std::string::npos) << c.describe();
}

TEST(Climatology, WithoutDatesIsTheTrainingMean) {
  const std::string dir = fresh_dir("climnd");
  data::Dataset dataset({{write_day_of_year_file(dir, false), "x", "x"}});
  ASSERT_FALSE(dataset.time_axis().has_dates);
  const Climatology c = Climatology::compute(dataset, 0, 10, {}, 15);
  EXPECT_FALSE(c.has_dates());
  EXPECT_NEAR(c.at(123456)[0][0][0].item<float>(), 5.5, 1e-5);  // mean of days 1..10
  EXPECT_TRUE(torch::equal(c.at(0), c.mean()));
  // The point with fills: state 0 is a fill, so the mean of days 2..10.
  EXPECT_NEAR(c.mean()[0][1][2].item<float>(), 6.0, 1e-5);
  EXPECT_EQ(c.describe(), "climatology: mean of the 10 training states (no dates)");
  EXPECT_THROW(Climatology::compute(dataset, 5, 5, {}), Error);
}

namespace {

LeadScores example_scores(int64_t leads, int64_t lead_seconds) {
  const std::vector<std::string> names = {"z_500", "t_850"};
  ScoreAccumulator scores(names, leads, kForecasters, weights_3x4(), {"m2 s-2", "K"});
  const torch::Tensor truth = torch::cat({pattern(2), pattern(2, 2.0)}, 1), clim = truth * 0.9f;
  for (int64_t l = 0; l < leads; ++l) {
    const float spread = 0.1f * static_cast<float>(l + 1);
    scores.add(0, l, truth + spread * torch::cos(truth), truth, clim);
    scores.add(1, l, truth + 2 * spread, truth, clim);
    scores.add(2, l, clim, truth, clim);
  }
  return scores.result(100, lead_seconds);
}

}  // namespace

TEST(ScoresOutput, CsvHasOneHeaderAndARowPerLeadChannelForecaster) {
  const std::string dir = fresh_dir("csv");
  const std::string path = dir + "/scores.csv";
  const LeadScores s = example_scores(4, 6 * 3600);
  write_scores_csv(path, s, false);
  std::string text = read_text(path);
  EXPECT_EQ(text.rfind("step,lead,lead_hours,variable,forecaster,rmse,acc,mae\n", 0), 0u) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1 + 4 * 2 * 3);
  EXPECT_NE(text.find("\n100,2,12,t_850,persistence,"), std::string::npos) << text;
  write_scores_csv(path, s, true);
  text = read_text(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1 + 2 * 4 * 2 * 3);
  EXPECT_EQ(text.find("step,lead", 1), std::string::npos);  // one header
  write_scores_csv(path, s, false);  // not appending: the file starts afresh
  text = read_text(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1 + 4 * 2 * 3);
  std::ofstream(dir + "/other.csv") << "step,loss\n1,2\n";
  EXPECT_THROW(write_scores_csv(dir + "/other.csv", s, true), Error);
}

// A deterministic file's mae column: every forecaster's mean absolute error, per sample with the
// latitude weights and the mask, then the mean over samples (as an ensemble's CRPS), so an MSE
// model's CRPS (its MAE) compares with an ensemble's. A file from before the column (header ending
// at acc) is appended to in its own columns.
TEST(ScoresOutput, DeterministicCsvHasTheLatitudeWeightedMae) {
  ScoreAccumulator scores({"x"}, 1, kForecasters, weights_3x4());
  const torch::Tensor truth = torch::zeros({2, 1, 3, 4});
  torch::Tensor forecast = torch::zeros({2, 1, 3, 4});
  forecast[0][0] = torch::tensor({-1.0f, 2.0f, -3.0f}).view({3, 1}).expand({3, 4});
  forecast[1][0] = torch::ones({3, 4});
  torch::Tensor mask = torch::ones({2, 1, 3, 4});
  mask[1][0][0] = 0;
  mask[1][0][2] = 0;
  scores.add(0, 0, forecast, truth, torch::zeros_like(truth), mask);
  scores.add(1, 0, forecast * 2, truth, torch::zeros_like(truth), mask);
  scores.add(2, 0, torch::zeros_like(truth), truth, torch::zeros_like(truth), mask);
  const LeadScores s = scores.result(7, 0);
  // Sample 0: (0.5 * 1 + 1 * 2 + 0.5 * 3) / 2 = 2; sample 1 (middle row only): 1; mean 1.5.
  EXPECT_NEAR(s.crps[0][0][0], 1.5, 1e-12);
  EXPECT_NEAR(s.crps[1][0][0], 3.0, 1e-12);
  const std::string dir = fresh_dir("mae");
  const std::string path = dir + "/scores.csv";
  write_scores_csv(path, s, false);
  std::string text = read_text(path);
  EXPECT_EQ(text.rfind("step,lead,lead_hours,variable,forecaster,rmse,acc,mae\n", 0), 0u) << text;
  EXPECT_NE(text.find("\n7,1,,x,model,"), std::string::npos) << text;
  EXPECT_NE(text.find(",1.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n7,1,,x,persistence,"), std::string::npos) << text;
  EXPECT_NE(text.find(",3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n7,1,,x,climatology,0,0,0\n"), std::string::npos) << text;
  // An older file (no mae column): the resumed run appends rows of its columns, one header.
  const std::string old_path = dir + "/old.csv";
  std::ofstream(old_path) << "step,lead,lead_hours,variable,forecaster,rmse,acc\n1,1,,x,model,2,0.5\n";
  write_scores_csv(old_path, s, true);
  text = read_text(old_path);
  EXPECT_EQ(text.rfind("step,lead,lead_hours,variable,forecaster,rmse,acc\n1,1,,x,model,2,0.5\n", 0), 0u) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2 + 3);
  EXPECT_NE(text.find("\n7,1,,x,climatology,0,0\n"), std::string::npos) << text;
  EXPECT_EQ(text.find(",1.5\n"), std::string::npos) << text;
}

TEST(ScoresOutput, TableShowsEveryLeadOrASampleOfLongLists) {
  const std::string short_table = scores_table(example_scores(3, 6 * 3600));
  EXPECT_NE(short_table.find("z_500 [m2 s-2]"), std::string::npos) << short_table;
  EXPECT_NE(short_table.find("persistence ACC"), std::string::npos) << short_table;
  EXPECT_NE(short_table.find("climatology RMSE"), std::string::npos) << short_table;
  EXPECT_EQ(short_table.find("climatology ACC"), std::string::npos) << short_table;
  EXPECT_NE(short_table.find("18h"), std::string::npos) << short_table;
  const std::string long_table = scores_table(example_scores(40, 6 * 3600));
  EXPECT_NE(long_table.find("    6h"), std::string::npos) << long_table;
  EXPECT_NE(long_table.find("240h"), std::string::npos) << long_table;
  EXPECT_NE(long_table.find("..."), std::string::npos) << long_table;
  EXPECT_EQ(long_table.find(" 12h "), std::string::npos) << long_table;  // lead 2 is skipped
  // 2 channels x (name + header + 6 leads + 5 gaps) + the title line.
  EXPECT_EQ(std::count(long_table.begin(), long_table.end(), '\n'), 1 + 2 * (2 + 6 + 5)) << long_table;
}

TEST(ScoresOutput, SvgIsValidXmlWithAPolylinePerForecasterPerPanel) {
  const std::string dir = fresh_dir("svg");
  for (int64_t leads : {1, 5}) {
    const LeadScores s = example_scores(leads, leads == 1 ? 0 : 6 * 3600);
    const std::string svg = scores_svg(s, "validation <step 100> & more");
    size_t polylines = 0;
    for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++polylines;
    EXPECT_EQ(polylines, 3u * 2 * 2);  // forecasters x channels x (RMSE, ACC)
    EXPECT_NE(svg.find("z_500 RMSE [m2 s-2]"), std::string::npos);
    EXPECT_NE(svg.find("t_850 ACC"), std::string::npos);
    EXPECT_NE(svg.find(leads == 1 ? "lead (steps)" : "lead (hours)"), std::string::npos);
    const std::string path = dir + "/scores" + std::to_string(leads) + ".svg";
    std::ofstream(path) << svg;
    const std::string command = "/usr/bin/python3 -c \"import sys, xml.etree.ElementTree as E; "
                                "r = E.parse(sys.argv[1]).getroot(); "
                                "assert r.tag == '{http://www.w3.org/2000/svg}svg', r.tag\" " + path;
    EXPECT_EQ(std::system(command.c_str()), 0) << path;
  }
}

// Model parallelism (ScoreAccumulator::score_bands, docs/distributed.md "Validation"): two bands of
// a 5 x 4 grid, each scored by its own accumulator whose per-sample sums are summed over the
// "group" (here: the other band's, handed over in order), give the scores of one accumulator on
// the whole grid: RMSE, ACC, CRPS, spread and the rank histogram, with a mask and a NaN truth. The
// second band records no sample, so a sum over the group's accumulators counts each sample once.
TEST(Scores, BandsSummedOverTheGroupScoreLikeTheWholeGrid) {
  torch::manual_seed(11);
  const int64_t B = 3, M = 4, V = 2, H = 5, W = 4, rows0 = 3;
  const torch::Tensor weights = torch::rand({H, W}) + 0.5;
  const torch::Tensor members = torch::randn({B, M, V, H, W}), forecast = torch::randn({B, V, H, W});
  torch::Tensor truth = torch::randn({B, V, H, W});
  truth[1][0][4][2] = std::numeric_limits<float>::quiet_NaN();
  const torch::Tensor clim = torch::randn({B, V, H, W}) * 0.1;
  torch::Tensor mask = torch::ones({B, V, H, W});
  mask[0][1][0].zero_();  // a masked row in band 0
  mask[2][0][3].zero_();  // and in band 1
  auto fill = [&](ScoreAccumulator& s, int64_t begin, int64_t length) {
    auto cut = [&](const torch::Tensor& t) { return t.narrow(-2, begin, length); };
    for (int64_t l = 0; l < 2; ++l) {
      s.add_ensemble(0, l, cut(members) * (1 + l), cut(truth), cut(clim), cut(mask));
      s.add(1, l, cut(forecast), cut(truth), cut(clim), cut(mask));
    }
  };
  ScoreAccumulator whole({"a", "b"}, 2, {"model", "persistence"}, weights);
  fill(whole, 0, H);
  // Band 1 runs first and keeps its partial sums; band 0 then adds them to its own (the group's
  // allreduce, in the order both ranks call add()).
  std::vector<torch::Tensor> handed;
  ScoreAccumulator band1({"a", "b"}, 2, {"model", "persistence"}, weights.narrow(0, rows0, H - rows0));
  band1.score_bands([&](torch::Tensor& partial) { handed.push_back(partial.clone()); }, false);
  fill(band1, rows0, H - rows0);
  size_t next = 0;
  ScoreAccumulator band0({"a", "b"}, 2, {"model", "persistence"}, weights.narrow(0, 0, rows0));
  band0.score_bands([&](torch::Tensor& partial) { partial = partial + handed.at(next++); }, true);
  fill(band0, 0, rows0);
  EXPECT_EQ(next, handed.size());
  ScoreAccumulator group({"a", "b"}, 2, {"model", "persistence"}, weights.narrow(0, 0, rows0));
  group.expect_ensemble(0, M);
  group.set_sums(band0.sums() + band1.sums());  // the world's allreduce of the two ranks' sums
  const LeadScores a = whole.result(0, 0), b = group.result(0, 0);
  ASSERT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.samples[0], B);
  for (size_t f = 0; f < 2; ++f)
    for (size_t l = 0; l < 2; ++l)
      for (size_t v = 0; v < 2; ++v) {
        EXPECT_NEAR(a.rmse[f][l][v], b.rmse[f][l][v], 1e-12) << f << l << v;
        EXPECT_NEAR(a.acc[f][l][v], b.acc[f][l][v], 1e-12) << f << l << v;
        EXPECT_NEAR(a.crps[f][l][v], b.crps[f][l][v], 1e-12) << f << l << v;
        if (f == 0) {
          EXPECT_NEAR(a.spread[f][l][v], b.spread[f][l][v], 1e-12) << l << v;
          ASSERT_EQ(a.ranks[f][l][v].size(), static_cast<size_t>(M + 1));
          for (int64_t r = 0; r <= M; ++r) EXPECT_NEAR(a.ranks[f][l][v][r], b.ranks[f][l][v][r], 1e-9) << l << v << r;
        }
      }
  // A band alone is not the whole grid: its RMSE differs (so the sums above did the work).
  ScoreAccumulator alone({"a", "b"}, 2, {"model", "persistence"}, weights.narrow(0, 0, rows0));
  fill(alone, 0, rows0);
  EXPECT_GT(std::abs(alone.result(0, 0).rmse[1][0][0] - a.rmse[1][0][0]), 1e-3);
}
