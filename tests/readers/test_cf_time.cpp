// CF time (data/time/cf_time.h): every calendar cross-checked against cftime (Unidata's
// implementation, Debian's python3-cftime) on random values both ways, plus anchors checked by
// hand, round trips and the error messages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/time/cf_time.h"

using namespace wxtrain;
using namespace wxtrain::data;

namespace {

const Calendar kAllCalendars[] = {Calendar::kStandard, Calendar::kProlepticGregorian, Calendar::kNoLeap,
                                  Calendar::kAllLeap,  Calendar::k360Day,             Calendar::kJulian};

DateTime date(int year, int month, int day, int hour = 0, int minute = 0, double second = 0) {
  return DateTime{year, month, day, hour, minute, second};
}

// The message of the DataError `call` throws ("" when it throws none).
template <typename Call>
std::string error_of(Call call) {
  try {
    call();
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

std::string print_value(double value) {
  char buffer[40];
  if (value == std::trunc(value)) {
    std::snprintf(buffer, sizeof buffer, "%.0f", value);  // an int for cftime: exact arithmetic
  } else {
    std::snprintf(buffer, sizeof buffer, "%.17g", value);
  }
  return buffer;
}

// Runs cftime on request lines, one answer line each; an empty vector with `why_not` set when
// Debian's python3 or its cftime is not installed.
const char* const kCftimeScript = R"PY(
import sys
import cftime
for line in open(sys.argv[1]):
    kind, calendar, units, arg = line.rstrip("\n").split("|")
    try:
        if kind == "num2date":
            value = int(arg) if "." not in arg and "e" not in arg else float(arg)
            d = cftime.num2date(value, units, calendar)
            print(d.year, d.month, d.day, d.hour, d.minute, d.second, d.microsecond)
        else:
            y, mo, da, h, mi, s = (int(x) for x in arg.split())
            d = cftime.datetime(y, mo, da, h, mi, s, calendar=calendar)
            print(repr(float(cftime.date2num(d, units, calendar))))
    except Exception as e:
        print("error", type(e).__name__, str(e).replace("\n", " "))
)PY";

std::vector<std::string> run_cftime(const std::vector<std::string>& requests, std::string& why_not) {
  const std::string python = WXTRAIN_SYSTEM_PYTHON;
  if (python.empty() || access(python.c_str(), X_OK) != 0) {
    why_not = "no system python at '" + python + "'";
    return {};
  }
  if (std::system((python + " -c 'import cftime' 2>/dev/null").c_str()) != 0) {
    why_not = python + " has no cftime (apt install python3-cftime)";
    return {};
  }
  const std::string dir = testing::TempDir();
  const std::string script_path = dir + "/cf_time_check_" + std::to_string(getpid()) + ".py";
  const std::string input_path = dir + "/cf_time_check_" + std::to_string(getpid()) + ".txt";
  std::ofstream(script_path) << kCftimeScript;
  {
    std::ofstream input(input_path);
    for (const std::string& request : requests) input << request << "\n";
  }
  std::vector<std::string> answers;
  FILE* pipe = popen((python + " " + script_path + " " + input_path).c_str(), "r");
  if (pipe == nullptr) {
    why_not = "cannot start " + python;
    return {};
  }
  char buffer[512];
  std::string line;
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) {
    line += buffer;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      answers.push_back(line);
      line.clear();
    }
  }
  pclose(pipe);
  std::remove(script_path.c_str());
  std::remove(input_path.c_str());
  return answers;
}

}  // namespace

// ---- Against cftime ----------------------------------------------------------------------------

// Random values in each calendar and units, decoded by us and by cftime.num2date; values are
// integers (what xarray writes) or quarters (exact in binary, whole seconds in every unit used).
TEST(CfTime, DecodesLikeCftimeInEveryCalendar) {
  struct UnitsCase {
    const char* units;
    double low, high;
    bool quarters;
  };
  const UnitsCase kUnits[] = {
      {"hours since 1979-01-01", -1.5e7, 1e7, false},
      {"hours since 1979-01-01 00:00:00", -2e5, 2e5, true},
      {"days since 1-1-1", 0, 800000, false},
      {"days since 1-1-1 00:00:00", 577000, 578500, true},  // around 1582
      {"seconds since 1970-01-01 00:00:00", -6e10, 4e9, false},
      {"minutes since 1582-10-15 00:00:00", -2e6, 2e6, false},
      {"days since 1582-10-01", -100, 100, true},
      {"hours since 2000-02-28 12:00:00", -1e5, 1e5, true},
      {"days since 1850-01-01", -1000, 200000, true},
  };
  std::mt19937_64 random(20240611);
  std::vector<std::string> requests;
  struct Expectation {
    Calendar calendar;
    std::string units;
    double value;
  };
  std::vector<Expectation> cases;
  for (Calendar calendar : kAllCalendars) {
    for (const UnitsCase& u : kUnits) {
      std::uniform_real_distribution<double> pick(u.low, u.high);
      for (int i = 0; i < 120; ++i) {
        double value = u.quarters ? std::round(pick(random) * 4) / 4 : std::round(pick(random));
        if (i == 0) value = 0;
        cases.push_back({calendar, u.units, value});
        requests.push_back("num2date|" + calendar_name(calendar) + "|" + u.units + "|" + print_value(value));
      }
    }
  }
  std::string why_not;
  std::vector<std::string> answers = run_cftime(requests, why_not);
  if (answers.empty() && !why_not.empty()) GTEST_SKIP() << why_not;
  ASSERT_EQ(answers.size(), requests.size());
  int mismatches = 0;
  for (size_t i = 0; i < cases.size() && mismatches < 20; ++i) {
    const Expectation& c = cases[i];
    ASSERT_EQ(answers[i].rfind("error", 0), std::string::npos) << requests[i] << " -> " << answers[i];
    std::istringstream fields(answers[i]);
    DateTime expected;
    int second = 0, microsecond = 0;
    fields >> expected.year >> expected.month >> expected.day >> expected.hour >> expected.minute >> second >>
        microsecond;
    expected.second = second;
    ASSERT_EQ(microsecond, 0) << requests[i];
    TimeUnits units = parse_time_units(c.units, c.calendar);
    DateTime ours = decode_dates({c.value}, units).front();
    if (ours != expected) {
      ++mismatches;
      ADD_FAILURE() << requests[i] << ": ours " << ours.to_iso() << ", cftime " << expected.to_iso();
    }
  }
}

// Random dates in each calendar, encoded by us (encode_times) and by cftime.date2num.
TEST(CfTime, EncodesLikeCftimeInEveryCalendar) {
  const char* const kUnits[] = {"days since 1-1-1", "hours since 1979-01-01 00:00:00", "seconds since 1970-01-01",
                                "minutes since 1582-10-15 00:00:00"};
  std::mt19937_64 random(7);
  std::vector<std::string> requests;
  struct Expectation {
    Calendar calendar;
    std::string units;
    DateTime when;
  };
  std::vector<Expectation> cases;
  for (Calendar calendar : kAllCalendars) {
    std::vector<DateTime> dates;
    for (int day = 1; day <= 31; ++day) dates.push_back(date(1582, 10, day, 12));  // the reform
    while (dates.size() < 150) {
      DateTime d = date(std::uniform_int_distribution<int>(1, 2500)(random),
                        std::uniform_int_distribution<int>(1, 12)(random),
                        std::uniform_int_distribution<int>(1, 31)(random),
                        std::uniform_int_distribution<int>(0, 23)(random),
                        std::uniform_int_distribution<int>(0, 59)(random),
                        std::uniform_int_distribution<int>(0, 59)(random));
      if (valid_date(d, calendar)) dates.push_back(d);
    }
    for (const DateTime& d : dates) {
      if (!valid_date(d, calendar)) continue;
      for (const char* units : kUnits) {
        cases.push_back({calendar, units, d});
        char fields[96];
        std::snprintf(fields, sizeof fields, "%d %d %d %d %d %d", d.year, d.month, d.day, d.hour, d.minute,
                      static_cast<int>(d.second));
        requests.push_back("date2num|" + calendar_name(calendar) + "|" + units + "|" + fields);
      }
    }
  }
  std::string why_not;
  std::vector<std::string> answers = run_cftime(requests, why_not);
  if (answers.empty() && !why_not.empty()) GTEST_SKIP() << why_not;
  ASSERT_EQ(answers.size(), requests.size());
  int mismatches = 0;
  for (size_t i = 0; i < cases.size() && mismatches < 20; ++i) {
    const Expectation& c = cases[i];
    ASSERT_EQ(answers[i].rfind("error", 0), std::string::npos) << requests[i] << " -> " << answers[i];
    const double expected = std::stod(answers[i]);
    TimeUnits units = parse_time_units(c.units, c.calendar);
    EncodedTimes ours = encode_times({to_seconds(c.when, c.calendar)}, c.calendar, units.unit_name, units.epoch);
    if (std::fabs(ours.values[0] - expected) > 1e-9 * std::max(1.0, std::fabs(expected))) {
      ++mismatches;
      ADD_FAILURE() << requests[i] << ": ours " << print_value(ours.values[0]) << ", cftime " << answers[i];
    }
  }
}

// ---- Anchors checked by hand -------------------------------------------------------------------

TEST(CfTime, XarrayInt64HoursSince1979) {
  TimeUnits units = parse_time_units("hours since 1979-01-01", "standard");
  std::vector<int64_t> seconds = decode_times({0, 6, 376944}, units);
  EXPECT_EQ(seconds[0], 283996800);  // Unix time of 1979-01-01
  EXPECT_EQ(seconds[1] - seconds[0], 6 * 3600);
  EXPECT_EQ(from_seconds(seconds[2], Calendar::kStandard).to_iso(), "2022-01-01T00:00:00");
  EXPECT_EQ(to_seconds(date(2022, 1, 1), Calendar::kStandard), 1640995200);
  EncodedTimes encoded = encode_times({seconds[2]}, Calendar::kStandard, "hours", date(1979, 1, 1));
  EXPECT_EQ(encoded.units, "hours since 1979-01-01 00:00:00");
  EXPECT_EQ(encoded.values[0], 376944.0);
}

TEST(CfTime, OriginIsEachCalendarsOwn1970) {
  for (Calendar calendar : kAllCalendars) {
    EXPECT_EQ(to_seconds(date(1970, 1, 1), calendar), 0) << calendar_name(calendar);
    EXPECT_EQ(from_seconds(0, calendar), date(1970, 1, 1)) << calendar_name(calendar);
    EXPECT_EQ(from_seconds(-1, calendar), date(1969, calendar == Calendar::k360Day ? 12 : 12,
                                               calendar == Calendar::k360Day ? 30 : 31, 23, 59, 59));
  }
}

TEST(CfTime, GregorianReformInTheStandardCalendar) {
  const Calendar standard = Calendar::kStandard;
  EXPECT_EQ(to_seconds(date(1582, 10, 15), standard) - to_seconds(date(1582, 10, 4), standard), 86400);
  TimeUnits units = parse_time_units("days since 1582-10-04", "gregorian");
  EXPECT_EQ(decode_dates({1}, units)[0], date(1582, 10, 15));
  EXPECT_FALSE(valid_date(date(1582, 10, 10), standard));
  EXPECT_TRUE(valid_date(date(1582, 10, 10), Calendar::kProlepticGregorian));
  EXPECT_TRUE(valid_date(date(1582, 10, 10), Calendar::kJulian));
  EXPECT_NE(error_of([] { parse_date("1582-10-10"); }).find("1582-10-10"), std::string::npos);
  // Before the reform the standard calendar is the Julian one: 1500 is a leap year there.
  EXPECT_TRUE(valid_date(date(1500, 2, 29), standard));
  EXPECT_FALSE(valid_date(date(1500, 2, 29), Calendar::kProlepticGregorian));
  EXPECT_EQ(to_seconds(date(1500, 3, 1), standard) - to_seconds(date(1500, 2, 28), standard), 2 * 86400);
  // ... and the days are real days: Julian 1582-10-04 is proleptic Gregorian 1582-10-14.
  EXPECT_EQ(to_seconds(date(1582, 10, 4), standard), to_seconds(date(1582, 10, 14), Calendar::kProlepticGregorian));
}

TEST(CfTime, LeapDaysPerCalendar) {
  EXPECT_TRUE(valid_date(date(2000, 2, 29), Calendar::kProlepticGregorian));
  EXPECT_TRUE(valid_date(date(2000, 2, 29), Calendar::kStandard));
  EXPECT_FALSE(valid_date(date(2000, 2, 29), Calendar::kNoLeap));
  EXPECT_FALSE(valid_date(date(1900, 2, 29), Calendar::kStandard));
  EXPECT_TRUE(valid_date(date(1900, 2, 29), Calendar::kJulian));
  EXPECT_TRUE(valid_date(date(2001, 2, 29), Calendar::kAllLeap));
  EXPECT_TRUE(valid_date(date(2001, 2, 30), Calendar::k360Day));
  EXPECT_FALSE(valid_date(date(2001, 1, 31), Calendar::k360Day));
  EXPECT_FALSE(valid_date(date(2001, 2, 30), Calendar::kStandard));
  EXPECT_EQ(to_seconds(date(2001, 1, 1), Calendar::kNoLeap) - to_seconds(date(2000, 1, 1), Calendar::kNoLeap),
            365 * 86400);
  EXPECT_EQ(to_seconds(date(2001, 1, 1), Calendar::kAllLeap) - to_seconds(date(2000, 1, 1), Calendar::kAllLeap),
            366 * 86400);
  EXPECT_EQ(to_seconds(date(2001, 1, 1), Calendar::k360Day) - to_seconds(date(2000, 1, 1), Calendar::k360Day),
            360 * 86400);
  EXPECT_EQ(days_in_month(2024, 2, Calendar::kStandard), 29);
  EXPECT_EQ(days_in_month(2100, 2, Calendar::kProlepticGregorian), 28);
  EXPECT_EQ(days_in_month(2100, 2, Calendar::kJulian), 29);
}

TEST(CfTime, LeapSecondsAreIgnoredAsCfSays) {
  TimeUnits units = parse_time_units("seconds since 2016-12-31 23:59:59", "standard");
  EXPECT_EQ(decode_dates({1}, units)[0], date(2017, 1, 1));
  EXPECT_FALSE(valid_date(date(2016, 12, 31, 23, 59, 60), Calendar::kStandard));
}

TEST(CfTime, ParsesTheUnitsFormsFoundInArchives) {
  const DateTime y1979 = date(1979, 1, 1);
  for (const char* text : {"hours since 1979-01-01", "hours since 1979-01-01 00:00:00", "HOURS since 1979-1-1 0:0:0",
                           "hours since 1979-01-01T00:00:00Z", "hours since 1979-01-01 00:00:00 UTC",
                           "hour since 1979-01-01 00:00:00.0", "hrs since 1979-01-01 00:00 +00:00",
                           "h since 1979-01-01T00:00:00+0000", "  hours  since  1979-01-01  "}) {
    TimeUnits units = parse_time_units(text, "");
    EXPECT_EQ(units.seconds_per_unit, 3600) << text;
    EXPECT_EQ(units.unit_name, "hours") << text;
    EXPECT_EQ(units.epoch, y1979) << text;
    EXPECT_EQ(units.calendar, Calendar::kStandard) << text;
  }
  EXPECT_EQ(parse_time_units("days since 1-1-1", "noleap").epoch, date(1, 1, 1));
  EXPECT_EQ(parse_time_units("days since 1900-01-01T00:00:00Z", "standard").seconds_per_unit, 86400);
  EXPECT_EQ(parse_time_units("seconds since 1970-01-01 00:00:00.0", "standard").seconds_per_unit, 1);
  EXPECT_EQ(parse_time_units("minutes since 2000-01-01", "standard").seconds_per_unit, 60);
  EXPECT_EQ(parse_time_units("secs since 2000-01-01", "standard").seconds_per_unit, 1);
  EXPECT_EQ(parse_time_units("weeks since 2000-01-01", "standard").seconds_per_unit, 7 * 86400);
  EXPECT_EQ(parse_time_units("d since 2000-01-01", "standard").seconds_per_unit, 86400);
  // A local-time epoch is moved to UTC.
  EXPECT_EQ(parse_time_units("hours since 1979-01-01 06:00:00 +06:00", "standard").epoch, y1979);
  EXPECT_EQ(parse_time_units("hours since 1979-01-01 -05:30", "standard").epoch, date(1979, 1, 1, 5, 30));
  // Sub-second units: 1.5 s rounds away from zero.
  TimeUnits ms = parse_time_units("milliseconds since 1970-01-01", "proleptic_gregorian");
  EXPECT_EQ(ms.units_per_second, 1000);
  EXPECT_EQ(decode_times({1500, -1500, 1499, 86400000}, ms), (std::vector<int64_t>{2, -2, 1, 86400}));
  // Calendar names are case-insensitive and have aliases.
  EXPECT_EQ(parse_calendar("Gregorian"), Calendar::kStandard);
  EXPECT_EQ(parse_calendar("365_day"), Calendar::kNoLeap);
  EXPECT_EQ(parse_calendar("366_DAY"), Calendar::kAllLeap);
  EXPECT_EQ(parse_calendar("360_day"), Calendar::k360Day);
  EXPECT_EQ(parse_calendar("julian"), Calendar::kJulian);
  EXPECT_EQ(parse_calendar("PROLEPTIC_GREGORIAN"), Calendar::kProlepticGregorian);
  for (Calendar calendar : kAllCalendars) EXPECT_EQ(parse_calendar(calendar_name(calendar)), calendar);
}

TEST(CfTime, DecodesFractionalValuesToTheNearestSecond) {
  TimeUnits units = parse_time_units("hours since 1979-01-01", "standard");
  const int64_t epoch = to_seconds(date(1979, 1, 1), Calendar::kStandard);
  std::vector<int64_t> seconds = decode_times({0.25, -0.5, 1.0 / 3.0, 0.0001}, units);
  EXPECT_EQ(seconds[0] - epoch, 900);
  EXPECT_EQ(seconds[1] - epoch, -1800);
  EXPECT_EQ(seconds[2] - epoch, 1200);
  EXPECT_EQ(seconds[3] - epoch, 0);  // 0.36 s
}

TEST(CfTime, IsoTextAndOrdering) {
  EXPECT_EQ(date(1979, 1, 1, 6).to_iso(), "1979-01-01T06:00:00");
  EXPECT_EQ(date(1, 2, 3, 4, 5, 6).to_iso(), "0001-02-03T04:05:06");
  EXPECT_EQ(date(-44, 3, 15).to_iso(), "-0044-03-15T00:00:00");
  EXPECT_EQ(date(2000, 1, 1, 0, 0, 1.25).to_iso(), "2000-01-01T00:00:01.25");
  EXPECT_LT(date(1979, 1, 1), date(1979, 1, 1, 0, 0, 1));
  EXPECT_LT(date(1978, 12, 31, 23), date(1979, 1, 1));
  EXPECT_GT(date(1979, 2, 1), date(1979, 1, 31));
  EXPECT_LE(date(1979, 1, 1), date(1979, 1, 1));
  EXPECT_GE(date(1979, 1, 1), date(1979, 1, 1));
  EXPECT_NE(date(1979, 1, 1), date(1979, 1, 2));
}

// ---- Round trips -------------------------------------------------------------------------------

// Every day of 6000 years, each calendar: to_seconds inverts from_seconds, the dates are valid
// and strictly increasing, one day apart.
TEST(CfTime, EveryDayOfSixThousandYearsRoundTrips) {
  for (Calendar calendar : kAllCalendars) {
    const int64_t first = to_seconds(date(-2000, 1, 1), calendar) / 86400;
    const int64_t last = to_seconds(date(4000, 1, 1), calendar) / 86400;
    DateTime previous = from_seconds((first - 1) * 86400, calendar);
    for (int64_t day = first; day <= last; ++day) {
      DateTime d = from_seconds(day * 86400 + 3723, calendar);
      ASSERT_TRUE(valid_date(d, calendar)) << calendar_name(calendar) << " " << d.to_iso();
      ASSERT_LT(previous, d) << calendar_name(calendar);
      ASSERT_EQ(to_seconds(d, calendar), day * 86400 + 3723) << calendar_name(calendar) << " " << d.to_iso();
      ASSERT_EQ(d.hour * 10000 + d.minute * 100 + d.second, 10203);
      previous = d;
    }
  }
}

TEST(CfTime, EncodeThenDecodeGivesTheSameTimes) {
  std::mt19937_64 random(11);
  for (Calendar calendar : kAllCalendars) {
    // Six-hourly steps (xarray picks hours), then irregular seconds.
    std::vector<int64_t> six_hourly, irregular;
    const int64_t start = to_seconds(date(1979, 1, 1), calendar);
    for (int i = 0; i < 200; ++i) six_hourly.push_back(start + i * 21600);
    for (int i = 0; i < 200; ++i)
      irregular.push_back(std::uniform_int_distribution<int64_t>(-60'000'000'000, 60'000'000'000)(random));
    for (const auto& times : {six_hourly, irregular}) {
      EncodedTimes encoded = encode_times(times, calendar);
      TimeUnits units = parse_time_units(encoded.units, calendar_name(calendar));
      EXPECT_EQ(decode_times(encoded.values, units), times) << calendar_name(calendar) << " " << encoded.units;
      for (const char* unit : {"seconds", "minutes", "hours", "days"}) {
        EncodedTimes fixed = encode_times(times, calendar, unit, date(1900, 1, 1));
        EXPECT_EQ(decode_times(fixed.values, parse_time_units(fixed.units, calendar)), times)
            << calendar_name(calendar) << " " << fixed.units;
      }
    }
    EncodedTimes encoded = encode_times(six_hourly, calendar);
    EXPECT_EQ(encoded.units, "hours since 1979-01-01 00:00:00");
    EXPECT_EQ(encoded.values[3], 18.0);
  }
  EXPECT_EQ(encode_times({0, 86400}, Calendar::kStandard).units, "days since 1970-01-01 00:00:00");
  EXPECT_EQ(encode_times({0, 90}, Calendar::kStandard).units, "seconds since 1970-01-01 00:00:00");
}

// ---- Durations and dates from config text ------------------------------------------------------

TEST(CfTime, DurationsFromConfigText) {
  const std::pair<const char*, int64_t> kCases[] = {
      {"6h", 21600},   {"1h", 3600},    {"30min", 1800}, {"1d", 86400},   {"12H", 43200}, {"3600s", 3600},
      {"1w", 604800},  {"6H", 21600},   {"1D", 86400},   {"15T", 900},    {"H", 3600},    {"1.5h", 5400},
      {" 6 hours ", 21600}, {"-6h", -21600}, {"0s", 0},  {"2days", 172800}, {"2000ms", 2}};
  for (const auto& [text, seconds] : kCases) EXPECT_EQ(parse_duration(text), seconds) << text;
  EXPECT_NE(error_of([] { parse_duration("500ms"); }).find("whole number of seconds"), std::string::npos);
  for (const char* bad : {"", "6x", "h6", "6", "6m", "1.25s", "1month", "6h30min"}) {
    std::string message = error_of([&] { parse_duration(bad); });
    EXPECT_NE(message.find(std::string("'") + bad + "'"), std::string::npos) << bad << ": " << message;
    EXPECT_NE(message.find("6h"), std::string::npos) << message;  // shows examples
  }
  EXPECT_NE(error_of([] { parse_duration("6m"); }).find("ambiguous"), std::string::npos);
}

TEST(CfTime, FormatsDurations) {
  EXPECT_EQ(format_duration(21600), "6h");
  EXPECT_EQ(format_duration(86400), "1d");
  EXPECT_EQ(format_duration(1800), "30min");
  EXPECT_EQ(format_duration(90), "90s");
  EXPECT_EQ(format_duration(-21600), "-6h");
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(7 * 86400), "7d");
  for (int64_t seconds : {1, 59, 60, 3600, 5400, 86400, 90000, 604800})
    EXPECT_EQ(parse_duration(format_duration(seconds)), seconds);
}

TEST(CfTime, DatesFromConfigText) {
  EXPECT_EQ(parse_date("1979-01-01"), date(1979, 1, 1));
  EXPECT_EQ(parse_date("1979-01-01T06:00"), date(1979, 1, 1, 6));
  EXPECT_EQ(parse_date("1979-01-01 06:00:00"), date(1979, 1, 1, 6));
  EXPECT_EQ(parse_date("1979-01-01T06:00:00Z"), date(1979, 1, 1, 6));
  EXPECT_EQ(parse_date("1979-01-01T06:00:00+06:00"), date(1979, 1, 1));
  EXPECT_EQ(parse_date("2000-02-29", Calendar::kProlepticGregorian), date(2000, 2, 29));
  EXPECT_EQ(parse_date("2001-02-30", Calendar::k360Day), date(2001, 2, 30));
  for (const char* bad : {"1979/01/01", "79-01", "1979-01-01T", "1979-01-01T06:00:00 PST", "1979-13-01",
                          "1979-01-01T24:00", "yesterday", ""}) {
    std::string message = error_of([&] { parse_date(bad); });
    EXPECT_NE(message.find(std::string("'") + bad + "'"), std::string::npos) << bad << ": " << message;
  }
  std::string noleap = error_of([] { parse_date("2000-02-29", Calendar::kNoLeap); });
  EXPECT_NE(noleap.find("2000-02-29"), std::string::npos);
  EXPECT_NE(noleap.find("noleap"), std::string::npos);
  EXPECT_NE(error_of([] { parse_date("2001-02-30"); }).find("standard"), std::string::npos);
}

// ---- Errors name the value and what was expected -----------------------------------------------

TEST(CfTime, ErrorsNameTheTextAndWhatWasExpected) {
  std::string calendar = error_of([] { parse_calendar("gregorian_fancy"); });
  EXPECT_NE(calendar.find("gregorian_fancy"), std::string::npos);
  EXPECT_NE(calendar.find("proleptic_gregorian"), std::string::npos);
  EXPECT_NE(calendar.find("360_day"), std::string::npos);

  std::string common_years = error_of([] { parse_time_units("common_years since 2000-01-01", "standard"); });
  EXPECT_NE(common_years.find("common_years since 2000-01-01"), std::string::npos);
  EXPECT_NE(common_years.find("hours"), std::string::npos);
  EXPECT_NE(common_years.find("calendar months (months, years)"), std::string::npos);
  std::string unknown = error_of([] { parse_time_units("fortnights since 2000-01-01", "standard"); });
  EXPECT_NE(unknown.find("fortnights"), std::string::npos);
  std::string no_since = error_of([] { parse_time_units("hours after 2000-01-01", "standard"); });
  EXPECT_NE(no_since.find("hours after 2000-01-01"), std::string::npos);
  EXPECT_NE(no_since.find("since"), std::string::npos);
  std::string bad_epoch = error_of([] { parse_time_units("hours since 1979-13-01", "standard"); });
  EXPECT_NE(bad_epoch.find("1979-13-01"), std::string::npos);
  std::string garbled = error_of([] { parse_time_units("hours since the war", "standard"); });
  EXPECT_NE(garbled.find("the war"), std::string::npos);
  std::string noleap_epoch = error_of([] { parse_time_units("days since 2000-02-29", "noleap"); });
  EXPECT_NE(noleap_epoch.find("noleap"), std::string::npos);
  EXPECT_NE(noleap_epoch.find("2000-02-29"), std::string::npos);
  std::string bad_calendar = error_of([] { parse_time_units("days since 2000-01-01", "lunar"); });
  EXPECT_NE(bad_calendar.find("lunar"), std::string::npos);

  TimeUnits units = parse_time_units("hours since 1979-01-01", "standard");
  std::string nan = error_of([&] { decode_times({0, std::nan(""), 2}, units); });
  EXPECT_NE(nan.find("index 1"), std::string::npos) << nan;
  EXPECT_NE(nan.find("hours since 1979-01-01"), std::string::npos) << nan;
  std::string huge = error_of([&] { decode_times({9.96921e36}, units); });  // NetCDF's default fill
  EXPECT_NE(huge.find("9.96921"), std::string::npos) << huge;
  EXPECT_NE(huge.find("range"), std::string::npos) << huge;

  EXPECT_NE(error_of([] { to_seconds(date(2001, 2, 29), Calendar::kStandard); }).find("2001-02-29"),
            std::string::npos);
  EXPECT_NE(error_of([] { from_seconds(INT64_MAX, Calendar::kStandard); }).find("range"), std::string::npos);
  EXPECT_NE(error_of([] { encode_times({0}, Calendar::kStandard, "months", date(1970, 1, 1)); }).find("months"),
            std::string::npos);
}

// ---- Calendar months: "months since", "years since" and month steps ----------------------------

// Monthly files: whole months are calendar months in every calendar (the epoch's day and time,
// n months on); fractions only where a month has a fixed length (360_day).
TEST(CfTime, MonthsSinceAreCalendarMonths) {
  auto dates = [](const std::string& units, const std::string& calendar, const std::vector<double>& values) {
    std::vector<std::string> out;
    for (const DateTime& d : decode_dates(values, parse_time_units(units, calendar))) out.push_back(d.to_iso());
    return out;
  };
  using Dates = std::vector<std::string>;
  EXPECT_EQ(dates("months since 1990-01-01", "standard", {0, 1, 2, 13, 47, -1}),
            (Dates{"1990-01-01T00:00:00", "1990-02-01T00:00:00", "1990-03-01T00:00:00", "1991-02-01T00:00:00",
                   "1993-12-01T00:00:00", "1989-12-01T00:00:00"}));
  EXPECT_EQ(dates("months since 1990-01-15 12:00", "noleap", {1, 25}),
            (Dates{"1990-02-15T12:00:00", "1992-02-15T12:00:00"}));
  EXPECT_EQ(dates("month since 2000-02-29", "julian", {12 * 4}), (Dates{"2004-02-29T00:00:00"}));
  EXPECT_EQ(dates("years since 2000-03-01", "proleptic_gregorian", {0, 1, 100}),
            (Dates{"2000-03-01T00:00:00", "2001-03-01T00:00:00", "2100-03-01T00:00:00"}));
  // 360_day: a month is 30 days, so half a month is 15 days; a year is 360 days.
  EXPECT_EQ(dates("months since 1990-01-01", "360_day", {0.5, 1.5, 11.5, 12}),
            (Dates{"1990-01-16T00:00:00", "1990-02-16T00:00:00", "1990-12-16T00:00:00", "1991-01-01T00:00:00"}));
  EXPECT_EQ(dates("years since 1990-01-01", "360_day", {0.5, 2}), (Dates{"1990-07-01T00:00:00", "1992-01-01T00:00:00"}));
  const TimeUnits units = parse_time_units("months since 1990-01-01", "360_day");
  EXPECT_EQ(units.months_per_unit, 1);
  EXPECT_EQ(units.unit_name, "months");
  EXPECT_EQ(parse_time_units("years since 1990-01-01", "noleap").months_per_unit, 12);
}

// cftime decodes "months since" in the 360_day calendar (only there): the same dates.
TEST(CfTime, MonthsSinceIn360DayLikeCftime) {
  const std::vector<double> values = {0, 1, 11, 12, 13.5, 0.25, 47, 600, -7};
  std::vector<std::string> requests;
  for (double v : values) requests.push_back("num2date|360_day|months since 1990-01-01|" + print_value(v));
  std::string why_not;
  const std::vector<std::string> answers = run_cftime(requests, why_not);
  if (answers.empty()) GTEST_SKIP() << why_not;
  ASSERT_EQ(answers.size(), values.size());
  const std::vector<DateTime> ours = decode_dates(values, parse_time_units("months since 1990-01-01", "360_day"));
  for (size_t i = 0; i < values.size(); ++i) {
    std::istringstream in(answers[i]);
    int y, mo, d, h, mi, sec, us;
    ASSERT_TRUE(in >> y >> mo >> d >> h >> mi >> sec >> us) << answers[i];
    EXPECT_EQ(ours[i], date(y, mo, d, h, mi, sec)) << values[i] << ": cftime " << answers[i];
  }
}

// Where the calendar makes a month ambiguous: a refusal naming the value and the way out.
TEST(CfTime, AmbiguousMonthsAreRefused) {
  const TimeUnits standard = parse_time_units("months since 1990-01-01", "standard");
  const std::string half = error_of([&] { decode_times({0.0, 0.5}, standard); });
  EXPECT_NE(half.find("time value 0.5 (index 1) in months since 1990-01-01T00:00:00 (standard calendar) is a "
                      "fraction of a month"),
            std::string::npos)
      << half;
  EXPECT_NE(half.find("days since"), std::string::npos) << half;
  const TimeUnits end_of_month = parse_time_units("months since 1990-01-31", "standard");
  EXPECT_EQ(decode_dates({2}, end_of_month).front(), date(1990, 3, 31));
  const std::string february = error_of([&] { decode_times({1}, end_of_month); });
  EXPECT_NE(february.find("lands on 1990-02-31T00:00:00"), std::string::npos) << february;
  // Half a year is six whole months; a tenth of one is not.
  EXPECT_EQ(decode_dates({0.5}, parse_time_units("years since 1990-01-01", "noleap")).front(), date(1990, 7, 1));
  EXPECT_NE(error_of([&] { decode_times({0.1}, parse_time_units("years since 1990-01-01", "noleap")); })
                .find("fraction of a month"),
            std::string::npos);
  EXPECT_NE(error_of([&] { decode_times({std::nan("")}, standard); }).find("not a number"), std::string::npos);
}

TEST(CfTime, TimeStepsInCalendarMonths) {
  const std::pair<const char*, TimeStep> kCases[] = {
      {"1mo", {0, 1}},        {"3mo", {0, 3}},     {"12mo", {0, 12}}, {"1y", {0, 12}},  {"2 months", {0, 2}},
      {"1month", {0, 1}},     {"1MO", {0, 1}},     {"mo", {0, 1}},    {"1yr", {0, 12}}, {"1 year", {0, 12}},
      {"6h", {21600, 0}},     {"1d", {86400, 0}},  {"30min", {1800, 0}}};
  for (const auto& [text, step] : kCases) {
    const TimeStep parsed = parse_time_step(text);
    EXPECT_EQ(parsed.seconds, step.seconds) << text;
    EXPECT_EQ(parsed.months, step.months) << text;
  }
  for (const char* bad : {"1.5mo", "-1mo", "0mo", "0y"}) {
    const std::string message = error_of([&] { parse_time_step(bad); });
    EXPECT_NE(message.find(std::string("'") + bad + "'"), std::string::npos) << bad << ": " << message;
    EXPECT_NE(message.find("1mo"), std::string::npos) << message;
  }
  EXPECT_NE(error_of([] { parse_time_step("6m"); }).find("'mo' for calendar months"), std::string::npos);
  EXPECT_EQ(format_time_step({0, 3}), "3mo");
  EXPECT_EQ(format_time_step({21600, 0}), "6h");
  // In 360_day a month is a fixed 30 days.
  EXPECT_EQ(fixed_where_possible({0, 2}, Calendar::k360Day).seconds, 60 * 86400);
  EXPECT_EQ(fixed_where_possible({0, 2}, Calendar::kNoLeap).months, 2);
}

TEST(CfTime, OneMonthApartAndMonthsAfter) {
  const auto at = [](int y, int m, int d, int h = 0) { return to_seconds(date(y, m, d, h), Calendar::kStandard); };
  const TimeStep month{0, 1};
  // Monthly means stamped mid-month: 31 or 29.5 days apart, one month each.
  EXPECT_TRUE(one_step_after(at(1990, 1, 16, 12), at(1990, 2, 15), month, Calendar::kStandard));
  EXPECT_TRUE(one_step_after(at(1990, 12, 16, 12), at(1991, 1, 16, 12), month, Calendar::kStandard));
  EXPECT_FALSE(one_step_after(at(1990, 1, 1), at(1990, 3, 1), month, Calendar::kStandard));
  EXPECT_TRUE(one_step_after(at(1990, 1, 1), at(1990, 4, 1), TimeStep{0, 3}, Calendar::kStandard));
  EXPECT_TRUE(one_step_after(at(1990, 1, 1), at(1990, 1, 1, 6), TimeStep{21600, 0}, Calendar::kStandard));
  EXPECT_EQ(steps_after(at(1990, 1, 31), month, 1, Calendar::kStandard), at(1990, 2, 28));
  EXPECT_EQ(steps_after(at(1992, 1, 31), month, 1, Calendar::kStandard), at(1992, 2, 29));
  EXPECT_EQ(steps_after(at(1990, 11, 15, 12), month, 3, Calendar::kStandard), at(1991, 2, 15, 12));
  EXPECT_EQ(month_number(at(1990, 3, 31), Calendar::kStandard), 1990 * 12 + 2);
  EXPECT_EQ(add_months(date(1990, 1, 31), -2), date(1989, 11, 31));  // unchecked: valid_date says no
}
