// The GRIB reader on files ecCodes writes (tests/readers/grib_fixtures.h): the layout it builds
// from the messages (variables, dimensions, coordinates, valid times), values element for element,
// and the errors a user meets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <thread>

#include "core/error.h"
#include "data/readers/grib/grib_reader.h"
#include "data/readers/reader.h"
#include "tests/readers/grib_fixtures.h"

using namespace wxtrain;
using namespace wxtrain::data;
namespace fixtures = wxtrain::test::grib;
using fixtures::Era5Like;

namespace {

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() / ("wxtrain_grib_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

// Written once for the suite: 25 x (4 + 1 + 1) - 1 messages.
const std::string& era5_like_path() {
  static TempDir directory;
  static const std::string path = [] {
    const std::string p = directory.file("era5_like.grib2");
    fixtures::write_file(p, Era5Like::bytes());
    return p;
  }();
  return path;
}

// Seconds since 1970 of 2020-01-01 00:00 UTC.
constexpr double kStart = 1577836800.0;

template <typename Call>
std::string error_of(Call call) {
  try {
    call();
  } catch (const DataError& error) {
    return error.what();
  }
  ADD_FAILURE() << "no DataError";
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<std::string> dim_names(const VariableMeta& meta) {
  std::vector<std::string> names;
  for (const auto& dim : meta.dims) names.push_back(dim.name);
  return names;
}

}  // namespace

TEST(GribReader, RecognisesGribByMagicOrName) {
  TempDir directory;
  const std::string no_extension = directory.file("messages");
  fixtures::write_file(no_extension, fixtures::encode({}));
  EXPECT_TRUE(looks_like_grib(no_extension));
  const std::string text = directory.file("notes.txt");
  fixtures::write_file(text, {'C', 'D', 'F', 1});
  EXPECT_FALSE(looks_like_grib(text));
  EXPECT_TRUE(looks_like_grib(directory.file("absent.grib2")));
  EXPECT_TRUE(looks_like_grib(directory.file("ERA5.GRB")));
  EXPECT_EQ(open_reader(no_extension)->format(), "GRIB2");
}

TEST(GribReader, VariablesDimensionsAndAttributes) {
  auto reader = open_reader(era5_like_path());
  EXPECT_EQ(reader->format(), "GRIB2");
  std::vector<std::string> names = reader->variable_names();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"2t", "latitude", "level", "longitude", "msl", "t", "time", "z"}));

  const VariableMeta& t = reader->variable("t");
  EXPECT_EQ(dim_names(t), (std::vector<std::string>{"time", "level", "latitude", "longitude"}));
  EXPECT_EQ(t.dims[0].length, 25u);
  EXPECT_EQ(t.dims[1].length, 2u);
  EXPECT_EQ(t.dims[2].length, 5u);
  EXPECT_EQ(t.dims[3].length, 8u);
  EXPECT_EQ(t.text("units").value_or(""), "K");
  EXPECT_EQ(t.text("long_name").value_or(""), "Temperature");
  EXPECT_EQ(t.text("GRIB_shortName").value_or(""), "t");
  EXPECT_EQ(t.text("GRIB_typeOfLevel").value_or(""), "isobaricInhPa");
  EXPECT_EQ(t.dtype, "grid_ieee");
  ASSERT_TRUE(t.number("_FillValue"));
  EXPECT_EQ(static_cast<float>(*t.number("_FillValue")), static_cast<float>(9.9692099683868690e+36));

  const VariableMeta& z = reader->variable("z");
  EXPECT_EQ(z.text("units").value_or(""), "m**2 s**-2");
  EXPECT_EQ(z.text("long_name").value_or(""), "Geopotential");

  // Single-level fields have no level dimension; their level is an attribute.
  const VariableMeta& two_metre = reader->variable("2t");
  EXPECT_EQ(dim_names(two_metre), (std::vector<std::string>{"time", "latitude", "longitude"}));
  EXPECT_EQ(two_metre.text("GRIB_typeOfLevel").value_or(""), "heightAboveGround");
  EXPECT_EQ(two_metre.number("GRIB_level").value_or(-1), 2.0);
  EXPECT_EQ(two_metre.dtype, "grid_simple");
  EXPECT_EQ(dim_names(reader->variable("msl")), (std::vector<std::string>{"time", "latitude", "longitude"}));
  EXPECT_EQ(reader->variable("msl").text("units").value_or(""), "Pa");

  EXPECT_EQ(reader->variable("time").text("units").value_or(""), "seconds since 1970-01-01 00:00:00");
  EXPECT_EQ(reader->variable("time").text("calendar").value_or(""), "proleptic_gregorian");
  EXPECT_EQ(reader->variable("level").text("units").value_or(""), "hPa");
  EXPECT_EQ(reader->variable("latitude").text("units").value_or(""), "degrees_north");
  EXPECT_EQ(reader->variable("longitude").text("units").value_or(""), "degrees_east");
}

TEST(GribReader, CoordinatesFollowTheMessages) {
  auto reader = open_reader(era5_like_path());
  // Valid times: analyses, hour steps, minute steps (07:00 = 06:00 + 60 min, 08:00 = 06:00 +
  // 120 min: read as hours they would land days later) and the next day's 18 UTC + 6 h.
  const std::vector<double> time = reader->read_doubles("time");
  ASSERT_EQ(time.size(), 25u);
  for (size_t k = 0; k < time.size(); ++k) EXPECT_EQ(time[k], kStart + 3600.0 * k) << k;
  // Levels ascending, whatever order the file has them in (850 first here).
  EXPECT_EQ(reader->read_doubles("level"), (std::vector<double>{500.0, 850.0}));
  // North to south, as the messages scan.
  const std::vector<double> latitude = reader->read_doubles("latitude");
  ASSERT_EQ(latitude.size(), 5u);
  for (long j = 0; j < 5; ++j) EXPECT_DOUBLE_EQ(latitude[j], Era5Like::latitude(j));
  const std::vector<double> longitude = reader->read_doubles("longitude");
  ASSERT_EQ(longitude.size(), 8u);
  for (long i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(longitude[i], Era5Like::longitude(i));
  // A coordinate reads as float through read() too.
  float two_levels[2] = {};
  reader->read("level", {0}, {2}, two_levels);
  EXPECT_EQ(two_levels[1], 850.0f);
}

TEST(GribReader, ReadsIeeeValuesExactly) {
  auto reader = open_reader(era5_like_path());
  // The whole of t: every element.
  std::vector<float> t(25 * 2 * 5 * 8);
  reader->read("t", {0, 0, 0, 0}, {25, 2, 5, 8}, t.data());
  const long levels[2] = {500, 850};
  for (long time = 0; time < 25; ++time)
    for (long l = 0; l < 2; ++l)
      for (long j = 0; j < 5; ++j)
        for (long i = 0; i < 8; ++i)
          ASSERT_EQ(t[((time * 2 + l) * 5 + j) * 8 + i], Era5Like::t(time, levels[l], j, i)) << time << " " << l << " " << j << " " << i;
  // A window: times 6..8 (the minute steps), 850 hPa, latitudes 1..3, longitudes 2..6.
  std::vector<float> z(3 * 1 * 3 * 5);
  reader->read("z", {6, 1, 1, 2}, {3, 1, 3, 5}, z.data());
  for (long time = 0; time < 3; ++time)
    for (long j = 0; j < 3; ++j)
      for (long i = 0; i < 5; ++i) ASSERT_EQ(z[(time * 3 + j) * 5 + i], Era5Like::z(6 + time, 850, 1 + j, 2 + i));
}

TEST(GribReader, SimplePackingMatchesEcCodesOwnDecode) {
  const std::string path = era5_like_path();
  auto reader = open_reader(path);
  std::vector<float> two_metre(25 * 5 * 8);
  reader->read("2t", {0, 0, 0}, {25, 5, 8}, two_metre.data());
  FILE* file = std::fopen(path.c_str(), "rb");
  ASSERT_NE(file, nullptr);
  int status = 0, time = 0;
  while (codes_handle* handle = codes_handle_new_from_file(nullptr, file, PRODUCT_GRIB, &status)) {
    char name[32] = {};
    size_t length = sizeof(name);
    codes_get_string(handle, "shortName", name, &length);
    if (std::string(name) == "2t") {
      std::vector<double> values(40);
      size_t size = values.size();
      ASSERT_EQ(codes_get_double_array(handle, "values", values.data(), &size), 0);
      for (size_t k = 0; k < 40; ++k) ASSERT_EQ(two_metre[time * 40 + k], static_cast<float>(values[k])) << time << " " << k;
      // 16 bits over a range of ~9 K: within 1e-3 of what was written.
      for (long j = 0; j < 5; ++j)
        for (long i = 0; i < 8; ++i) EXPECT_NEAR(two_metre[time * 40 + j * 8 + i], Era5Like::two_metre(time, j, i), 1e-3);
      ++time;
    }
    codes_handle_delete(handle);
  }
  std::fclose(file);
  EXPECT_EQ(time, 25);
}

TEST(GribReader, BitmapPointsReadAsTheFillValue) {
  auto reader = open_reader(era5_like_path());
  const float fill = static_cast<float>(*reader->variable("msl").number("_FillValue"));
  std::vector<float> msl(2 * 5 * 8);
  reader->read("msl", {23, 0, 0}, {2, 5, 8}, msl.data());
  for (long time = 0; time < 2; ++time)
    for (long j = 0; j < 5; ++j)
      for (long i = 0; i < 8; ++i) {
        const float value = msl[(time * 5 + j) * 8 + i];
        if (Era5Like::msl_missing(j, i)) {
          EXPECT_EQ(value, fill);
        } else {
          EXPECT_EQ(value, Era5Like::msl(23 + time, j, i));
        }
      }
}

TEST(GribReader, MissingMessageNamesVariableLevelAndTime) {
  auto reader = open_reader(era5_like_path());
  std::vector<float> z(2 * 2 * 5 * 8);
  const std::string message = error_of([&] { reader->read("z", {12, 0, 0, 0}, {2, 2, 5, 8}, z.data()); });
  EXPECT_TRUE(contains(message, "'z'")) << message;
  EXPECT_TRUE(contains(message, "850 hPa")) << message;
  EXPECT_TRUE(contains(message, "2020-01-01T13:00:00")) << message;
  EXPECT_TRUE(contains(message, era5_like_path())) << message;
  // Around the hole, z reads.
  reader->read("z", {12, 0, 0, 0}, {2, 1, 5, 8}, z.data());
  EXPECT_EQ(z[40], Era5Like::z(13, 500, 0, 0));
  // A slab outside the variable.
  EXPECT_TRUE(contains(error_of([&] { reader->read("z", {24, 0, 0, 0}, {2, 1, 5, 8}, z.data()); }), "'time'"));
}

TEST(GribReader, ScanningModesComeBackAsLatitudeLongitude) {
  // Every combination of i direction, j direction and consecutive-ness: values are lat * 10 +
  // lon at each point, so the (latitude, longitude) array read must equal that for the
  // coordinates the reader reports, which follow the scan.
  for (int mode = 0; mode < 8; ++mode) {
    TempDir directory;
    fixtures::MessageSpec spec;
    spec.i_negative = mode & 1, spec.j_positive = mode & 2, spec.j_consecutive = mode & 4;
    spec.ni = 4, spec.nj = 3;
    spec.lat_first = spec.j_positive ? -10.0 : 10.0, spec.lat_last = -spec.lat_first;
    spec.lon_first = spec.i_negative ? 30.0 : 0.0, spec.lon_last = spec.i_negative ? 0.0 : 30.0;
    auto lat = [&](long j) { return spec.lat_first + (spec.lat_last - spec.lat_first) * j / (spec.nj - 1); };
    auto lon = [&](long i) { return spec.lon_first + (spec.lon_last - spec.lon_first) * i / (spec.ni - 1); };
    if (spec.j_consecutive) {
      for (long i = 0; i < spec.ni; ++i)
        for (long j = 0; j < spec.nj; ++j) spec.values.push_back(lat(j) * 10 + lon(i));
    } else {
      for (long j = 0; j < spec.nj; ++j)
        for (long i = 0; i < spec.ni; ++i) spec.values.push_back(lat(j) * 10 + lon(i));
    }
    const std::string path = directory.file("scan.grib2");
    fixtures::write_file(path, fixtures::encode(spec));
    auto reader = open_reader(path);
    const std::vector<double> latitude = reader->read_doubles("latitude");
    const std::vector<double> longitude = reader->read_doubles("longitude");
    ASSERT_EQ(latitude.size(), 3u);
    ASSERT_EQ(longitude.size(), 4u);
    EXPECT_EQ(latitude.front(), spec.lat_first) << mode;
    EXPECT_EQ(longitude.front(), spec.lon_first) << mode;
    std::vector<float> values(12);
    reader->read("t", {0, 0, 0, 0}, {1, 1, 3, 4}, values.data());
    for (long j = 0; j < 3; ++j)
      for (long i = 0; i < 4; ++i) EXPECT_EQ(values[j * 4 + i], static_cast<float>(latitude[j] * 10 + longitude[i])) << mode << " " << j << " " << i;
  }
}

TEST(GribReader, OneShortNameOnTwoLevelTypesIsTwoVariables) {
  TempDir directory;
  std::vector<unsigned char> bytes;
  fixtures::MessageSpec spec;
  spec.values.assign(40, 250.0);
  fixtures::append(bytes, fixtures::encode(spec));  // t, isobaricInhPa 500
  spec.type_of_level = "hybrid", spec.level = 137;
  spec.values.assign(40, 280.0);
  fixtures::append(bytes, fixtures::encode(spec));
  spec.level = 136;
  fixtures::append(bytes, fixtures::encode(spec));
  const std::string path = directory.file("two_types.grib2");
  fixtures::write_file(path, bytes);
  auto reader = open_reader(path);
  EXPECT_TRUE(reader->has_variable("t_isobaricInhPa"));
  EXPECT_TRUE(reader->has_variable("t_hybrid"));
  EXPECT_FALSE(reader->has_variable("t"));
  EXPECT_EQ(dim_names(reader->variable("t_isobaricInhPa"))[1], "level");
  EXPECT_EQ(dim_names(reader->variable("t_hybrid"))[1], "level_hybrid");
  EXPECT_EQ(reader->read_doubles("level_hybrid"), (std::vector<double>{136.0, 137.0}));
  std::vector<float> values(80);
  reader->read("t_hybrid", {0, 0, 0, 0}, {1, 2, 5, 8}, values.data());
  EXPECT_EQ(values[79], 280.0f);
}

TEST(GribReader, RejectsAGridOtherThanRegularLatLonOrReducedGaussian) {
  TempDir directory;
  fixtures::MessageSpec spec;
  spec.sample = "regular_gg_pl_grib2";
  spec.set_grid = false;
  const std::string path = directory.file("regular_gg.grib2");
  fixtures::write_file(path, fixtures::encode(spec));
  const std::string message = error_of([&] { open_reader(path); });
  EXPECT_TRUE(contains(message, path)) << message;
  EXPECT_TRUE(contains(message, "'t'")) << message;
  EXPECT_TRUE(contains(message, "regular_gg")) << message;
  EXPECT_TRUE(contains(message, "reduced_gg")) << message;
}

// ecCodes' own reduced Gaussian sample (N32, ECMWF's classic pl, 6114 points), GRIB2 and GRIB1:
// one `values` dimension of cells with latitude(values), longitude(values) as cfgrib has them, the
// 2N Gaussian latitudes ecCodes computes, longitudes 360 j / pl[i] along row i, and the values in
// the message's order.
TEST(GribReader, ReadsReducedGaussianAsCells) {
  for (const std::string sample : {"reduced_gg_pl_32_grib2", "reduced_gg_pl_32_grib1"}) {
    SCOPED_TRACE(sample);
    TempDir directory;
    fixtures::MessageSpec spec;
    spec.sample = sample;
    spec.set_grid = false;
    for (int k = 0; k < 6114; ++k) spec.values.push_back(200.0 + 0.01 * k);
    const std::string path = directory.file("n32.grib");
    fixtures::write_file(path, fixtures::encode(spec));
    const auto reader = open_reader(path);
    const VariableMeta& t = reader->variable("t");
    ASSERT_EQ(t.dims.size(), 3u);  // time, level, values
    EXPECT_EQ(t.dims[2].name, "values");
    EXPECT_EQ(t.dims[2].length, 6114u);
    const VariableMeta& lat = reader->variable("latitude");
    ASSERT_EQ(lat.dims.size(), 1u);
    EXPECT_EQ(lat.dims[0].name, "values");
    const std::vector<double> latitudes = reader->read_doubles("latitude"), longitudes = reader->read_doubles("longitude");
    ASSERT_EQ(latitudes.size(), 6114u);
    std::vector<double> gaussian(64);
    ASSERT_EQ(codes_get_gaussian_latitudes(32, gaussian.data()), 0);
    EXPECT_DOUBLE_EQ(latitudes.front(), gaussian.front());
    EXPECT_DOUBLE_EQ(latitudes.back(), gaussian.back());
    // ECMWF's N32 has 20 points on its first row: the 21st point starts row 2.
    EXPECT_DOUBLE_EQ(longitudes[1], 18.0);
    EXPECT_DOUBLE_EQ(latitudes[20], gaussian[1]);
    EXPECT_DOUBLE_EQ(longitudes[20], 0.0);
    EXPECT_TRUE(grid_coordinate(*reader, &t, t.dims[2], GridAxis::kLatitude).has_value());
    EXPECT_TRUE(grid_coordinate(*reader, &t, t.dims[2], GridAxis::kLongitude).has_value());
    std::vector<float> values(6114);
    reader->read("t", {0, 0, 0}, {1, 1, 6114}, values.data());
    for (int k : {0, 1, 20, 3000, 6113}) EXPECT_NEAR(values[k], 200.0 + 0.01 * k, 1e-4) << k;
    std::vector<float> part(10);
    reader->read("t", {0, 0, 100}, {1, 1, 10}, part.data());
    EXPECT_EQ(part[0], values[100]);
  }
}

// A sub-area of a reduced Gaussian grid starts each row at a point that depends on pl and the
// area's edge: refused, naming the grid and the globe's extent.
TEST(GribReader, RejectsAReducedGaussianSubArea) {
  TempDir directory;
  std::unique_ptr<codes_handle, decltype(&codes_handle_delete)> handle(
      codes_grib_handle_new_from_samples(nullptr, "reduced_gg_pl_32_grib2"), &codes_handle_delete);
  ASSERT_TRUE(handle);
  ASSERT_EQ(codes_set_double(handle.get(), "longitudeOfLastGridPointInDegrees", 90.0), 0);
  const void* message = nullptr;
  size_t length = 0;
  ASSERT_EQ(codes_get_message(handle.get(), &message, &length), 0);
  const auto* bytes = static_cast<const unsigned char*>(message);
  const std::string path = directory.file("area.grib2");
  fixtures::write_file(path, std::vector<unsigned char>(bytes, bytes + length));
  const std::string error = error_of([&] { open_reader(path); });
  EXPECT_TRUE(contains(error, path)) << error;
  EXPECT_TRUE(contains(error, "reduced_gg N32")) << error;
  EXPECT_TRUE(contains(error, "global reduced Gaussian grids only")) << error;
}

TEST(GribReader, RejectsTwoGrids) {
  TempDir directory;
  std::vector<unsigned char> bytes;
  fixtures::MessageSpec spec;
  spec.values.assign(40, 250.0);
  fixtures::append(bytes, fixtures::encode(spec));
  spec.short_name = "z", spec.ni = 4, spec.lon_last = 4.5;
  spec.values.assign(20, 1.0);
  fixtures::append(bytes, fixtures::encode(spec));
  const std::string path = directory.file("two_grids.grib2");
  fixtures::write_file(path, bytes);
  const std::string message = error_of([&] { open_reader(path); });
  EXPECT_TRUE(contains(message, "'t'") && contains(message, "'z'")) << message;
  EXPECT_TRUE(contains(message, "8x5") && contains(message, "4x5")) << message;
}

TEST(GribReader, RejectsTwoMessagesForOneSlot) {
  TempDir directory;
  std::vector<unsigned char> bytes;
  fixtures::MessageSpec spec;
  spec.values.assign(40, 250.0);
  fixtures::append(bytes, fixtures::encode(spec));  // 2020-01-01 00:00 analysis
  spec.data_time = 1800, spec.data_date = 20191231, spec.step = 6;
  fixtures::append(bytes, fixtures::encode(spec));  // the 6 h forecast valid then too
  const std::string path = directory.file("twice.grib2");
  fixtures::write_file(path, bytes);
  const std::string message = error_of([&] { open_reader(path); });
  EXPECT_TRUE(contains(message, "messages 1 and 2")) << message;
  EXPECT_TRUE(contains(message, "2020-01-01T00:00:00")) << message;
}

TEST(GribReader, TruncatedFileIsAnError) {
  TempDir directory;
  const std::vector<unsigned char> whole = Era5Like::bytes();
  const std::vector<unsigned char> message = fixtures::encode({});
  // Cut in the middle of the 10th message (every t message has the same length).
  const size_t cut = 9 * message.size() + message.size() / 2;
  const std::string path = directory.file("cut.grib2");
  fixtures::write_file(path, std::vector<unsigned char>(whole.begin(), whole.begin() + static_cast<long>(cut)));
  const std::string error = error_of([&] { open_reader(path); });
  EXPECT_TRUE(contains(error, path)) << error;
  EXPECT_TRUE(contains(error, "truncated")) << error;
  // A message whose section lengths do not chain: section 4's length grown by one.
  std::vector<unsigned char> corrupt = fixtures::encode({});
  corrupt[16 + 21 + 72 + 3] += 1;
  const std::string corrupt_path = directory.file("corrupt.grib2");
  fixtures::write_file(corrupt_path, corrupt);
  const std::string chain = error_of([&] { open_reader(corrupt_path); });
  EXPECT_TRUE(contains(chain, "message 1")) << chain;
  EXPECT_TRUE(contains(chain, "section")) << chain;
}

TEST(GribReader, NotGribIsAnError) {
  TempDir directory;
  const std::string path = directory.file("readme.grib");
  const std::string text = "this is not a weather file\n";
  fixtures::write_file(path, std::vector<unsigned char>(text.begin(), text.end()));
  const std::string error = error_of([&] { open_reader(path); });
  EXPECT_TRUE(contains(error, path)) << error;
  EXPECT_TRUE(contains(error, "no GRIB message")) << error;
  // Text that happens to hold the word.
  const std::string named = directory.file("named.grib");
  const std::string mention = "this text mentions GRIB files a lot\n";
  fixtures::write_file(named, std::vector<unsigned char>(mention.begin(), mention.end()));
  const std::string not_grib = error_of([&] { open_reader(named); });
  EXPECT_TRUE(contains(not_grib, "not a GRIB file")) << not_grib;
}

TEST(GribReader, ReadsGribEditionOne) {
  TempDir directory;
  fixtures::MessageSpec spec;
  spec.sample = "regular_ll_pl_grib1";
  spec.short_name = "t";
  spec.data_time = 600, spec.step = 3;
  for (int k = 0; k < 40; ++k) spec.values.push_back(200.0 + k);
  spec.packing = "grid_simple", spec.bits_per_value = 16;
  const std::string path = directory.file("edition1.grib");
  fixtures::write_file(path, fixtures::encode(spec));
  auto reader = open_reader(path);
  EXPECT_EQ(reader->format(), "GRIB1");
  EXPECT_EQ(reader->read_doubles("time"), (std::vector<double>{kStart + 9 * 3600.0}));
  std::vector<float> values(40);
  reader->read("t", {0, 0, 0, 0}, {1, 1, 5, 8}, values.data());
  for (int k = 0; k < 40; ++k) EXPECT_NEAR(values[k], 200.0 + k, 1e-3);
}

namespace {

// The libFuzzer input that leaked in ecCodes 2.28 (fuzz/corpus/grib_reader_fuzz/
// edition1_local_definition_5.grib): ecCodes' GRIB1 sample with its ECMWF localDefinitionNumber
// changed from 1 to 5, which ecCodes lays out in 58 bytes of a 52-byte PDS; it then read the grid
// description 6 bytes late, found a grid type (226) it has no template for and leaked the
// half-built handle. The local use is no longer handed to ecCodes, so the sections are where the
// message has them: here a grid of 4 x 3 points whose last latitude (5310.49) is no latitude.
const unsigned char kLocalDefinition5Leak[] = {
    0x47, 0x52, 0x49, 0x42, 0x00, 0x00, 0x78, 0x01, 0x00, 0x00, 0x34, 0x80, 0x62, 0x80, 0xff, 0x80, 0x82, 0x64, 0x01, 0xf4,
    0x14, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x15, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x01, 0x02, 0x04, 0x01, 0x30, 0x30, 0x30, 0x31, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x20, 0x00, 0xff, 0x00, 0x00, 0x04, 0x00, 0x03, 0x00, 0xe2, 0x60, 0x00, 0x00, 0x00, 0x80, 0x51, 0x08, 0x1a,
    0x04, 0x10, 0x63, 0x00, 0x00, 0x05, 0xdc, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x18, 0x08, 0x80, 0x04, 0x42, 0xfa,
    0x00, 0x00, 0x08, 0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0x00, 0x37, 0x37, 0x37, 0x37};

std::vector<unsigned char> local_definition_5_leak() {
  return std::vector<unsigned char>(std::begin(kLocalDefinition5Leak), std::end(kLocalDefinition5Leak));
}

// A GRIB2 message given a section 2 (local use) of `local` bytes after its 21-byte section 1,
// and section 1's productionStatusOfProcessedData set to `production_status`.
std::vector<unsigned char> with_local_section(std::vector<unsigned char> bytes, const std::vector<unsigned char>& local,
                                              unsigned char production_status) {
  const size_t section2 = 16 + 21, length = 5 + local.size();
  std::vector<unsigned char> section{0, 0, 0, static_cast<unsigned char>(length), 2};
  section.insert(section.end(), local.begin(), local.end());
  bytes.insert(bytes.begin() + section2, section.begin(), section.end());
  bytes[16 + 19] = production_status;  // section 1 octet 20
  uint64_t total = 0;
  for (int i = 8; i < 16; ++i) total = total << 8 | bytes[i];
  total += length;
  for (int i = 15; i >= 8; --i, total >>= 8) bytes[i] = static_cast<unsigned char>(total & 0xff);
  return bytes;
}

// A TIGGE-LAM message (productionStatusOfProcessedData 4) whose local use names TIGGE local
// version 65535: ecCodes 2.28 has no grib2/local.tigge.65535.def and leaked the handle.
std::vector<unsigned char> tigge_local_version_65535() {
  fixtures::MessageSpec spec;
  spec.ni = 4, spec.nj = 3, spec.lat_last = 57.0, spec.lon_last = 4.5;
  for (int k = 0; k < 12; ++k) spec.values.push_back(250.0 + k);
  return with_local_section(fixtures::encode(spec), {0xff, 0xff, 0, 0, 0, 0}, 4);
}

}  // namespace

TEST(GribReader, FuzzedLocalDefinitionIsRefusedForItsGrid) {
  TempDir directory;
  const std::string path = directory.file("local_definition_5.grib");
  fixtures::write_file(path, local_definition_5_leak());
  testing::internal::CaptureStderr();
  const std::string error = error_of([&] { open_reader(path); });
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_TRUE(contains(error, path + ": message 1 (at byte 0)")) << error;
  EXPECT_TRUE(contains(error, "5310.49") && contains(error, "key 'jScansPositively'")) << error;
}

// A well-formed GRIB1 message whose local definition (ECMWF's 1, MARS labelling, as in GRIB1
// files from MARS) is renumbered 5, longer than its section: read as it was, values and all.
TEST(GribReader, LocalDefinitionLongerThanItsSectionIsIgnored) {
  TempDir directory;
  fixtures::MessageSpec spec;
  spec.sample = "regular_ll_pl_grib1";
  for (int k = 0; k < 40; ++k) spec.values.push_back(200.0 + k);
  spec.packing = "grid_simple", spec.bits_per_value = 16;
  std::vector<unsigned char> bytes = fixtures::encode(spec);
  ASSERT_EQ(bytes[8 + 2], 52);  // the PDS: 28 octets and ECMWF's local definition 1
  ASSERT_EQ(bytes[8 + 40], 1);  // localDefinitionNumber
  bytes[8 + 40] = 5;
  const std::string path = directory.file("local_definition_5.grib");
  fixtures::write_file(path, bytes);
  testing::internal::CaptureStderr();
  auto reader = open_reader(path);
  std::vector<float> values(40);
  reader->read("t", {0, 0, 0, 0}, {1, 1, 5, 8}, values.data());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(reader->variable("t").attributes.at("GRIB_paramId").numbers, (std::vector<double>{130.0}));
  for (int k = 0; k < 40; ++k) EXPECT_NEAR(values[k], 200.0 + k, 1e-3);
}

TEST(GribReader, GribTwoLocalSectionIsIgnored) {
  TempDir directory;
  const std::string path = directory.file("tigge.grib2");
  fixtures::write_file(path, tigge_local_version_65535());
  testing::internal::CaptureStderr();
  auto reader = open_reader(path);
  std::vector<float> values(12);
  reader->read("t", {0, 0, 0, 0}, {1, 1, 3, 4}, values.data());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  for (int k = 0; k < 12; ++k) EXPECT_EQ(values[k], 250.0f + k);
}

// What ecCodes logs goes into wxtrain's error when it is the reason, and never to stderr.
TEST(GribReader, EcCodesLogsIntoTheErrorNotStderr) {
  TempDir directory;
  fixtures::MessageSpec spec;
  spec.packing = "grid_simple", spec.bits_per_value = 16;
  for (int k = 0; k < 40; ++k) spec.values.push_back(250.0 + k);
  std::vector<unsigned char> bytes = fixtures::encode(spec);
  const size_t section5 = 16 + 21 + 72 + 34;
  ASSERT_EQ(bytes[section5 + 4], 5);
  ASSERT_EQ(bytes[section5 + 19], 16);  // bitsPerValue, octet 20 of template 5.0
  bytes[section5 + 19] = 30;            // more bits than section 7 holds
  const std::string path = directory.file("bits.grib2");
  fixtures::write_file(path, bytes);
  testing::internal::CaptureStderr();
  const std::string error = error_of([&] {
    auto reader = open_reader(path);
    std::vector<float> values(40);
    reader->read("t", {0, 0, 0, 0}, {1, 1, 5, 8}, values.data());
  });
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_TRUE(contains(error, path + ": message 1 (at byte 0): key 'values' ('t')")) << error;
  EXPECT_TRUE(contains(error, "(ecCodes: Data section size mismatch")) << error;

  // A reference time 4 seconds past the minute (section 1 octet 19): ecCodes logs "Truncating
  // time: non-zero seconds(4) ignored" reading dataTime, as in the fuzzer's log, and the reader of
  // minutes takes the time as it is.
  fixtures::MessageSpec seconds;
  seconds.values.assign(40, 1.0);
  std::vector<unsigned char> seconds_bytes = fixtures::encode(seconds);
  ASSERT_EQ(seconds_bytes[16 + 18], 0);
  seconds_bytes[16 + 18] = 4;
  const std::string seconds_path = directory.file("seconds.grib2");
  fixtures::write_file(seconds_path, seconds_bytes);
  testing::internal::CaptureStderr();
  EXPECT_EQ(open_reader(seconds_path)->read_doubles("time"), (std::vector<double>{kStart}));
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(GribReader, ConcurrentReadsAgree) {
  auto reader = open_reader(era5_like_path());
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int worker = 0; worker < 4; ++worker) {
    threads.emplace_back([&, worker] {
      std::vector<float> slab(2 * 5 * 8);
      for (int round = 0; round < 20; ++round) {
        const long time = (worker * 7 + round) % 25;
        reader->read("t", {static_cast<size_t>(time), 0, 0, 0}, {1, 2, 5, 8}, slab.data());
        for (long l = 0; l < 2; ++l)
          for (long j = 0; j < 5; ++j)
            for (long i = 0; i < 8; ++i)
              if (slab[(l * 5 + j) * 8 + i] != Era5Like::t(time, l ? 850 : 500, j, i)) ++wrong;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

// Writes the fuzzer's seeds (fuzz/corpus/grib_reader_fuzz/): run with --gtest_also_run_disabled_tests
// --gtest_filter='GribReader.DISABLED_WriteFuzzSeeds' after changing the fixtures.
TEST(GribReader, DISABLED_WriteFuzzSeeds) {
  const std::string directory = std::string(WXTRAIN_SOURCE_DIR) + "/fuzz/corpus/grib_reader_fuzz";
  std::filesystem::create_directories(directory);
  fixtures::MessageSpec small;
  small.ni = 4, small.nj = 3, small.lat_last = 57.0, small.lon_last = 4.5;
  small.values.assign(12, 0.0);
  for (int k = 0; k < 12; ++k) small.values[k] = 250.0 + k;
  fixtures::write_file(directory + "/ieee_pl.grib2", fixtures::encode(small));
  std::vector<unsigned char> two;
  fixtures::MessageSpec simple = small;
  simple.short_name = "2t", simple.type_of_level = "heightAboveGround", simple.level = 2;
  simple.packing = "grid_simple", simple.bits_per_value = 12, simple.step = 90, simple.step_unit = 0;
  fixtures::append(two, fixtures::encode(simple));
  fixtures::MessageSpec bitmap = small;
  bitmap.short_name = "msl", bitmap.type_of_level = "meanSea", bitmap.level = 0, bitmap.bitmap = true;
  bitmap.values[5] = 9999.0;
  bitmap.j_consecutive = true;
  fixtures::append(two, fixtures::encode(bitmap));
  fixtures::write_file(directory + "/simple_and_bitmap.grib2", two);
  fixtures::MessageSpec edition1 = small;
  edition1.sample = "regular_ll_pl_grib1", edition1.packing = "grid_simple", edition1.bits_per_value = 8;
  fixtures::write_file(directory + "/edition1.grib", fixtures::encode(edition1));
  fixtures::write_file(directory + "/edition1_local_definition_5.grib", local_definition_5_leak());
  fixtures::write_file(directory + "/tigge_local_version_65535.grib2", tigge_local_version_65535());
}
