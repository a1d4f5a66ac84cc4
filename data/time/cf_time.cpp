#include "data/time/cf_time.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <tuple>

#include "core/error.h"

namespace wxtrain::data {
namespace {

constexpr int64_t kSecondsPerDay = 86400;
// Time points stay within this many seconds of the origin (about 880,000 years), so that every
// sum and product below fits in int64 and every year in int.
constexpr int64_t kMaxAbsSeconds = 28'000'000'000'000;
constexpr int kMaxAbsYear = 800'000;

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

// Nearest integer to n / d (d > 0), halves away from zero.
int64_t rounded_div(int64_t n, int64_t d) {
  int64_t q = n / d;
  int64_t r = n % d;
  if (2 * (r < 0 ? -r : r) >= d) q += n < 0 ? -1 : 1;
  return q;
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string trim(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  size_t end = text.find_last_not_of(" \t\r\n");
  return text.substr(begin, end - begin + 1);
}

// The shortest text that reads back as `value` (9.96921e+36, not 9.9692099999999994e+36).
std::string format_number(double value) {
  char buffer[32];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

// ---- Day counts per calendar: days since the calendar's own 1970-01-01 -------------------------
// Each count works on March-based years (the leap day is the last day of the year), which makes
// the month lengths a fixed pattern: days before month index mp (0 = March) are (153 mp + 2) / 5.

int day_of_march_year(int month, int day) {
  return (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1;
}
void month_day_of_march_year(int64_t day_of_year, int& month, int& day) {
  int64_t mp = (5 * day_of_year + 2) / 153;
  day = static_cast<int>(day_of_year - (153 * mp + 2) / 5 + 1);
  month = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
}

// Gregorian, after Howard Hinnant's days_from_civil: 400-year eras of 146097 days.
int64_t gregorian_days(int64_t year, int month, int day) {
  year -= month <= 2;
  int64_t era = floor_div(year, 400);
  int64_t year_of_era = year - era * 400;
  int64_t day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_march_year(month, day);
  return era * 146097 + day_of_era - 719468;
}
void gregorian_date(int64_t days, DateTime& date) {
  days += 719468;
  int64_t era = floor_div(days, 146097);
  int64_t day_of_era = days - era * 146097;
  int64_t year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146096) / 365;
  int64_t day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
  month_day_of_march_year(day_of_year, date.month, date.day);
  date.year = static_cast<int>(year_of_era + era * 400 + (date.month <= 2));
}

// Julian: 4-year eras of 1461 days. Counted from an arbitrary fixed day; see julian_days.
int64_t julian_count(int64_t year, int month, int day) {
  year -= month <= 2;
  int64_t era = floor_div(year, 4);
  int64_t year_of_era = year - era * 4;
  return era * 1461 + year_of_era * 365 + day_of_march_year(month, day);
}
void julian_date_of_count(int64_t count, DateTime& date) {
  int64_t era = floor_div(count, 1461);
  int64_t day_of_era = count - era * 1461;
  int64_t year_of_era = (day_of_era - day_of_era / 1460) / 365;
  month_day_of_march_year(day_of_era - 365 * year_of_era, date.month, date.day);
  date.year = static_cast<int>(year_of_era + era * 4 + (date.month <= 2));
}

// In the julian calendar the origin is Julian 1970-01-01.
const int64_t kJulianOrigin = julian_count(1970, 1, 1);
// In the standard calendar the Julian part is counted in real days: Julian 1582-10-04 is the day
// before Gregorian 1582-10-15.
const int64_t kGregorianStart = gregorian_days(1582, 10, 15);
const int64_t kStandardJulianOrigin = julian_count(1582, 10, 4) + 1 - kGregorianStart;

constexpr int kDaysBeforeMonthNoLeap[13] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334, 365};
constexpr int kDaysBeforeMonthAllLeap[13] = {0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335, 366};

// Fixed-length years (noleap, all_leap): the table says where each month starts.
int64_t fixed_year_days(int64_t year, int month, int day, const int (&days_before)[13]) {
  return days_before[12] * (year - 1970) + days_before[month - 1] + day - 1;
}
void fixed_year_date(int64_t days, const int (&days_before)[13], DateTime& date) {
  int year_length = days_before[12];
  date.year = static_cast<int>(1970 + floor_div(days, year_length));
  int day_of_year = static_cast<int>(floor_mod(days, year_length));
  int month = 1;
  while (day_of_year >= days_before[month]) ++month;
  date.month = month;
  date.day = day_of_year - days_before[month - 1] + 1;
}

bool before_gregorian_reform(const DateTime& date) {
  return std::make_tuple(date.year, date.month, date.day) < std::make_tuple(1582, 10, 15);
}

int64_t days_since_origin(const DateTime& date, Calendar calendar) {
  switch (calendar) {
    case Calendar::kStandard:
      if (before_gregorian_reform(date)) return julian_count(date.year, date.month, date.day) - kStandardJulianOrigin;
      return gregorian_days(date.year, date.month, date.day);
    case Calendar::kProlepticGregorian:
      return gregorian_days(date.year, date.month, date.day);
    case Calendar::kJulian:
      return julian_count(date.year, date.month, date.day) - kJulianOrigin;
    case Calendar::kNoLeap:
      return fixed_year_days(date.year, date.month, date.day, kDaysBeforeMonthNoLeap);
    case Calendar::kAllLeap:
      return fixed_year_days(date.year, date.month, date.day, kDaysBeforeMonthAllLeap);
    case Calendar::k360Day:
      return 360 * (static_cast<int64_t>(date.year) - 1970) + 30 * (date.month - 1) + date.day - 1;
  }
  return 0;
}

void date_of_days(int64_t days, Calendar calendar, DateTime& date) {
  switch (calendar) {
    case Calendar::kStandard:
      if (days < kGregorianStart) return julian_date_of_count(days + kStandardJulianOrigin, date);
      return gregorian_date(days, date);
    case Calendar::kProlepticGregorian:
      return gregorian_date(days, date);
    case Calendar::kJulian:
      return julian_date_of_count(days + kJulianOrigin, date);
    case Calendar::kNoLeap:
      return fixed_year_date(days, kDaysBeforeMonthNoLeap, date);
    case Calendar::kAllLeap:
      return fixed_year_date(days, kDaysBeforeMonthAllLeap, date);
    case Calendar::k360Day:
      date.year = static_cast<int>(1970 + floor_div(days, 360));
      date.month = static_cast<int>(floor_mod(days, 360) / 30) + 1;
      date.day = static_cast<int>(floor_mod(days, 30)) + 1;
      return;
  }
}

// ---- Units -------------------------------------------------------------------------------------

struct UnitSpec {
  const char* canonical;
  int64_t seconds_per_unit;
  int64_t units_per_second;
};

const char* const kUnitExamples =
    "seconds (s, sec), minutes (min), hours (h, hr), days (d), weeks (w), milliseconds (ms), "
    "microseconds (us), nanoseconds (ns)";

// nullptr when `name` (lower case) is no time unit.
const UnitSpec* find_unit(const std::string& name) {
  static const UnitSpec kSeconds{"seconds", 1, 1}, kMinutes{"minutes", 60, 1}, kHours{"hours", 3600, 1},
      kDays{"days", kSecondsPerDay, 1}, kWeeks{"weeks", 7 * kSecondsPerDay, 1},
      kMilliseconds{"milliseconds", 1, 1000}, kMicroseconds{"microseconds", 1, 1'000'000},
      kNanoseconds{"nanoseconds", 1, 1'000'000'000};
  static const std::pair<const char*, const UnitSpec*> kNames[] = {
      {"seconds", &kSeconds},   {"second", &kSeconds},   {"secs", &kSeconds},     {"sec", &kSeconds},
      {"s", &kSeconds},         {"minutes", &kMinutes},  {"minute", &kMinutes},   {"mins", &kMinutes},
      {"min", &kMinutes},       {"hours", &kHours},      {"hour", &kHours},       {"hrs", &kHours},
      {"hr", &kHours},          {"h", &kHours},          {"days", &kDays},        {"day", &kDays},
      {"d", &kDays},            {"weeks", &kWeeks},      {"week", &kWeeks},       {"w", &kWeeks},
      {"milliseconds", &kMilliseconds}, {"millisecond", &kMilliseconds}, {"msecs", &kMilliseconds},
      {"msec", &kMilliseconds}, {"ms", &kMilliseconds},  {"microseconds", &kMicroseconds},
      {"microsecond", &kMicroseconds},  {"us", &kMicroseconds},         {"nanoseconds", &kNanoseconds},
      {"nanosecond", &kNanoseconds},    {"ns", &kNanoseconds}};
  for (const auto& [alias, spec] : kNames)
    if (name == alias) return spec;
  return nullptr;
}

// Months in one of the calendar units decode_times reads as calendar months: 1 for months, 12 for
// years; 0 for any other name.
int64_t calendar_months_of(const std::string& name) {
  if (name == "months" || name == "month" || name == "mon") return 1;
  if (name == "years" || name == "year" || name == "yr") return 12;
  return 0;
}

bool is_calendar_dependent_unit(const std::string& name) {
  static const char* const kNames[] = {"months", "month", "mon", "years", "year", "yr", "common_years",
                                       "common_year", "a"};
  return std::find_if(std::begin(kNames), std::end(kNames), [&](const char* n) { return name == n; }) !=
         std::end(kNames);
}

// ---- Date-time text ----------------------------------------------------------------------------
// One scanner for parse_date and the epoch of a units string (ISO 8601 and the UDUNITS forms):
//   [+-]Y-M-D [(T|spaces) h[:m[:s[.fff]]]] [spaces] [Z | UTC | GMT | (+|-)hh[[:]mm]]
// with one- or two-digit month, day, hour, minute and second ("1-1-1 0:0:0" is UDUNITS).

class Scanner {
 public:
  explicit Scanner(const std::string& text) : text_(text) {}
  bool done() const { return pos_ == text_.size(); }
  char peek() const { return done() ? '\0' : text_[pos_]; }
  bool take(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  bool take_word(const char* word) {  // case-insensitive
    size_t n = std::char_traits<char>::length(word);
    if (lower(text_.substr(pos_, n)) != word) return false;
    pos_ += n;
    return true;
  }
  size_t skip_spaces() {
    size_t start = pos_;
    while (peek() == ' ' || peek() == '\t') ++pos_;
    return pos_ - start;
  }
  // Unsigned decimal with min_digits..max_digits digits.
  bool number(int min_digits, int max_digits, int64_t& value) {
    int digits = 0;
    value = 0;
    while (digits < max_digits && std::isdigit(static_cast<unsigned char>(peek()))) {
      value = value * 10 + (text_[pos_++] - '0');
      ++digits;
    }
    return digits >= min_digits && !std::isdigit(static_cast<unsigned char>(peek()));
  }
  // ".ddd" -> the fraction; 0 without a '.' and after a bare '.' ("00:00:00." is seen in the wild).
  double fraction() {
    double value = 0, scale = 0.1;
    if (!take('.')) return value;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      value += scale * (text_[pos_++] - '0');
      scale /= 10;
    }
    return value;
  }

 private:
  const std::string& text_;
  size_t pos_ = 0;
};

bool scan_utc_offset(Scanner& in, int64_t& offset_seconds) {
  offset_seconds = 0;
  if (in.take('Z') || in.take('z') || in.take_word("utc") || in.take_word("gmt")) return true;
  int sign = in.take('+') ? 1 : in.take('-') ? -1 : 0;
  if (sign == 0) return false;
  int64_t hours = 0, minutes = 0;
  if (!in.number(1, 4, hours)) return false;
  if (hours >= 100) {  // "+0530"
    minutes = hours % 100;
    hours /= 100;
  } else if (in.take(':') && !in.number(2, 2, minutes)) {
    return false;
  }
  if (hours > 23 || minutes > 59) return false;
  offset_seconds = sign * (hours * 3600 + minutes * 60);
  return true;
}

// False on text that is no date-time; fields are not range-checked here (valid_date does that).
bool scan_date_time(const std::string& raw, DateTime& date, int64_t& offset_seconds) {
  std::string text = trim(raw);
  Scanner in(text);
  offset_seconds = 0;
  int year_sign = in.take('-') ? -1 : (in.take('+'), 1);
  int64_t year, month, day;
  if (!in.number(1, 7, year) || !in.take('-') || !in.number(1, 2, month) || !in.take('-') ||
      !in.number(1, 2, day))
    return false;
  date = DateTime{static_cast<int>(year_sign * year), static_cast<int>(month), static_cast<int>(day), 0, 0, 0.0};
  if (in.done()) return true;
  bool time_follows = in.take('T') || in.take('t');
  if (!time_follows) {
    if (in.skip_spaces() == 0) return false;
    time_follows = std::isdigit(static_cast<unsigned char>(in.peek()));
  }
  if (time_follows) {
    int64_t hour, minute = 0, second = 0;
    double fraction = 0;
    if (!in.number(1, 2, hour)) return false;
    if (in.take(':')) {
      if (!in.number(1, 2, minute)) return false;
      if (in.take(':')) {
        if (!in.number(1, 2, second)) return false;
        fraction = in.fraction();
      }
    }
    date.hour = static_cast<int>(hour);
    date.minute = static_cast<int>(minute);
    date.second = static_cast<double>(second) + fraction;
    in.skip_spaces();
  }
  if (in.done()) return true;
  if (!scan_utc_offset(in, offset_seconds)) return false;
  in.skip_spaces();
  return in.done();
}

DateTime shift_to_utc(const DateTime& local, int64_t offset_seconds, Calendar calendar) {
  if (offset_seconds == 0) return local;
  return from_seconds(to_seconds(local, calendar) - offset_seconds, calendar);
}

std::string units_text(const TimeUnits& units) { return units.unit_name + " since " + units.epoch.to_iso(); }

}  // namespace

// ---- Calendars ---------------------------------------------------------------------------------

Calendar parse_calendar(const std::string& name) {
  std::string key = lower(trim(name));
  if (key.empty() || key == "standard" || key == "gregorian") return Calendar::kStandard;
  if (key == "proleptic_gregorian") return Calendar::kProlepticGregorian;
  if (key == "noleap" || key == "365_day") return Calendar::kNoLeap;
  if (key == "all_leap" || key == "366_day") return Calendar::kAllLeap;
  if (key == "360_day") return Calendar::k360Day;
  if (key == "julian") return Calendar::kJulian;
  throw DataError("unknown calendar '" + name +
                  "': expected one of the CF calendars standard, gregorian, proleptic_gregorian, noleap, "
                  "365_day, all_leap, 366_day, 360_day, julian");
}

std::string calendar_name(Calendar calendar) {
  switch (calendar) {
    case Calendar::kStandard: return "standard";
    case Calendar::kProlepticGregorian: return "proleptic_gregorian";
    case Calendar::kNoLeap: return "noleap";
    case Calendar::kAllLeap: return "all_leap";
    case Calendar::k360Day: return "360_day";
    case Calendar::kJulian: return "julian";
  }
  return "standard";
}

// ---- DateTime ----------------------------------------------------------------------------------

std::string DateTime::to_iso() const {
  char buffer[64];
  int whole_seconds = static_cast<int>(std::floor(second));
  long milliseconds = std::lround((second - whole_seconds) * 1000.0);
  if (milliseconds == 1000) {  // 59.9996 s: shown as 59.999 rather than carrying into the minute
    milliseconds = 999;
  }
  std::snprintf(buffer, sizeof buffer, "%s%04d-%02d-%02dT%02d:%02d:%02d", year < 0 ? "-" : "",
                year < 0 ? -year : year, month, day, hour, minute, whole_seconds);
  std::string iso = buffer;
  if (milliseconds != 0) {
    std::snprintf(buffer, sizeof buffer, ".%03ld", milliseconds);
    std::string fraction = buffer;
    while (fraction.back() == '0') fraction.pop_back();
    iso += fraction;
  }
  return iso;
}

namespace {
auto fields(const DateTime& d) { return std::make_tuple(d.year, d.month, d.day, d.hour, d.minute, d.second); }
}  // namespace
bool operator==(const DateTime& a, const DateTime& b) { return fields(a) == fields(b); }
bool operator!=(const DateTime& a, const DateTime& b) { return fields(a) != fields(b); }
bool operator<(const DateTime& a, const DateTime& b) { return fields(a) < fields(b); }
bool operator<=(const DateTime& a, const DateTime& b) { return fields(a) <= fields(b); }
bool operator>(const DateTime& a, const DateTime& b) { return fields(a) > fields(b); }
bool operator>=(const DateTime& a, const DateTime& b) { return fields(a) >= fields(b); }

int days_in_month(int year, int month, Calendar calendar) {
  static constexpr int kLengths[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (month < 1 || month > 12) return 0;
  if (calendar == Calendar::k360Day) return 30;
  if (month != 2) return kLengths[month - 1];
  bool julian_leap = floor_mod(year, 4) == 0;
  bool gregorian_leap = julian_leap && (floor_mod(year, 100) != 0 || floor_mod(year, 400) == 0);
  switch (calendar) {
    case Calendar::kStandard: return 28 + (year < 1582 ? julian_leap : gregorian_leap);
    case Calendar::kProlepticGregorian: return 28 + gregorian_leap;
    case Calendar::kJulian: return 28 + julian_leap;
    case Calendar::kNoLeap: return 28;
    case Calendar::kAllLeap: return 29;
    case Calendar::k360Day: return 30;
  }
  return 0;
}

bool valid_date(const DateTime& date, Calendar calendar) {
  if (date.year < -kMaxAbsYear || date.year > kMaxAbsYear) return false;
  if (date.month < 1 || date.month > 12) return false;
  if (date.day < 1 || date.day > days_in_month(date.year, date.month, calendar)) return false;
  if (calendar == Calendar::kStandard && date.year == 1582 && date.month == 10 && date.day > 4 && date.day < 15)
    return false;  // the ten days the Gregorian reform skipped
  if (date.hour < 0 || date.hour > 23 || date.minute < 0 || date.minute > 59) return false;
  return date.second >= 0.0 && date.second < 60.0;
}

int64_t to_seconds(const DateTime& date, Calendar calendar) {
  if (!valid_date(date, calendar))
    throw DataError("date " + date.to_iso() + " does not exist in the " + calendar_name(calendar) +
                    " calendar: expected month 1-12, a day within that month (" +
                    std::to_string(days_in_month(date.year, date.month, calendar)) +
                    " days here), hour 0-23, minute 0-59, second 0-59, year within +-800000");
  return days_since_origin(date, calendar) * kSecondsPerDay + date.hour * 3600 + date.minute * 60 +
         std::llround(date.second);
}

DateTime from_seconds(int64_t seconds, Calendar calendar) {
  if (seconds < -kMaxAbsSeconds || seconds > kMaxAbsSeconds)
    throw DataError("time point " + std::to_string(seconds) +
                    " s from 1970-01-01 is outside the supported range: expected within +-2.8e13 s "
                    "(about 880000 years)");
  DateTime date;
  date_of_days(floor_div(seconds, kSecondsPerDay), calendar, date);
  int64_t second_of_day = floor_mod(seconds, kSecondsPerDay);
  date.hour = static_cast<int>(second_of_day / 3600);
  date.minute = static_cast<int>(second_of_day / 60 % 60);
  date.second = static_cast<double>(second_of_day % 60);
  return date;
}

// ---- Units -------------------------------------------------------------------------------------

TimeUnits parse_time_units(const std::string& units, Calendar calendar) {
  const std::string text = trim(units);
  const std::string folded = lower(text);
  const std::string example = "expected '<unit> since <date>', e.g. 'hours since 1979-01-01 00:00:00'";
  size_t since = folded.find(" since ");
  if (since == std::string::npos) throw DataError("time units '" + units + "' are not CF time units: " + example);
  std::string unit_name = trim(folded.substr(0, since));
  std::string epoch_text = trim(text.substr(since + 7));
  const int64_t months = calendar_months_of(unit_name);
  if (months == 0 && is_calendar_dependent_unit(unit_name))
    throw DataError("time units '" + units + "': '" + unit_name + "' has no fixed length; expected one of " +
                    kUnitExamples + ", or calendar months (months, years)");
  const UnitSpec* spec = months != 0 ? nullptr : find_unit(unit_name);
  if (months == 0 && spec == nullptr)
    throw DataError("time units '" + units + "': unknown unit '" + unit_name + "'; expected one of " + kUnitExamples +
                    ", or calendar months (months, years)");
  DateTime epoch;
  int64_t offset_seconds = 0;
  if (!scan_date_time(epoch_text, epoch, offset_seconds))
    throw DataError("time units '" + units + "': cannot read the date '" + epoch_text +
                    "'; expected YYYY-MM-DD[ hh:mm:ss][ UTC|Z|+hh:mm], e.g. 'hours since 1979-01-01 00:00:00'");
  if (!valid_date(epoch, calendar))
    throw DataError("time units '" + units + "': the date " + epoch.to_iso() + " does not exist in the " +
                    calendar_name(calendar) + " calendar");
  TimeUnits parsed;
  if (months != 0) {
    parsed.seconds_per_unit = 0;
    parsed.months_per_unit = months;
    parsed.unit_name = months == 1 ? "months" : "years";
  } else {
    parsed.seconds_per_unit = spec->seconds_per_unit;
    parsed.units_per_second = spec->units_per_second;
    parsed.unit_name = spec->canonical;
  }
  parsed.calendar = calendar;
  parsed.epoch = shift_to_utc(epoch, offset_seconds, calendar);
  return parsed;
}

TimeUnits parse_time_units(const std::string& units, const std::string& calendar) {
  return parse_time_units(units, parse_calendar(calendar));
}

namespace {

// decode_times for "months since" and "years since": calendar months (see cf_time.h).
std::vector<int64_t> decode_calendar_months(const std::vector<double>& values, const TimeUnits& units) {
  const int64_t epoch = to_seconds(units.epoch, units.calendar);
  std::vector<int64_t> seconds(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double value = values[i];
    auto refused = [&](const std::string& why) {
      return DataError("time value " + format_number(value) + " (index " + std::to_string(i) + ") in " +
                       units_text(units) + " (" + calendar_name(units.calendar) + " calendar) " + why);
    };
    if (!std::isfinite(value)) throw refused("is not a number: expected a finite time (a fill value?)");
    const double months = value * static_cast<double>(units.months_per_unit);
    if (std::fabs(months) > 12.0 * kMaxAbsYear)
      throw refused("is outside the supported range: expected within about 800000 years of the epoch");
    if (months == std::trunc(months)) {
      const DateTime date = add_months(units.epoch, static_cast<int64_t>(months));
      if (!valid_date(date, units.calendar))
        throw refused("lands on " + date.to_iso() + ", a day that month does not have (the epoch's day " +
                      std::to_string(units.epoch.day) + " is not in every month, so whole months from it are "
                      "ambiguous): expected an epoch on a day every month has (1-28), or time units of days");
      seconds[i] = to_seconds(date, units.calendar);
    } else if (units.calendar == Calendar::k360Day) {
      seconds[i] = epoch + std::llround(months * 30.0 * kSecondsPerDay);  // every month is 30 days
    } else {
      throw refused("is a fraction of a month, and months differ in length in the " + calendar_name(units.calendar) +
                    " calendar (only 360_day months are a fixed 30 days): expected whole months, or time "
                    "units of days (\"days since ...\")");
    }
    if (seconds[i] < -kMaxAbsSeconds || seconds[i] > kMaxAbsSeconds)
      throw refused("is outside the supported range: expected within about 880000 years of 1970");
  }
  return seconds;
}

}  // namespace

std::vector<int64_t> decode_times(const std::vector<double>& values, const TimeUnits& units) {
  if (units.months_per_unit != 0) return decode_calendar_months(values, units);
  const int64_t epoch = to_seconds(units.epoch, units.calendar);
  std::vector<int64_t> seconds(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double value = values[i];
    auto out_of_range = [&](const char* why) {
      return DataError("time value " + format_number(value) + " (index " + std::to_string(i) + ") in " +
                       units_text(units) + " (" + calendar_name(units.calendar) + " calendar) " + why);
    };
    if (!std::isfinite(value)) throw out_of_range("is not a number: expected a finite time (a fill value?)");
    // Beyond this no offset fits the supported range; checking first keeps the casts defined.
    const long double offset_estimate =
        static_cast<long double>(value) * units.seconds_per_unit / units.units_per_second;
    if (std::fabs(offset_estimate) > 2.0L * kMaxAbsSeconds)
      throw out_of_range("is outside the supported range: expected within about 880000 years of 1970");
    int64_t offset;
    if (value == std::trunc(value) && std::fabs(value) < 9007199254740992.0) {
      // Exact for the int64 counts xarray writes.
      const int64_t count = static_cast<int64_t>(value);
      offset = units.units_per_second == 1 ? count * units.seconds_per_unit
                                           : rounded_div(count, units.units_per_second);
    } else {
      offset = std::llround(offset_estimate);
    }
    seconds[i] = epoch + offset;
    if (seconds[i] < -kMaxAbsSeconds || seconds[i] > kMaxAbsSeconds)
      throw out_of_range("is outside the supported range: expected within about 880000 years of 1970");
  }
  return seconds;
}

std::vector<DateTime> decode_dates(const std::vector<double>& values, const TimeUnits& units) {
  std::vector<int64_t> seconds = decode_times(values, units);
  std::vector<DateTime> dates;
  dates.reserve(seconds.size());
  for (int64_t s : seconds) dates.push_back(from_seconds(s, units.calendar));
  return dates;
}

EncodedTimes encode_times(const std::vector<int64_t>& seconds, Calendar calendar, const std::string& unit,
                          const DateTime& epoch) {
  const UnitSpec* spec = find_unit(lower(trim(unit)));
  if (spec == nullptr)
    throw DataError("time unit '" + unit + "' to write is unknown: expected one of " + kUnitExamples);
  // Whole seconds, so that the units string states the epoch exactly.
  const int64_t epoch_seconds = to_seconds(epoch, calendar);
  std::string epoch_text = from_seconds(epoch_seconds, calendar).to_iso();
  epoch_text[epoch_text.find('T')] = ' ';
  EncodedTimes encoded;
  encoded.units = std::string(spec->canonical) + " since " + epoch_text;
  encoded.values.reserve(seconds.size());
  for (int64_t s : seconds) {
    const int64_t offset = s - epoch_seconds;
    if (spec->units_per_second != 1) {
      encoded.values.push_back(static_cast<double>(static_cast<long double>(offset) * spec->units_per_second));
    } else {
      // Quotient and remainder separately: the whole part stays exact up to 2^53 units.
      const int64_t whole = offset / spec->seconds_per_unit;
      const int64_t rest = offset % spec->seconds_per_unit;
      encoded.values.push_back(static_cast<double>(whole) +
                               static_cast<double>(rest) / static_cast<double>(spec->seconds_per_unit));
    }
  }
  return encoded;
}

EncodedTimes encode_times(const std::vector<int64_t>& seconds, Calendar calendar) {
  const int64_t epoch = seconds.empty() ? 0 : seconds.front();
  const char* unit = "days";
  for (const auto& candidate : {std::pair<const char*, int64_t>{"days", kSecondsPerDay},
                                 {"hours", 3600}, {"minutes", 60}, {"seconds", 1}}) {
    unit = candidate.first;
    const int64_t length = candidate.second;
    if (std::all_of(seconds.begin(), seconds.end(), [&](int64_t s) { return (s - epoch) % length == 0; })) break;
  }
  return encode_times(seconds, calendar, unit, from_seconds(epoch, calendar));
}

// ---- Durations ---------------------------------------------------------------------------------

int64_t parse_duration(const std::string& text) {
  const std::string examples = "expected a number and a unit, e.g. '6h', '30min', '1d', '3600s', '1w', '1.5h', "
                               "or a pandas frequency such as '6H', '1D', '15T'";
  auto bad = [&](const std::string& why) { return DataError("duration '" + text + "' " + why + ": " + examples); };
  std::string body = trim(text);
  size_t pos = 0;
  int sign = 1;
  if (pos < body.size() && (body[pos] == '+' || body[pos] == '-')) sign = body[pos++] == '-' ? -1 : 1;
  // The number as digits / 10^fraction_digits, exactly; 128 bits (GCC and Clang) so that 18 digits
  // times a week's seconds cannot overflow.
  __int128 digits = 0;
  int integer_digits = 0, fraction_digits = 0;
  while (pos < body.size() && std::isdigit(static_cast<unsigned char>(body[pos])) && integer_digits < 18) {
    digits = digits * 10 + (body[pos++] - '0');
    ++integer_digits;
  }
  if (pos < body.size() && body[pos] == '.') {
    ++pos;
    while (pos < body.size() && std::isdigit(static_cast<unsigned char>(body[pos])) && fraction_digits < 9) {
      digits = digits * 10 + (body[pos++] - '0');
      ++fraction_digits;
    }
  }
  if (pos < body.size() && std::isdigit(static_cast<unsigned char>(body[pos]))) throw bad("has too many digits");
  const bool has_number = integer_digits + fraction_digits > 0;
  if (!has_number) digits = 1;  // pandas: "H" is one hour
  std::string unit_name = lower(trim(body.substr(pos)));
  if (unit_name.empty()) throw bad(has_number ? "has no unit" : "is empty");
  if (unit_name == "m")
    throw bad("is ambiguous ('m' could be minutes or months): write 'min' for minutes (or, in data.time_step, "
              "'mo' for calendar months)");
  if (unit_name == "t") unit_name = "min";  // pandas' alias for minutes
  if (is_calendar_dependent_unit(unit_name)) throw bad("uses '" + unit_name + "', which has no fixed length");
  const UnitSpec* spec = find_unit(unit_name);
  if (spec == nullptr) throw bad("has an unknown unit '" + unit_name + "'");
  __int128 denominator = spec->units_per_second;
  for (int i = 0; i < fraction_digits; ++i) denominator *= 10;
  const __int128 numerator = digits * spec->seconds_per_unit;
  if (numerator % denominator != 0) throw bad("is not a whole number of seconds");
  const __int128 seconds = numerator / denominator;
  if (seconds > kMaxAbsSeconds) throw bad("is longer than the supported range (about 880000 years)");
  return sign * static_cast<int64_t>(seconds);
}

std::string format_duration(int64_t seconds) {
  if (seconds == 0) return "0s";
  const std::string sign = seconds < 0 ? "-" : "";
  // Unsigned so that INT64_MIN has a magnitude.
  const uint64_t magnitude = seconds < 0 ? 0 - static_cast<uint64_t>(seconds) : static_cast<uint64_t>(seconds);
  for (const auto& [suffix, length] : {std::pair<const char*, uint64_t>{"d", kSecondsPerDay},
                                       {"h", 3600}, {"min", 60}}) {
    if (magnitude % length == 0) return sign + std::to_string(magnitude / length) + suffix;
  }
  return sign + std::to_string(magnitude) + "s";
}

// ---- Calendar months and time steps ------------------------------------------------------------

int64_t month_number(int64_t seconds, Calendar calendar) {
  const DateTime date = from_seconds(seconds, calendar);
  return static_cast<int64_t>(date.year) * 12 + date.month - 1;
}

DateTime add_months(const DateTime& date, int64_t months) {
  const int64_t count = static_cast<int64_t>(date.year) * 12 + date.month - 1 + months;
  DateTime out = date;
  out.year = static_cast<int>(floor_div(count, 12));
  out.month = static_cast<int>(floor_mod(count, 12)) + 1;
  return out;
}

TimeStep parse_time_step(const std::string& text) {
  // Months in a step's unit: the calendar units of time coordinates plus the short "mo" and "y".
  auto months_of = [](const std::string& unit) -> int64_t {
    if (unit == "mo") return 1;
    if (unit == "y") return 12;
    return calendar_months_of(unit);
  };
  const std::string examples = "e.g. '6h', '1d', or calendar months '1mo', '3mo', '1y' (12 months)";
  const std::string body = lower(trim(text));
  const size_t digits = body.find_first_not_of("0123456789");
  const std::string number = body.substr(0, digits);
  const int64_t per_unit = digits == std::string::npos ? 0 : months_of(trim(body.substr(digits)));
  if (per_unit == 0) {
    // A fraction or a sign before a month unit ("1.5mo", "-1mo") is a month step, and a bad one.
    const size_t letters = body.find_first_not_of("+-.0123456789 ");
    if (letters != std::string::npos && months_of(body.substr(letters)) != 0)
      throw DataError("time step '" + text + "' must be a whole, positive number of calendar months: " + examples);
    TimeStep step;
    step.seconds = parse_duration(text);
    return step;
  }
  if (number.size() > 6) throw DataError("time step '" + text + "' is too long: " + examples);
  const int64_t count = number.empty() ? 1 : std::stoll(number);
  if (count == 0) throw DataError("time step '" + text + "' must be at least one month: " + examples);
  TimeStep step;
  step.months = count * per_unit;
  return step;
}

std::string format_time_step(const TimeStep& step) {
  if (step.months != 0) return std::to_string(step.months) + "mo";
  return format_duration(step.seconds);
}

TimeStep fixed_where_possible(const TimeStep& step, Calendar calendar) {
  if (step.months == 0 || calendar != Calendar::k360Day) return step;
  TimeStep fixed;
  fixed.seconds = step.months * 30 * kSecondsPerDay;
  return fixed;
}

bool one_step_after(int64_t a, int64_t b, const TimeStep& step, Calendar calendar) {
  if (step.months == 0) return b - a == step.seconds;
  return month_number(b, calendar) - month_number(a, calendar) == step.months;
}

int64_t steps_after(int64_t seconds, const TimeStep& step, int64_t steps, Calendar calendar) {
  if (step.months == 0) return seconds + steps * step.seconds;
  DateTime date = add_months(from_seconds(seconds, calendar), steps * step.months);
  date.day = std::min(date.day, days_in_month(date.year, date.month, calendar));
  return to_seconds(date, calendar);
}

// ---- Dates from text ---------------------------------------------------------------------------

DateTime parse_date(const std::string& text, Calendar calendar) {
  DateTime date;
  int64_t offset_seconds = 0;
  if (!scan_date_time(text, date, offset_seconds))
    throw DataError("date '" + text +
                    "' cannot be read: expected YYYY-MM-DD[Thh:mm[:ss]][Z|+hh:mm], e.g. '1979-01-01', "
                    "'1979-01-01T06:00', '1979-01-01 06:00:00'");
  if (!valid_date(date, calendar))
    throw DataError("date '" + text + "' does not exist in the " + calendar_name(calendar) +
                    " calendar (month 1-12, " + std::to_string(days_in_month(date.year, date.month, calendar)) +
                    " days in that month, hour 0-23, minute 0-59, second 0-59)");
  return shift_to_utc(date, offset_seconds, calendar);
}

}  // namespace wxtrain::data
