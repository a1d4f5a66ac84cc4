#pragma once
// GRIB fixtures written with ecCodes itself, from its own samples: what a GRIB file from an
// archive looks like, without a binary blob in the repository. Used by test_grib_reader.cpp and
// by fuzz/grib_corpus_writer (the fuzzer's seeds).
#include <eccodes.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace wxtrain::test::grib {

// One message: the sample it starts from and the keys set on it, in order.
struct MessageSpec {
  std::string sample = "regular_ll_pl_grib2";
  std::string short_name = "t";
  std::string type_of_level = "isobaricInhPa";
  long level = 500;
  long data_date = 20200101;  // YYYYMMDD
  long data_time = 0;         // HHMM
  long step = 0;
  long step_unit = 1;         // GRIB2 code table 4.4: 0 minute, 1 hour
  std::string packing = "grid_ieee";
  long bits_per_value = 0;    // for grid_simple
  bool bitmap = false;        // points equal to 9999 (ecCodes' missingValue) become missing
  bool set_grid = true;       // false: keep the sample's grid (a reduced_gg sample, say)
  // The grid: first/last point, counts and the scanning flags.
  long ni = 8, nj = 5;
  double lat_first = 60.0, lat_last = 54.0, lon_first = 0.0, lon_last = 10.5;
  bool i_negative = false, j_positive = false, j_consecutive = false;
  std::vector<double> values;  // in the message's scan order; empty: the sample's own
};

inline void check(int status, const std::string& what) {
  if (status != CODES_SUCCESS) throw std::runtime_error("ecCodes fixture: " + what + ": " + codes_get_error_message(status));
}

// The encoded message for `spec`.
inline std::vector<unsigned char> encode(const MessageSpec& spec) {
  std::unique_ptr<codes_handle, decltype(&codes_handle_delete)> handle(
      codes_grib_handle_new_from_samples(nullptr, spec.sample.c_str()), &codes_handle_delete);
  if (!handle) throw std::runtime_error("ecCodes fixture: no sample " + spec.sample);
  codes_handle* h = handle.get();
  auto set_long = [&](const char* key, long value) { check(codes_set_long(h, key, value), key); };
  auto set_double = [&](const char* key, double value) { check(codes_set_double(h, key, value), key); };
  auto set_text = [&](const char* key, const std::string& value) {
    size_t length = value.size();
    check(codes_set_string(h, key, value.c_str(), &length), key + std::string("=") + value);
  };
  long edition = 0;
  check(codes_get_long(h, "editionNumber", &edition), "editionNumber");
  // The parameter first: for a surface parameter (2t, msl) ecCodes' concept also sets the level
  // type, which the keys below then restate.
  set_text("shortName", spec.short_name);
  set_text("typeOfLevel", spec.type_of_level);
  set_long("level", spec.level);
  set_long("dataDate", spec.data_date);
  set_long("dataTime", spec.data_time);
  if (edition == 2) {
    set_long("indicatorOfUnitOfTimeRange", spec.step_unit);
    set_long("forecastTime", spec.step);
  } else {
    set_long("step", spec.step);
  }
  if (spec.set_grid) {
    set_long("Ni", spec.ni);
    set_long("Nj", spec.nj);
    if (edition == 2) set_long("numberOfDataPoints", spec.ni * spec.nj);
    set_long("iScansNegatively", spec.i_negative);
    set_long("jScansPositively", spec.j_positive);
    set_long("jPointsAreConsecutive", spec.j_consecutive);
    set_double("latitudeOfFirstGridPointInDegrees", spec.lat_first);
    set_double("latitudeOfLastGridPointInDegrees", spec.lat_last);
    set_double("longitudeOfFirstGridPointInDegrees", spec.lon_first);
    set_double("longitudeOfLastGridPointInDegrees", spec.lon_last);
    set_double("iDirectionIncrementInDegrees", spec.ni > 1 ? std::fabs(spec.lon_last - spec.lon_first) / (spec.ni - 1) : 1.0);
    set_double("jDirectionIncrementInDegrees", spec.nj > 1 ? std::fabs(spec.lat_last - spec.lat_first) / (spec.nj - 1) : 1.0);
  }
  if (!spec.values.empty()) {
    set_text("packingType", spec.packing);
    if (spec.bits_per_value > 0) set_long("bitsPerValue", spec.bits_per_value);
    if (spec.bitmap) set_long("bitmapPresent", 1);
    check(codes_set_double_array(h, "values", spec.values.data(), spec.values.size()), "values");
  }
  const void* message = nullptr;
  size_t length = 0;
  check(codes_get_message(h, &message, &length), "message");
  const auto* bytes = static_cast<const unsigned char*>(message);
  return std::vector<unsigned char>(bytes, bytes + length);
}

inline void append(std::vector<unsigned char>& file, const std::vector<unsigned char>& message) {
  file.insert(file.end(), message.begin(), message.end());
}

inline void write_file(const std::string& path, const std::vector<unsigned char>& bytes) {
  FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) throw std::runtime_error("cannot write " + path);
  std::fwrite(bytes.data(), 1, bytes.size(), file);
  std::fclose(file);
}

// The ERA5-like fixture: hourly from 2020-01-01 00:00 to 2020-01-02 00:00 (25 valid times), on
// 8 x 5 points from 60N to 54N (north to south, as ERA5) and 0E to 10.5E in steps of 1.5 degrees:
//   t, z   on isobaricInhPa 850 and 500 (written 850 first), grid_ieee, so every value is exact;
//   2t     heightAboveGround 2 m, grid_simple at 16 bits (compared with ecCodes' own decode);
//   msl    meanSea, grid_ieee with a bitmap: two points of every field are missing.
// Hours that are not a multiple of 6 are forecasts from the last 00/06/12/18 UTC analysis
// (step 1-5 h); hours 7 and 8 carry their steps in minutes (60 and 120), and 2020-01-02 00:00 is
// the 6 h forecast from 2020-01-01 18:00. z at 850 hPa is missing at 13:00.
struct Era5Like {
  static constexpr long kNi = 8, kNj = 5, kTimes = 25;
  static double latitude(long j) { return 60.0 - 1.5 * j; }
  static double longitude(long i) { return 1.5 * i; }
  static float t(long time, long level, long j, long i) { return 200.0f + 0.5f * time + level / 50.0f + 2.0f * j + 0.25f * i; }
  static float z(long time, long level, long j, long i) { return (level == 500 ? 55000.0f : 15000.0f) + 10.0f * time + 7.0f * j + i; }
  static double two_metre(long time, long j, long i) { return 270.0 + 3.0 * std::sin(0.3 * time + j) + 0.37 * i; }
  static bool msl_missing(long j, long i) { return (j == 0 && i == 0) || (j == 2 && i == 3); }
  static float msl(long time, long j, long i) { return 101325.0f + 10.0f * time + 100.0f * j + i; }
  static bool z850_missing(long time) { return time == 13; }

  // Reference time and step (with its unit) of the message valid at `time` hours from the start.
  static void reference(long time, MessageSpec& spec) {
    const long day = time / 24, hour = time % 24;
    if (time == 24) {
      spec.data_date = 20200101, spec.data_time = 1800, spec.step = 6, spec.step_unit = 1;
      return;
    }
    spec.data_date = 20200101 + day;
    spec.data_time = (hour - hour % 6) * 100;
    spec.step = hour % 6;
    spec.step_unit = 1;
    if (hour == 7 || hour == 8) spec.step *= 60, spec.step_unit = 0;
  }

  static std::vector<unsigned char> bytes() {
    std::vector<unsigned char> file;
    for (long time = 0; time < kTimes; ++time) {
      MessageSpec base;
      reference(time, base);
      for (const char* name : {"t", "z"}) {
        for (long level : {850L, 500L}) {
          if (std::string(name) == "z" && level == 850 && z850_missing(time)) continue;
          MessageSpec spec = base;
          spec.short_name = name;
          spec.level = level;
          for (long j = 0; j < kNj; ++j)
            for (long i = 0; i < kNi; ++i)
              spec.values.push_back(std::string(name) == "t" ? t(time, level, j, i) : z(time, level, j, i));
          append(file, encode(spec));
        }
      }
      MessageSpec two_metre_spec = base;
      two_metre_spec.short_name = "2t";
      two_metre_spec.type_of_level = "heightAboveGround";
      two_metre_spec.level = 2;
      two_metre_spec.packing = "grid_simple";
      two_metre_spec.bits_per_value = 16;
      for (long j = 0; j < kNj; ++j)
        for (long i = 0; i < kNi; ++i) two_metre_spec.values.push_back(two_metre(time, j, i));
      append(file, encode(two_metre_spec));
      MessageSpec msl_spec = base;
      msl_spec.short_name = "msl";
      msl_spec.type_of_level = "meanSea";
      msl_spec.level = 0;
      msl_spec.bitmap = true;
      for (long j = 0; j < kNj; ++j)
        for (long i = 0; i < kNi; ++i) msl_spec.values.push_back(msl_missing(j, i) ? 9999.0 : msl(time, j, i));
      append(file, encode(msl_spec));
    }
    return file;
  }
};

}  // namespace wxtrain::test::grib
