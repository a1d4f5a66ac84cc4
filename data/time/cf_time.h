#pragma once
// CF time, decoded the way it is stored: a time coordinate is numbers plus a units attribute
// ("hours since 1979-01-01") and a calendar attribute ("standard", "noleap", "360_day", ...).
// This module turns those into time points that can be compared, spaced and formatted, and
// writes them back (the forecast writer). Torch-free, no dependencies beyond the standard library.
//
// A time point is an int64 count of seconds since 1970-01-01T00:00:00 *in its calendar*: in every
// calendar the origin is that calendar's own 1970-01-01, so a standard/proleptic time point is the
// Unix time of the date (for dates after 1582-10-15), and spacing and sorting are integer
// arithmetic. Time points of different calendars are not comparable; nothing here mixes them.
//
// Resolution is one second: fractional seconds (in DateTime::second, in a units epoch, or from a
// value such as 0.0001 hours) are rounded to the nearest second, half away from zero. Weather
// archives step in minutes or hours; sub-second CF time is not something we train on.
//
// As CF says, leap seconds are ignored: every day has 86400 seconds in every calendar.
// Years are astronomical (year 0 exists, year -1 is 2 BC) in every calendar; cftime agrees for
// proleptic_gregorian and the idealized calendars and numbers standard/julian years before 1 AD
// differently, which no weather archive reaches.
//
// Every failure is a wxtrain::DataError (core/error.h) naming the text or value at fault and what
// was expected.
#include <cstdint>
#include <string>
#include <vector>

namespace wxtrain::data {

enum class Calendar {
  kStandard,            // "standard"/"gregorian": Julian up to 1582-10-04, Gregorian from 1582-10-15
  kProlepticGregorian,  // "proleptic_gregorian": Gregorian rules for every year
  kNoLeap,              // "noleap"/"365_day": February always has 28 days
  kAllLeap,             // "all_leap"/"366_day": February always has 29 days
  k360Day,              // "360_day": twelve months of 30 days
  kJulian,              // "julian": a leap year every 4 years
};

// CF calendar names, case-insensitive: standard, gregorian, proleptic_gregorian, noleap, 365_day,
// all_leap, 366_day, 360_day, julian. "" is standard (CF's default when the attribute is absent).
// Unknown names (including "none", which CF allows for data without a calendar) throw, listing
// the accepted names.
Calendar parse_calendar(const std::string& name);
// The CF name to write back: "standard", "proleptic_gregorian", "noleap", "all_leap", "360_day",
// "julian".
std::string calendar_name(Calendar calendar);

struct DateTime {
  int year = 1970;
  int month = 1;   // 1..12
  int day = 1;     // 1..31 (1..30 in 360_day)
  int hour = 0;    // 0..23
  int minute = 0;  // 0..59
  double second = 0.0;  // [0, 60): leap seconds do not exist in CF time

  // "YYYY-MM-DDTHH:MM:SS" (years below 1000 zero-padded, negative years with a leading '-');
  // fractional seconds, when present, follow as ".sss" (milliseconds, trailing zeros dropped).
  std::string to_iso() const;
};
// Field by field (year first): the calendar order of dates in any one calendar.
bool operator==(const DateTime& a, const DateTime& b);
bool operator!=(const DateTime& a, const DateTime& b);
bool operator<(const DateTime& a, const DateTime& b);
bool operator<=(const DateTime& a, const DateTime& b);
bool operator>(const DateTime& a, const DateTime& b);
bool operator>=(const DateTime& a, const DateTime& b);

// Whether the date exists in the calendar: month 1..12, the day within that month's length (Feb 29
// only in leap years of standard/proleptic/julian, never in noleap, always in all_leap; Feb 30 only
// in 360_day; 1582-10-05..14 not in standard), hour 0..23, minute 0..59, second in [0, 60).
bool valid_date(const DateTime& date, Calendar calendar);
// Days in a month of a year in the calendar (October 1582 in standard has 31 day numbers of which
// ten do not exist: 31 is returned; valid_date knows about the gap).
int days_in_month(int year, int month, Calendar calendar);

// Seconds since the calendar's 1970-01-01T00:00:00 (see the top of this file). to_seconds throws
// on a date that valid_date rejects and on years beyond +-800,000; from_seconds throws beyond
// 2.8e13 seconds (about 880,000 years) either side of the origin.
int64_t to_seconds(const DateTime& date, Calendar calendar);
DateTime from_seconds(int64_t seconds, Calendar calendar);

// A CF time units attribute, "<unit> since <epoch>". A unit lasts seconds_per_unit seconds, or for
// the sub-second units (milliseconds, microseconds, nanoseconds) 1/units_per_second of a second;
// one of the two is always 1. The calendar units "months" and "years" have months_per_unit 1 and
// 12 instead (seconds_per_unit is then 0): see decode_times. The epoch is normalized to UTC (a
// "+06:00" offset is subtracted).
struct TimeUnits {
  int64_t seconds_per_unit = 1;
  int64_t units_per_second = 1;
  int64_t months_per_unit = 0;
  std::string unit_name;  // canonical plural: "seconds", "minutes", "hours", "days", "weeks", "months", "years"
  DateTime epoch;
  Calendar calendar = Calendar::kStandard;
};

// Parses the CF/UDUNITS forms found in archives:
//   "hours since 1979-01-01", "hours since 1979-01-01 00:00:00", "days since 1900-01-01T00:00:00Z",
//   "seconds since 1970-01-01 00:00:00.0", "days since 1-1-1", "hours since 1979-1-1 0:0:0 UTC",
//   "minutes since 2000-01-01 06:00 +00:00".
// Units (case-insensitive): seconds/second/secs/sec/s, minutes/minute/mins/min, hours/hour/hrs/hr/h,
// days/day/d, weeks/week/w, milliseconds/millisecond/msecs/msec/ms, microseconds/us,
// nanoseconds/ns, and the calendar units months/month/mon and years/year/yr. CF advises against
// the last two (UDUNITS' year is 365.242198781 days), but monthly climate output and monthly
// reanalysis means use them, meaning calendar months: they are decoded as such (decode_times),
// never as UDUNITS' fractions of a tropical year. The epoch must be a valid date in `calendar`.
TimeUnits parse_time_units(const std::string& units, const std::string& calendar);
TimeUnits parse_time_units(const std::string& units, Calendar calendar);

// Values of a CF time variable -> time points (seconds in units.calendar). An integral value is
// multiplied exactly in int64 (xarray writes int64 counts: "hours since 1979-01-01" 376944 is
// exactly 2022-01-01T00:00); a fractional one is rounded to the nearest second. NaN, infinities
// and values beyond the supported range throw, naming the value and its index.
//
// Months and years are calendar months, as cftime decodes "months since" in the 360_day calendar
// and as a climate scientist reads them in any calendar: a whole number n is the epoch's day of
// the month and time of day, n months (12 n for years) later ("months since 1990-01-15" 13 is
// 1991-02-15). A fraction of a month is only unambiguous in 360_day, where every month has 30
// days (0.5 is 15 days); elsewhere it throws, as does a whole number that lands on a day the
// month lacks ("months since 1990-01-31" 1: February 31), naming the value, its index and what
// would decode it (whole months, or units of days).
std::vector<int64_t> decode_times(const std::vector<double>& values, const TimeUnits& units);
// The same, as dates.
std::vector<DateTime> decode_dates(const std::vector<double>& values, const TimeUnits& units);

// What a CF time variable is written as: its units attribute and its values (write
// calendar_name(calendar) as the calendar attribute).
struct EncodedTimes {
  std::string units;           // "hours since 1979-01-01 00:00:00"
  std::vector<double> values;  // (t - epoch) / unit: whole numbers when the unit divides the spacing
};
// Time points -> values in `unit` (any name parse_time_units accepts, e.g. "hours") since `epoch`
// (a valid date in the calendar). Values are exact up to 2^53 units.
EncodedTimes encode_times(const std::vector<int64_t>& seconds, Calendar calendar,
                          const std::string& unit, const DateTime& epoch);
// What xarray does when it chooses: the epoch is the first time point (1970-01-01 if none) and the
// unit the coarsest of days, hours, minutes, seconds that keeps every value a whole number.
EncodedTimes encode_times(const std::vector<int64_t>& seconds, Calendar calendar);

// A duration in seconds from config text: "6h", "1h", "30min", "1d", "12H", "3600s", "1w", "1.5h",
// and pandas frequency strings "6H", "1D", "15T", "H" (no number = 1). Units as in
// parse_time_units plus pandas' "T" for minutes; case-insensitive; an optional sign. "m"/"M" are
// rejected as ambiguous (minutes or months?). The result must be a whole number of seconds.
int64_t parse_duration(const std::string& text);
// The largest of d, h, min, s that divides the duration: "6h", "1d", "30min", "90s", "-6h", "0s".
std::string format_duration(int64_t seconds);

// The count of a time point's month, year * 12 + month - 1: consecutive months differ by one in
// every calendar.
int64_t month_number(int64_t seconds, Calendar calendar);
// The same day of the month and time of day, `months` calendar months later (earlier when
// negative); the day may not exist there (January 31 + 1): check with valid_date.
DateTime add_months(const DateTime& date, int64_t months);

// A model's time step, data.time_step: a fixed duration, or whole calendar months.
struct TimeStep {
  int64_t seconds = 0;  // a fixed step ("6h", "1d"), 0 for a month step
  int64_t months = 0;   // a calendar step ("1mo", "3mo", "1y" = 12 months), 0 for a fixed one
};
// What parse_duration reads, and whole calendar months: "1mo", "3mo", "1month", "2 months", "1y",
// "1yr", "1year" (a year is 12 months), case-insensitive, no sign, no fraction. "m"/"M" stay
// ambiguous. Throws DataError naming the text and the accepted forms.
TimeStep parse_time_step(const std::string& text);
// "6h", "1mo", "12mo".
std::string format_time_step(const TimeStep& step);
// In the 360_day calendar a month is a fixed 30 days: a month step becomes that many seconds, so
// everything downstream sees a fixed step. Other calendars keep the months.
TimeStep fixed_where_possible(const TimeStep& step, Calendar calendar);
// Whether time point `b` is one step after `a`: b - a == step.seconds, or b in the month
// step.months after a's month (monthly means stamped mid-month vary in their day; that is still
// one month).
bool one_step_after(int64_t a, int64_t b, const TimeStep& step, Calendar calendar);
// `steps` steps after `seconds`: for a month step the same day and time of day, or the month's
// last day when it is shorter (January 31 + 1 month is February 28 or 29).
int64_t steps_after(int64_t seconds, const TimeStep& step, int64_t steps, Calendar calendar);

// A date from config or command-line text: "1979-01-01", "1979-01-01T06:00", "1979-01-01 06:00:00",
// "1979-01-01T06:00:00Z", "1979-01-01T06:00:00+00:00". A non-zero UTC offset is applied. Throws on
// bad text and on a date that does not exist in the calendar (Feb 30 outside 360_day, Feb 29 in
// noleap or in a non-leap year), naming the text.
DateTime parse_date(const std::string& text, Calendar calendar = Calendar::kStandard);

}  // namespace wxtrain::data
