// GRIB through ecCodes, as a Reader.
//
// Opening indexes every message once. The file is framed here, not by ecCodes: each message's
// section 0 gives its length, the sections are walked (lengths and numbers must chain exactly to
// the closing "7777") and only then are its header sections — everything before the data — handed
// to ecCodes as a partial message. So opening reads a few hundred bytes per message, not the file,
// and a truncated or corrupt file is reported by what it is (a message running past the end of the
// file, a section that does not chain) before ecCodes parses a byte of it. read() reads the
// messages it needs with pread, frames them again (the file may have changed since it was opened)
// and decodes them; nothing is cached. ecCodes is handed each message without its centre's local
// use (GRIB1 PDS octets 29 on, GRIB2 section 2; see drop_local_use), which no key read here comes
// from and which ecCodes 2.28 mislays or leaks on when it is corrupt.
//
// ecCodes' own log goes nowhere (quiet_eccodes): what it says about a message it cannot parse is
// added to the DataError naming the file, message and key, and nothing reaches stderr.
//
// Layout of the variables:
//   - one variable per shortName; a shortName on two or more typeOfLevel becomes
//     <shortName>_<typeOfLevel>, one per level type. A parameter ecCodes has no shortName for
//     ("unknown") is named by its numbers, unknown_<discipline>_<category>_<number>.
//   - dimensions (time, [level], latitude, longitude). The level dimension is there for
//     isobaricInhPa and for any variable found on more than one level. The time axis is the
//     sorted union of the valid times of every message in the file; a level axis is the union of
//     the levels of its typeOfLevel, ascending. Where a variable has no message for a
//     (time, level) of the axes, reading it is a DataError naming the variable, level and time.
//   - level axes: "level" for isobaricInhPa (or for the one level type in the file when there is
//     no isobaricInhPa), "level_<typeOfLevel>" for the others.
//   - latitude/longitude are the points in the order the messages scan them (ERA5: north to
//     south), and values come back in (latitude, longitude) order whichever of i or j the message
//     holds consecutive. Every message must be on the same grid: regular_ll, or reduced_gg.
//   - reduced_gg (ECMWF's reduced Gaussian N and octahedral O grids; global ones only): the
//     dimensions are (time, [level], values), one cell per point in the message's order (row
//     after row from the north, pl[i] points on row i), and latitude(values), longitude(values)
//     hold each cell's coordinates, as cfgrib presents them: the 2N Gaussian latitudes from
//     ecCodes (codes_get_gaussian_latitudes) and longitudes 360 j / pl[i] on row i.
//   - valid time is ecCodes' validityDate/validityTime (reference time plus the step in its own
//     units, the end of the period for accumulations), as seconds since 1970-01-01.
//   - missing points (bitmap): ecCodes substitutes the handle's missingValue, which this reader
//     sets to netCDF's float fill value (9.969209968386869e36, exact in float) before decoding and
//     reports as _FillValue. ecCodes' default, 9999, is a value geopotential really takes.
#include "data/readers/grib/grib_reader.h"

#include <eccodes.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "core/error.h"
#include "data/time/cf_time.h"

namespace wxtrain::data {
namespace {

// netCDF's NC_FILL_FLOAT: exactly representable in float, so a decoded point compares equal to
// the attribute after the conversion to float32.
constexpr double kFillValue = 9.9692099683868690e+36;
// Grids past these sizes are taken for corruption rather than allocated: 2^28 points is a 2 GiB
// message decoded (a 0.025-degree global grid is 1.04e8 points), 2^24 points along one axis.
// A constant field (bitsPerValue 0) codes any number of points in a few bytes, so the message's
// length bounds nothing.
constexpr uint64_t kMaxGridPoints = uint64_t{1} << 28;
constexpr long kMaxAxisPoints = long{1} << 24;

// The time axis: GRIB's dates are proleptic Gregorian, counted by data/time/cf_time.
const char* const kTimeUnits = "seconds since 1970-01-01 00:00:00";
constexpr Calendar kTimeCalendar = Calendar::kProlepticGregorian;

// ---------------------------------------------------------------------------------------------
// Framing: where each message is and whether its sections chain.

struct MessageLocation {
  uint64_t offset = 0;         // of "GRIB" in the file
  uint64_t length = 0;         // through "7777"
  uint64_t header_length = 0;  // the bytes before the data (GRIB2 section 7, GRIB1 BDS values)
  int edition = 0;
};

uint64_t big_endian(const unsigned char* bytes, int width) {
  uint64_t value = 0;
  for (int i = 0; i < width; ++i) value = (value << 8) | bytes[i];
  return value;
}

// Whether ecCodes has the definition file `relative` (e.g. "grib2/template.3.0.def"). ecCodes
// 2.28 leaks the half-built handle when a message names a template it has no file for, so such a
// message is refused before ecCodes sees it.
bool ecCodes_has_definition(const std::string& relative) {
  static std::mutex mutex;
  static std::map<std::string, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, inserted] = known.try_emplace(relative, false);
  if (inserted) {
    // The context owns the string. ECCODES_DEFINITION_PATH may list directories separated by ':'.
    const char* paths = codes_definition_path(nullptr);
    std::stringstream list(paths ? paths : "");
    std::string directory;
    while (std::getline(list, directory, ':')) {
      struct stat status {};
      if (::stat((directory + "/" + relative).c_str(), &status) == 0) it->second = true;
    }
  }
  return it->second;
}

// Walks the sections of one message of `length` bytes, reading through `read_at(position, count,
// out)`, and returns the length of its header (the bytes before the coded values), or throws
// naming what does not chain. `where` prefixes errors. Only section headers are read, so a
// corrupt length costs nothing.
template <typename ReadAt>
uint64_t walk_sections(const ReadAt& read_at, uint64_t length, int edition, const std::string& where) {
  auto fail = [&](const std::string& what) { throw DataError(where + ": " + what); };
  unsigned char bytes[8] = {};
  if (length < 12) fail("declares " + std::to_string(length) + " bytes, too short for a GRIB message");
  read_at(length - 4, 4, bytes);
  if (std::memcmp(bytes, "7777", 4) != 0) {
    fail("does not end with \"7777\" where its length (" + std::to_string(length) + " bytes) says it ends");
  }
  const uint64_t end = length - 4;
  if (edition == 2) {
    // Section 0 is 16 bytes; then 1, [2], 3, 4, 5, 6, 7 and "7777". A section 2, 3 or 4 after
    // a 7 would start another field of a multi-field message.
    static constexpr uint64_t kMinimumLength[8] = {0, 21, 5, 14, 9, 11, 6, 5};
    static constexpr int kMayFollow[8] = {-1, 0, 1, -1, 3, 4, 5, 6};  // the one section before each, 3: 1 or 2
    uint64_t position = 16, header_length = 0;
    int previous = 0, fields = 0;
    while (position < end) {
      if (end - position < 5) fail("a section header at byte " + std::to_string(position) + " runs into \"7777\"");
      read_at(position, 5, bytes);
      const uint64_t section_length = big_endian(bytes, 4);
      const int number = bytes[4];
      const std::string section = "section " + std::to_string(number) + " at byte " + std::to_string(position);
      if (number < 1 || number > 7) fail("has section number " + std::to_string(number) + " at byte " + std::to_string(position) + " (expected 1 to 7)");
      const bool next_field = previous == 7 && number >= 2 && number <= 4;
      const bool in_order = number == 3 ? (previous == 1 || previous == 2) : previous == kMayFollow[number];
      if (!in_order && !next_field) fail("has " + section + " after section " + std::to_string(previous));
      if (section_length < kMinimumLength[number]) {
        fail("has " + section + " of " + std::to_string(section_length) + " bytes, under the " + std::to_string(kMinimumLength[number]) + " it needs");
      }
      if (section_length > end - position) fail("has " + section + " of " + std::to_string(section_length) + " bytes, running past \"7777\"");
      if (number >= 3 && number <= 5) {
        // The template number: octets 13-14 of section 3, 8-9 of section 4, 10-11 of section 5.
        static constexpr uint64_t kTemplateOctet[6] = {0, 0, 0, 12, 7, 9};
        read_at(position + kTemplateOctet[number], 2, bytes);
        const std::string template_number = std::to_string(big_endian(bytes, 2));
        // Section 5's template also picks section 7's.
        for (int templated : {number, number == 5 ? 7 : number}) {
          const std::string name = std::to_string(templated) + "." + template_number;
          if (!ecCodes_has_definition("grib2/template." + name + ".def")) {
            fail("has " + section + " naming template " + name + ", which ecCodes has no definition of");
          }
        }
      }
      if (number == 7 && ++fields == 1) header_length = position + 5;
      previous = number;
      position += section_length;
    }
    if (previous != 7) fail("has no data section (section 7) before \"7777\"");
    if (fields > 1) {
      fail("holds " + std::to_string(fields) + " fields (a multi-field GRIB2 message), which this reader does not split; "
           "it needs one field per message");
    }
    return header_length;
  }
  // GRIB1: section 0 is 8 bytes; PDS; GDS and BMS when the PDS's flags say so; BDS; "7777".
  uint64_t position = 8;
  auto section = [&](const char* name, uint64_t minimum) {
    if (end - position < 3) fail(std::string("has its ") + name + " at byte " + std::to_string(position) + " run into \"7777\"");
    read_at(position, 3, bytes);
    const uint64_t section_length = big_endian(bytes, 3);
    if (section_length < minimum || section_length > end - position) {
      fail(std::string("has a ") + name + " at byte " + std::to_string(position) + " of " + std::to_string(section_length) +
           " bytes (" + std::to_string(end - position) + " left before \"7777\", at least " + std::to_string(minimum) + " needed)");
    }
    const uint64_t start = position;
    position += section_length;
    return start;
  };
  const uint64_t pds = section("product definition section", 28);
  read_at(pds + 7, 1, bytes);
  const int flags = bytes[0];
  if (!(flags & 0x80)) {
    // The grid is then one of the WMO's predefined catalogue, numbered in PDS octet 7.
    read_at(pds + 6, 1, bytes);
    fail("has no grid description section (it refers to predefined grid " + std::to_string(bytes[0]) +
         "); this reader needs the grid described in the message");
  }
  {
    const uint64_t gds = section("grid description section", 32);
    // Octets 4-6: the number of vertical coordinates (NV), where they start (PVL) and the data
    // representation type. Only type 0, latitude/longitude, is read; ecCodes sizes the section
    // from NV and PVL rather than from its length, so the two must agree before it parses it.
    read_at(gds + 3, 3, bytes);
    const uint64_t gds_length = position - gds, vertical = bytes[0], vertical_start = bytes[1];
    if (bytes[2] != 0 && bytes[2] != 4) {
      fail("has a grid of data representation type " + std::to_string(bytes[2]) +
           " (GRIB1 code table 6); this reader reads regular_ll (type 0) and reduced_gg (type 4) grids only");
    }
    if (vertical > 0 && (vertical_start < 33 || vertical_start - 1 + 4 * vertical > gds_length)) {
      fail("has " + std::to_string(vertical) + " vertical coordinates from octet " + std::to_string(vertical_start) +
           " of a " + std::to_string(gds_length) + "-byte grid description section");
    }
    // With no vertical coordinates ecCodes still pads the section to octet PVL (where a list of
    // points per row would start), past its end if PVL says so, and reads the next sections there.
    if (vertical == 0 && vertical_start != 255 && vertical_start - 1 > gds_length) {
      fail("has its key 'pvlLocation' at octet " + std::to_string(vertical_start) + ", past the end of its " +
           std::to_string(gds_length) + "-byte grid description section");
    }
  }
  if (flags & 0x40) section("bitmap section", 6);
  const uint64_t bds = section("binary data section", 11);
  // The BDS flags pick ecCodes' packingType and with it a definition file; combinations its
  // concept has no name for leave the template unnamed (and ecCodes 2.28 leaks the handle).
  read_at(bds + 3, 1, bytes);
  const int data_flags = bytes[0];
  if (data_flags & 0x80) fail("holds spherical harmonics (gridType sh), not grid points; this reader reads regular_ll and reduced_gg grids only");
  if (data_flags & 0x40) {
    if (end - bds < 14) fail("has a second-order packed binary data section too short for its flags");
    read_at(bds + 13, 1, bytes);
    const int extended = bytes[0];
    const bool matrix = extended & 0x40, secondary_bitmap = extended & 0x20, different_width = extended & 0x10,
               general = extended & 0x08;
    const bool named = !matrix && (general ? different_width && !secondary_bitmap : different_width || secondary_bitmap);
    if (!named) fail("has second-order packing flags (" + std::to_string(extended) + ") that name no packing ecCodes knows");
  }
  if (position != end) fail("has its binary data section end at byte " + std::to_string(position) + ", not at \"7777\" (byte " + std::to_string(end) + ")");
  return bds + 11;
}

void put_big_endian(unsigned char* bytes, int width, uint64_t value) {
  for (int i = width - 1; i >= 0; --i, value >>= 8) bytes[i] = static_cast<unsigned char>(value & 0xff);
}

// Removes the centre's local use from a message whose sections walk_sections has checked: GRIB1
// octets 29 on of the product definition section, GRIB2 section 2. This reader reads no key of
// them (ecCodes' parameter and level concepts use none), and ecCodes 2.28 cannot be trusted with
// them: it lays a local definition out by its own template, not by the section's length, so a
// local definition longer than its section (localDefinitionNumber 1 changed to 5 in an ECMWF PDS
// of 52 bytes) moves every later section, and the grid or packing template then read from the
// wrong bytes may be one it has no file for, which leaks the half-built handle; and a local
// definition naming a sub-template it has no file for (local.34.<n>, TIGGE or CERRA versions)
// leaks the same way. Without it ecCodes sees the sections where the message has them.
void drop_local_use(std::vector<unsigned char>& bytes, int edition) {
  if (edition == 1) {
    constexpr uint64_t kStandard = 28;  // octets 1-28: all of the PDS that GRIB1 defines
    const uint64_t length = big_endian(bytes.data() + 8, 3);
    if (length <= kStandard) return;
    bytes.erase(bytes.begin() + static_cast<long>(8 + kStandard), bytes.begin() + static_cast<long>(8 + length));
    put_big_endian(bytes.data() + 8, 3, kStandard);
    put_big_endian(bytes.data() + 4, 3, big_endian(bytes.data() + 4, 3) - (length - kStandard));
    return;
  }
  const uint64_t section2 = 16 + big_endian(bytes.data() + 16, 4);
  if (section2 + 5 > bytes.size() || bytes[section2 + 4] != 2) return;
  const uint64_t length = big_endian(bytes.data() + section2, 4);
  bytes.erase(bytes.begin() + static_cast<long>(section2), bytes.begin() + static_cast<long>(section2 + length));
  put_big_endian(bytes.data() + 8, 8, big_endian(bytes.data() + 8, 8) - length);
}

// The file, opened once; pread needs no lock, so reader threads share it.
class GribFile {
 public:
  explicit GribFile(const std::string& path) : path_(path) {
    descriptor_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (descriptor_ < 0) throw DataError("cannot open GRIB file " + path + ": " + std::strerror(errno));
    struct stat status {};
    if (::fstat(descriptor_, &status) != 0) {
      ::close(descriptor_);
      throw DataError("cannot stat GRIB file " + path + ": " + std::strerror(errno));
    }
    size_ = static_cast<uint64_t>(status.st_size);
  }
  ~GribFile() { ::close(descriptor_); }
  GribFile(const GribFile&) = delete;
  GribFile& operator=(const GribFile&) = delete;

  uint64_t size() const { return size_; }

  // Reads exactly `count` bytes at `offset`; fewer (the file shrank) is a DataError.
  void read(uint64_t offset, unsigned char* out, uint64_t count) const {
    uint64_t done = 0;
    while (done < count) {
      const ssize_t got = ::pread(descriptor_, out + done, count - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        throw DataError(path_ + ": could not read " + std::to_string(count) + " bytes at byte " + std::to_string(offset) +
                        (got < 0 ? std::string(": ") + std::strerror(errno) : std::string(": the file ends first (truncated since it was opened?)")));
      }
      done += static_cast<uint64_t>(got);
    }
  }

  // The offset of the next "GRIB" at or after `from`, or size() when there is none. ecCodes skips
  // bytes between messages too; some archives pad them.
  uint64_t find_next_message(uint64_t from) const {
    std::vector<unsigned char> chunk(1 << 16);
    while (from + 4 <= size_) {
      const uint64_t count = std::min<uint64_t>(chunk.size(), size_ - from);
      read(from, chunk.data(), count);
      for (uint64_t i = 0; i + 4 <= count; ++i) {
        if (std::memcmp(chunk.data() + i, "GRIB", 4) == 0) return from + i;
      }
      if (count < 4 || from + count >= size_) break;
      from += count - 3;  // "GRIB" may straddle two chunks
    }
    return size_;
  }

  // Section 0 of the message at `offset`: its edition and length, checked against the file.
  MessageLocation locate(uint64_t offset, size_t number) const {
    const std::string where = path_ + ": message " + std::to_string(number) + " (at byte " + std::to_string(offset) + ")";
    MessageLocation location;
    location.offset = offset;
    unsigned char section0[16] = {};
    const uint64_t available = size_ - offset;
    read(offset, section0, std::min<uint64_t>(available, 16));
    location.edition = available >= 8 ? section0[7] : 0;
    if (available >= 8 && location.edition != 1 && location.edition != 2) {
      throw DataError(where + " has edition " + std::to_string(location.edition) + " (expected 1 or 2)" +
                      (number == 1 && offset > 0 ? "; it is not a GRIB file, or the first GRIB message is not at its start" : ""));
    }
    if (available < (location.edition == 1 ? 8u : 16u)) {
      throw DataError(where + " is truncated: the file ends " + std::to_string(available) + " bytes after \"GRIB\"");
    }
    if (location.edition == 2) {
      location.length = big_endian(section0 + 8, 8);
    } else if (location.edition == 1) {
      location.length = big_endian(section0 + 4, 3);
      // Lengths over 2^23 bytes are coded in 120-byte units with a flag (ECMWF's "large GRIB1");
      // rare enough to refuse by name rather than guess.
      if (location.length & 0x800000) throw DataError(where + " is a GRIB1 message over 8 MiB (large-message coding), which this reader does not read");
    }
    if (location.length > available) {
      throw DataError(where + " is truncated: it declares " + std::to_string(location.length) + " bytes and the file ends after " +
                      std::to_string(available));
    }
    return location;
  }

  // The bytes before the coded values, the sections of the whole message checked and the local
  // use dropped (drop_local_use), for ecCodes.
  std::vector<unsigned char> header(MessageLocation& location, const std::string& where) const {
    location.header_length = walk_sections(
        [&](uint64_t at, uint64_t n, unsigned char* out) { read(location.offset + at, out, n); }, location.length, location.edition, where);
    // GRIB1: the whole message (see read_header).
    std::vector<unsigned char> bytes(location.edition == 1 ? location.length : location.header_length);
    read(location.offset, bytes.data(), bytes.size());
    drop_local_use(bytes, location.edition);
    return bytes;
  }

  // The whole message, its sections checked and the local use dropped, for ecCodes.
  std::vector<unsigned char> message(const MessageLocation& location, const std::string& where) const {
    std::vector<unsigned char> bytes(location.length);
    read(location.offset, bytes.data(), bytes.size());
    if (std::memcmp(bytes.data(), "GRIB", 4) != 0) throw DataError(where + " no longer starts with \"GRIB\" (the file changed since it was opened)");
    walk_sections([&](uint64_t at, uint64_t n, unsigned char* out) { std::memcpy(out, bytes.data() + at, n); }, bytes.size(),
                  location.edition, where);
    drop_local_use(bytes, location.edition);
    return bytes;
  }

 private:
  std::string path_;
  int descriptor_ = -1;
  uint64_t size_ = 0;
};

// ---------------------------------------------------------------------------------------------
// ecCodes handles and keys.

// ecCodes is built here with its OpenMP locks (GRIB_OMP_THREADS), so distinct handles may be used
// on distinct threads; handle creation also goes through this lock to keep its parsing of the
// definitions (cached in the shared context) in one thread at a time.
std::mutex& eccodes_mutex() {
  static std::mutex mutex;
  return mutex;
}

// ecCodes' messages. Its default context prints every error it logs to stderr ("ECCODES ERROR :
// Truncating time: ..."), for a file wxtrain then reports anyway; a user is to see wxtrain's one
// error. So its log procedure is replaced, once for the process (quiet_eccodes), by one that drops
// a message unless this thread is inside an EcCodesLog, which keeps the first few for the
// DataError ecCodes' failure then becomes (EcCodesLog::said()).
class EcCodesLog {
 public:
  EcCodesLog() : outer_(current_) { current_ = this; }
  ~EcCodesLog() { current_ = outer_; }
  EcCodesLog(const EcCodesLog&) = delete;
  EcCodesLog& operator=(const EcCodesLog&) = delete;

  // " (ecCodes: first; second)" for the errors logged so far in this scope, or "".
  static std::string said() {
    const EcCodesLog* log = current_;
    if (!log || log->lines_.empty()) return "";
    std::string text = " (ecCodes: ";
    for (size_t i = 0; i < log->lines_.size(); ++i) text += (i ? "; " : "") + log->lines_[i];
    return text + ")";
  }

  static void record(const codes_context*, int level, const char* message) {
    EcCodesLog* log = current_;
    if (!log || !message) return;
    level &= ~(1 << 10);  // GRIB_LOG_PERROR (ecCodes appends strerror), not in its public header
    if (level != GRIB_LOG_ERROR && level != GRIB_LOG_FATAL) return;
    std::string line(message, strnlen(message, 240));
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front()))) line.erase(line.begin());
    if (line.empty() || log->lines_.size() >= kKept) return;
    if (std::find(log->lines_.begin(), log->lines_.end(), line) == log->lines_.end()) log->lines_.push_back(std::move(line));
  }

 private:
  static constexpr size_t kKept = 4;
  static thread_local EcCodesLog* current_;
  EcCodesLog* outer_;
  std::vector<std::string> lines_;
};
thread_local EcCodesLog* EcCodesLog::current_ = nullptr;

// Before this reader's first call into ecCodes; thread-safe.
void quiet_eccodes() {
  static std::once_flag once;
  std::call_once(once, [] { codes_context_set_logging_proc(codes_context_get_default(), &EcCodesLog::record); });
}

struct HandleDeleter {
  void operator()(codes_handle* handle) const { codes_handle_delete(handle); }
};
using Handle = std::unique_ptr<codes_handle, HandleDeleter>;

// Reads keys of one message, every failure naming the file, the message and the key.
class Keys {
 public:
  Keys(codes_handle* handle, std::string where) : handle_(handle), where_(std::move(where)) {}

  long integer(const char* key) const {
    long value = 0;
    check(codes_get_long(handle_, key, &value), key);
    return value;
  }
  std::optional<long> optional_integer(const char* key) const {
    long value = 0;
    if (codes_get_long(handle_, key, &value) != CODES_SUCCESS) return std::nullopt;
    return value;
  }
  double real(const char* key) const {
    double value = 0;
    check(codes_get_double(handle_, key, &value), key);
    if (!std::isfinite(value)) throw DataError(where_ + ": key '" + key + "' is not a finite number");
    return value;
  }
  std::optional<double> optional_real(const char* key) const {
    double value = 0;
    if (codes_get_double(handle_, key, &value) != CODES_SUCCESS || !std::isfinite(value)) return std::nullopt;
    return value;
  }
  std::string text(const char* key) const {
    char buffer[256] = {};
    size_t length = sizeof(buffer);
    check(codes_get_string(handle_, key, buffer, &length), key);
    return std::string(buffer, strnlen(buffer, sizeof(buffer)));
  }
  std::string text_or(const char* key, const std::string& fallback) const {
    char buffer[256] = {};
    size_t length = sizeof(buffer);
    if (codes_get_string(handle_, key, buffer, &length) != CODES_SUCCESS) return fallback;
    return std::string(buffer, strnlen(buffer, sizeof(buffer)));
  }
  std::vector<long> integers(const char* key) const {
    size_t size = 0;
    check(codes_get_size(handle_, key, &size), key);
    std::vector<long> values(size);
    check(codes_get_long_array(handle_, key, values.data(), &size), key);
    values.resize(size);
    return values;
  }
  const std::string& where() const { return where_; }

 private:
  void check(int status, const char* key) const {
    if (status != CODES_SUCCESS) throw DataError(where_ + ": key '" + key + "': " + codes_get_error_message(status) + EcCodesLog::said());
  }
  codes_handle* handle_;
  std::string where_;
};

// ---------------------------------------------------------------------------------------------
// Time.

std::string iso_time(int64_t seconds) { return from_seconds(seconds, kTimeCalendar).to_iso(); }

// validityDate (YYYYMMDD) and validityTime (HHMM) as seconds since 1970-01-01.
int64_t valid_time_of(const Keys& keys, int edition) {
  // ecCodes 2.28 loops forever computing the validity of a step in a unit it cannot convert
  // (indicatorOfUnitOfTimeRange 255, "missing", for one): the units are checked first. Months
  // and longer are refused too, having no fixed length.
  static const std::set<long> kGrib2Units = {0, 1, 2, 10, 11, 12, 13};           // code table 4.4
  static const std::set<long> kGrib1Units = {0, 1, 2, 10, 11, 12, 13, 14, 254};  // code table 4
  const std::set<long>& units = edition == 1 ? kGrib1Units : kGrib2Units;
  for (const char* key : {"indicatorOfUnitOfTimeRange", "unitOfTimeRange", "indicatorOfUnitForTimeRange"}) {
    if (const std::optional<long> unit = keys.optional_integer(key); unit && !units.count(*unit)) {
      throw DataError(keys.where() + ": key '" + key + "' is " + std::to_string(*unit) +
                      ", not a unit of time a valid time can be computed from (minutes to days)");
    }
  }
  const long date = keys.integer("validityDate");
  const long time = keys.integer("validityTime");
  DateTime valid;
  valid.year = static_cast<int>(date / 10000);
  valid.month = static_cast<int>(date / 100 % 100);
  valid.day = static_cast<int>(date % 100);
  valid.hour = static_cast<int>(time / 100);
  valid.minute = static_cast<int>(time % 100);
  if (date < 0 || time < 0 || !valid_date(valid, kTimeCalendar)) {
    throw DataError(keys.where() + ": validityDate/validityTime " + std::to_string(date) + " " + std::to_string(time) +
                    " is not a date and time");
  }
  return to_seconds(valid, kTimeCalendar);
}

// ---------------------------------------------------------------------------------------------
// The grid.

struct Grid {
  long ni = 0, nj = 0;             // points along a parallel (longitude) and a meridian (latitude)
  bool j_consecutive = false;      // values run down a meridian first (scanning mode bit 3)
  std::vector<double> latitudes;   // nj, in scan order (reduced_gg: one per point)
  std::vector<double> longitudes;  // ni, in scan order (reduced_gg: one per point)
  // reduced_gg: N and the points per row; ni is then the number of points, nj 1.
  bool reduced = false;
  long gaussian_n = 0;
  std::vector<long> pl;

  size_t points() const { return static_cast<size_t>(ni) * static_cast<size_t>(nj); }

  bool same_as(const Grid& other) const {
    if (reduced || other.reduced) return reduced == other.reduced && gaussian_n == other.gaussian_n && pl == other.pl;
    auto close = [](const std::vector<double>& a, const std::vector<double>& b) {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (std::fabs(a[i] - b[i]) > 1e-6) return false;
      }
      return true;
    };
    return ni == other.ni && nj == other.nj && j_consecutive == other.j_consecutive && close(latitudes, other.latitudes) &&
           close(longitudes, other.longitudes);
  }

  std::string describe() const {
    std::ostringstream text;
    if (reduced) {
      text << "reduced_gg N" << gaussian_n << " of " << ni << " points";
      return text.str();
    }
    text << "regular_ll " << ni << "x" << nj << ", latitude " << latitudes.front() << " to " << latitudes.back() << ", longitude "
         << longitudes.front() << " to " << longitudes.back() << (j_consecutive ? ", j consecutive" : "");
    return text.str();
  }
};

// Points from first to last in `count` equal steps; checks the step against the message's
// increment when it gives one (first/last are exact in the message, an increment may be rounded).
std::vector<double> axis(double first, double last, long count, std::optional<double> increment, const char* name,
                         const std::string& where) {
  std::vector<double> points(static_cast<size_t>(count));
  const double step = count > 1 ? (last - first) / static_cast<double>(count - 1) : 0.0;
  for (long k = 0; k < count; ++k) points[k] = first + step * static_cast<double>(k);
  if (count > 1) points.back() = last;
  if (increment && count > 1 && *increment > 0 && std::fabs(std::fabs(step) - *increment) > 1e-3 * *increment + 1e-6) {
    std::ostringstream text;
    text << where << ": the " << name << " points run from " << first << " to " << last << " in " << count << " steps of "
         << std::fabs(step) << " degrees, but the message's increment is " << *increment;
    throw DataError(text.str());
  }
  return points;
}

// A global reduced Gaussian grid: N, pl, and each point's coordinates in the message's order.
Grid reduced_gaussian_of(const Keys& keys, const std::string& short_name) {
  Grid grid;
  grid.reduced = true;
  grid.gaussian_n = keys.integer("N");
  const long n = grid.gaussian_n;
  if (n < 1 || n > 8000) {
    throw DataError(keys.where() + ": '" + short_name + "' is on a reduced_gg grid whose key 'N' is " + std::to_string(n) +
                    " (expected 1 to 8000 latitudes between a pole and the equator)");
  }
  grid.pl = keys.integers("pl");
  if (grid.pl.size() != static_cast<size_t>(2 * n)) {
    throw DataError(keys.where() + ": reduced_gg N" + std::to_string(n) + " needs " + std::to_string(2 * n) +
                    " rows, but key 'pl' has " + std::to_string(grid.pl.size()) + " entries");
  }
  uint64_t total = 0;
  long widest = 0;
  for (long p : grid.pl) {
    if (p < 1 || p > kMaxAxisPoints) {
      throw DataError(keys.where() + ": key 'pl' has a row of " + std::to_string(p) + " points (expected 1 to 2^24)");
    }
    total += static_cast<uint64_t>(p);
    widest = std::max(widest, p);
  }
  const long points = keys.integer("numberOfDataPoints");
  if (total > kMaxGridPoints || static_cast<uint64_t>(points) != total) {
    throw DataError(keys.where() + ": key 'pl' sums to " + std::to_string(total) + " points but 'numberOfDataPoints' is " +
                    std::to_string(points));
  }
  std::vector<double> rows(static_cast<size_t>(2 * n));
  // (The caller, read_header, holds eccodes_mutex.)
  if (codes_get_gaussian_latitudes(n, rows.data()) != CODES_SUCCESS)
    throw DataError(keys.where() + ": ecCodes computes no Gaussian latitudes for N" + std::to_string(n));
  // Only the whole globe, from longitude 0 on every row, north to south: what the operational
  // archives hold. A sub-area's rows start at a point that depends on pl and the area's edge.
  const double lat_first = keys.real("latitudeOfFirstGridPointInDegrees");
  const double lat_last = keys.real("latitudeOfLastGridPointInDegrees");
  const double lon_first = keys.real("longitudeOfFirstGridPointInDegrees");
  const double lon_last = keys.real("longitudeOfLastGridPointInDegrees");
  const bool global = std::fabs(lat_first - rows.front()) < 1e-3 && std::fabs(lat_last - rows.back()) < 1e-3 &&
                      std::fabs(lon_first) < 1e-6 && lon_last >= 360.0 - 360.0 / static_cast<double>(widest) - 1e-3;
  if (!global || keys.integer("iScansNegatively") != 0 || keys.integer("jScansPositively") != 0) {
    std::ostringstream text;
    text << keys.where() << ": '" << short_name << "' is on a reduced_gg N" << n << " grid that is not the whole globe scanned "
         << "from the north-west (latitudes " << lat_first << " to " << lat_last << ", longitudes " << lon_first << " to "
         << lon_last << "; the globe is " << rows.front() << " to " << rows.back() << ", 0 to "
         << 360.0 - 360.0 / static_cast<double>(widest) << "); this reader reads global reduced Gaussian grids only";
    throw DataError(text.str());
  }
  grid.ni = static_cast<long>(total);
  grid.nj = 1;
  grid.latitudes.reserve(total);
  grid.longitudes.reserve(total);
  for (size_t i = 0; i < grid.pl.size(); ++i) {
    for (long j = 0; j < grid.pl[i]; ++j) {
      grid.latitudes.push_back(rows[i]);
      grid.longitudes.push_back(360.0 * static_cast<double>(j) / static_cast<double>(grid.pl[i]));
    }
  }
  return grid;
}

Grid grid_of(const Keys& keys, const std::string& short_name) {
  const std::string grid_type = keys.text("gridType");
  if (grid_type == "reduced_gg") return reduced_gaussian_of(keys, short_name);
  if (grid_type != "regular_ll") {
    throw DataError(keys.where() + ": '" + short_name + "' is on a " + grid_type +
                    " grid; this reader reads regular_ll (regular latitude/longitude) and reduced_gg (reduced Gaussian) grids only");
  }
  Grid grid;
  grid.ni = keys.integer("Ni");
  grid.nj = keys.integer("Nj");
  const long points = keys.integer("numberOfDataPoints");
  if (grid.ni < 1 || grid.nj < 1 || grid.ni > kMaxAxisPoints || grid.nj > kMaxAxisPoints ||
      static_cast<uint64_t>(grid.ni) * static_cast<uint64_t>(grid.nj) > kMaxGridPoints ||
      grid.ni * grid.nj != points) {
    throw DataError(keys.where() + ": keys 'Ni' x 'Nj' (" + std::to_string(grid.ni) + " x " + std::to_string(grid.nj) +
                    ") do not make a grid of 'numberOfDataPoints' (" + std::to_string(points) +
                    ") of at most 2^24 points a side and 2^28 in all");
  }
  if (keys.optional_integer("alternativeRowScanning").value_or(0) != 0) {
    throw DataError(keys.where() + ": key 'alternativeRowScanning' is set (rows alternate direction); not supported");
  }
  const bool i_negative = keys.integer("iScansNegatively") != 0;
  const bool j_positive = keys.integer("jScansPositively") != 0;
  grid.j_consecutive = keys.integer("jPointsAreConsecutive") != 0;
  const double lat_first = keys.real("latitudeOfFirstGridPointInDegrees");
  const double lat_last = keys.real("latitudeOfLastGridPointInDegrees");
  const double lon_first = keys.real("longitudeOfFirstGridPointInDegrees");
  double lon_last = keys.real("longitudeOfLastGridPointInDegrees");
  // Longitudes are stored in [0, 360): a grid across the meridian of the first point (first 180,
  // last 179.75) continues past 360.
  if (!i_negative && lon_last < lon_first) lon_last += 360.0;
  if (i_negative && lon_last > lon_first) lon_last -= 360.0;
  if ((j_positive && lat_last < lat_first) || (!j_positive && lat_last > lat_first)) {
    std::ostringstream text;
    text << keys.where() << ": latitudes run from " << lat_first << " to " << lat_last << " but key 'jScansPositively' is "
         << j_positive;
    throw DataError(text.str());
  }
  if (std::fabs(lat_first) > 90.0 || std::fabs(lat_last) > 90.0) {
    std::ostringstream text;
    text << keys.where() << ": keys 'latitudeOfFirstGridPoint'/'latitudeOfLastGridPoint' (" << lat_first << ", " << lat_last
         << ") are not latitudes";
    throw DataError(text.str());
  }
  // The increments are optional (resolutionAndComponentFlags); when absent ecCodes reports a
  // missing value, which is no increment in degrees.
  auto increment = [&](const char* key) -> std::optional<double> {
    const std::optional<double> value = keys.optional_real(key);
    if (!value || *value <= 0.0 || *value > 360.0) return std::nullopt;
    return value;
  };
  const std::optional<double> di = increment("iDirectionIncrementInDegrees"), dj = increment("jDirectionIncrementInDegrees");
  grid.latitudes = axis(lat_first, lat_last, grid.nj, dj, "latitude", keys.where());
  grid.longitudes = axis(lon_first, lon_last, grid.ni, di, "longitude", keys.where());
  return grid;
}

// ---------------------------------------------------------------------------------------------
// The index.

struct MessageInfo {
  size_t number = 0;  // 1-based, as grib_ls counts
  MessageLocation location;
  std::string short_name, type_of_level, units, long_name, cf_name, packing;
  long param_id = 0;
  double level = 0;
  int64_t valid_time = 0;
  int64_t reference_date = 0, reference_time = 0, step = 0;  // for messages about duplicates
  std::string step_units;
};

std::string level_text(const std::string& type_of_level, double level) {
  std::ostringstream text;
  text << level;
  if (type_of_level == "isobaricInhPa") return text.str() + " hPa";
  if (type_of_level == "isobaricInPa") return text.str() + " Pa";
  return "level " + text.str() + " (" + type_of_level + ")";
}

std::optional<std::string> level_units(const std::string& type_of_level) {
  if (type_of_level == "isobaricInhPa") return "hPa";
  if (type_of_level == "isobaricInPa") return "Pa";
  if (type_of_level == "heightAboveGround" || type_of_level == "heightAboveSea" || type_of_level == "depthBelowSea") return "m";
  return std::nullopt;
}

Attribute text_attribute(const std::string& value) {
  Attribute attribute;
  attribute.text = value;
  return attribute;
}
Attribute number_attribute(double value) {
  Attribute attribute;
  attribute.numbers = {value};
  return attribute;
}

struct Coordinate {
  VariableMeta meta;
  std::vector<double> values;
};

struct GribVariable {
  VariableMeta meta;
  std::string short_name, type_of_level;
  bool has_level = false;
  std::vector<double> levels;             // the level axis' values (one entry without a level dim)
  std::vector<int64_t> message_of_slot;   // [time][level] -> index into messages_, -1 when none
};

class GribReader final : public Reader {
 public:
  explicit GribReader(const std::string& path) : path_(path), file_(path) {
    quiet_eccodes();
    index_messages();
    build_variables();
  }

  const std::string& path() const override { return path_; }
  std::string format() const override { return format_; }
  std::vector<std::string> variable_names() const override { return names_; }

  const VariableMeta& variable(const std::string& name) const override {
    if (auto it = variables_.find(name); it != variables_.end()) return it->second.meta;
    if (auto it = coordinates_.find(name); it != coordinates_.end()) return it->second.meta;
    std::string listing;
    for (const auto& n : names_) listing += (listing.empty() ? "" : ", ") + n;
    throw DataError("variable '" + name + "' not found in " + path_ + "; the file has: " + listing);
  }

  void read(const std::string& name, const std::vector<size_t>& start, const std::vector<size_t>& count,
            float* out) const override {
    const VariableMeta& meta = variable(name);
    check_slab(meta, start, count);
    if (auto it = coordinates_.find(name); it != coordinates_.end()) {
      for (size_t k = 0; k < count[0]; ++k) out[k] = static_cast<float>(it->second.values[start[0] + k]);
      return;
    }
    const GribVariable& var = variables_.at(name);
    const size_t rank = meta.dims.size();
    const size_t level_start = var.has_level ? start[1] : 0, level_count = var.has_level ? count[1] : 1;
    const size_t lat_start = start[rank - 2], lat_count = count[rank - 2];
    const size_t lon_start = start[rank - 1], lon_count = count[rank - 1];
    // Every message the slab needs must exist before any is decoded.
    std::vector<const MessageInfo*> needed;
    for (size_t t = start[0]; t < start[0] + count[0]; ++t) {
      for (size_t l = level_start; l < level_start + level_count; ++l) {
        const int64_t message = var.message_of_slot[t * var.levels.size() + l];
        if (message < 0) {
          throw DataError(path_ + ": no GRIB message for '" + var.short_name + "' at " + level_text(var.type_of_level, var.levels[l]) +
                          " valid " + iso_time(times_[t]) + " (variable '" + name + "'; the file's time axis is the union of all its messages' valid times)");
        }
        needed.push_back(&messages_[static_cast<size_t>(message)]);
      }
    }
    if (grid_.reduced) {
      // (time, [level], values): the points as the message holds them.
      const size_t first = start[rank - 1], points = count[rank - 1];
      for (size_t k = 0; k < needed.size(); ++k) {
        const std::vector<double> values = decode(*needed[k]);
        for (size_t c = 0; c < points; ++c) out[k * points + c] = static_cast<float>(values[first + c]);
      }
      return;
    }
    const size_t plane = lat_count * lon_count;
    for (size_t k = 0; k < needed.size(); ++k) {
      const std::vector<double> values = decode(*needed[k]);
      float* target = out + k * plane;
      for (size_t j = 0; j < lat_count; ++j) {
        for (size_t i = 0; i < lon_count; ++i) {
          const size_t jj = lat_start + j, ii = lon_start + i;
          const size_t source = grid_.j_consecutive ? ii * static_cast<size_t>(grid_.nj) + jj : jj * static_cast<size_t>(grid_.ni) + ii;
          target[j * lon_count + i] = static_cast<float>(values[source]);
        }
      }
    }
  }

  std::vector<double> read_doubles(const std::string& name) const override {
    const VariableMeta& meta = variable(name);
    if (auto it = coordinates_.find(name); it != coordinates_.end()) return it->second.values;
    std::vector<size_t> start(meta.dims.size(), 0), count;
    size_t total = 1;
    for (const auto& dim : meta.dims) {
      count.push_back(dim.length);
      total *= dim.length;
    }
    std::vector<float> values(total);
    read(name, start, count, values.data());
    return std::vector<double>(values.begin(), values.end());
  }

 private:
  std::string where(const MessageInfo& message) const {
    return path_ + ": message " + std::to_string(message.number) + " (at byte " + std::to_string(message.location.offset) + ")";
  }

  void index_messages() {
    uint64_t offset = file_.find_next_message(0);
    bool edition1 = false, edition2 = false;
    while (offset < file_.size()) {
      MessageInfo message;
      message.number = messages_.size() + 1;
      message.location = file_.locate(offset, message.number);
      const std::string place = where(message);
      const std::vector<unsigned char> bytes = file_.header(message.location, place);
      (message.location.edition == 1 ? edition1 : edition2) = true;
      read_header(bytes, message, place);
      messages_.push_back(std::move(message));
      offset = file_.find_next_message(offset + messages_.back().location.length);
    }
    if (messages_.empty()) throw DataError(path_ + " holds no GRIB message (no \"GRIB\" in the file)");
    format_ = edition1 && edition2 ? "GRIB1/GRIB2" : edition2 ? "GRIB2" : "GRIB1";
  }

  void read_header(const std::vector<unsigned char>& header, MessageInfo& message, const std::string& place) {
    std::lock_guard<std::mutex> lock(eccodes_mutex());
    const EcCodesLog log;
    // A partial handle never parses a GRIB1 BDS (where gridType and packingType come from), so
    // a GRIB1 header is the whole message, parsed whole.
    Handle handle(message.location.edition == 1 ? codes_handle_new_from_message(nullptr, header.data(), header.size())
                                                : codes_handle_new_from_partial_message(nullptr, header.data(), header.size()));
    if (!handle) throw DataError(place + ": ecCodes cannot parse the message's header" + EcCodesLog::said());
    const Keys keys(handle.get(), place);
    message.short_name = keys.text("shortName");
    if (message.short_name == "unknown" || message.short_name.empty()) {
      // ecCodes has no name for the parameter: name it by its numbers so two unknowns stay apart.
      if (message.location.edition == 2) {
        message.short_name = "unknown_" + std::to_string(keys.integer("discipline")) + "_" + std::to_string(keys.integer("parameterCategory")) +
                             "_" + std::to_string(keys.integer("parameterNumber"));
      } else {
        message.short_name = "unknown_" + std::to_string(keys.integer("table2Version")) + "_" + std::to_string(keys.integer("indicatorOfParameter"));
      }
    }
    message.type_of_level = keys.text("typeOfLevel");
    message.level = keys.real("level");
    message.units = keys.text_or("units", "unknown");
    message.long_name = keys.text_or("name", message.short_name);
    message.cf_name = keys.text_or("cfName", "unknown");
    message.packing = keys.text_or("packingType", "unknown");
    message.param_id = keys.optional_integer("paramId").value_or(0);
    message.valid_time = valid_time_of(keys, message.location.edition);
    message.reference_date = keys.integer("dataDate");
    message.reference_time = keys.integer("dataTime");
    message.step_units = keys.text_or("stepUnits", "?");
    message.step = keys.optional_integer("endStep").value_or(0);
    Grid grid = grid_of(keys, message.short_name);
    if (messages_.empty()) {
      grid_ = std::move(grid);
    } else if (!grid.same_as(grid_)) {
      const MessageInfo& first = messages_.front();
      throw DataError(path_ + ": '" + message.short_name + "' (message " + std::to_string(message.number) + ") is on the grid " + grid.describe() +
                      " but '" + first.short_name + "' (message " + std::to_string(first.number) + ") is on " + grid_.describe() +
                      "; every variable of a GRIB file must share one grid");
    }
  }

  void build_variables() {
    // Which level types each shortName comes on decides the variables' names.
    std::map<std::string, std::set<std::string>> types_of;
    for (const auto& message : messages_) types_of[message.short_name].insert(message.type_of_level);
    auto variable_name = [&](const MessageInfo& message) {
      return types_of[message.short_name].size() > 1 ? message.short_name + "_" + message.type_of_level : message.short_name;
    };
    std::map<std::string, std::set<double>> levels_of;  // by variable name
    std::set<int64_t> times;
    std::vector<std::string> order;                      // variables in the order the file has them
    for (const auto& message : messages_) {
      const std::string name = variable_name(message);
      if (!levels_of.count(name)) order.push_back(name);
      levels_of[name].insert(message.level);
      times.insert(message.valid_time);
    }
    times_.assign(times.begin(), times.end());

    // Level axes: per typeOfLevel, the union over its variables that have a level dimension.
    std::map<std::string, std::set<double>> axis_levels;
    for (const auto& message : messages_) {
      const std::string name = variable_name(message);
      if (message.type_of_level == "isobaricInhPa" || levels_of[name].size() > 1) axis_levels[message.type_of_level].insert(message.level);
    }
    std::map<std::string, std::string> axis_name;
    for (const auto& [type, levels] : axis_levels) {
      const bool plain = type == "isobaricInhPa" || (!axis_levels.count("isobaricInhPa") && axis_levels.size() == 1);
      axis_name[type] = plain ? "level" : "level_" + type;
    }

    for (const auto& name : order) {
      GribVariable var;
      var.meta.name = name;
      variables_.emplace(name, std::move(var));
    }
    for (size_t index = 0; index < messages_.size(); ++index) {
      const MessageInfo& message = messages_[index];
      GribVariable& var = variables_.at(variable_name(message));
      if (var.meta.dims.empty()) {
        var.short_name = message.short_name;
        var.type_of_level = message.type_of_level;
        var.has_level = axis_levels.count(message.type_of_level) &&
                        (message.type_of_level == "isobaricInhPa" || levels_of[var.meta.name].size() > 1);
        var.levels = var.has_level ? std::vector<double>(axis_levels[message.type_of_level].begin(), axis_levels[message.type_of_level].end())
                                   : std::vector<double>{message.level};
        var.meta.dims.push_back({"time", times_.size()});
        if (var.has_level) var.meta.dims.push_back({axis_name[message.type_of_level], var.levels.size()});
        if (grid_.reduced) {
          var.meta.dims.push_back({"values", static_cast<size_t>(grid_.ni)});
        } else {
          var.meta.dims.push_back({"latitude", static_cast<size_t>(grid_.nj)});
          var.meta.dims.push_back({"longitude", static_cast<size_t>(grid_.ni)});
        }
        var.meta.dtype = message.packing;
        auto& attributes = var.meta.attributes;
        attributes["units"] = text_attribute(message.units);
        attributes["long_name"] = text_attribute(message.long_name);
        if (message.cf_name != "unknown" && !message.cf_name.empty()) attributes["standard_name"] = text_attribute(message.cf_name);
        attributes["GRIB_shortName"] = text_attribute(message.short_name);
        attributes["GRIB_typeOfLevel"] = text_attribute(message.type_of_level);
        attributes["GRIB_paramId"] = number_attribute(static_cast<double>(message.param_id));
        if (!var.has_level) attributes["GRIB_level"] = number_attribute(message.level);
        attributes["_FillValue"] = number_attribute(kFillValue);
        var.message_of_slot.assign(times_.size() * var.levels.size(), -1);
      }
      const size_t t = static_cast<size_t>(std::lower_bound(times_.begin(), times_.end(), message.valid_time) - times_.begin());
      const size_t l = static_cast<size_t>(std::lower_bound(var.levels.begin(), var.levels.end(), message.level) - var.levels.begin());
      int64_t& slot = var.message_of_slot[t * var.levels.size() + l];
      if (slot >= 0) {
        const MessageInfo& other = messages_[static_cast<size_t>(slot)];
        auto origin = [](const MessageInfo& m) {
          return "reference " + std::to_string(m.reference_date) + " " + std::to_string(m.reference_time) + " step " + std::to_string(m.step) + " " + m.step_units;
        };
        throw DataError(path_ + ": messages " + std::to_string(other.number) + " and " + std::to_string(message.number) + " both hold '" +
                        message.short_name + "' at " + level_text(message.type_of_level, message.level) + " valid " + iso_time(message.valid_time) +
                        " (" + origin(other) + "; " + origin(message) + "); one message per variable, level and valid time is read");
      }
      slot = static_cast<int64_t>(index);
    }

    // Coordinates.
    auto coordinate = [&](const std::string& name, std::vector<double> values, std::map<std::string, Attribute> attributes,
                          const std::string& dimension = "") {
      if (variables_.count(name)) throw DataError(path_ + ": a GRIB parameter is named '" + name + "', the name of a coordinate");
      Coordinate c;
      c.meta.name = name;
      c.meta.dims.push_back({dimension.empty() ? name : dimension, values.size()});
      c.meta.attributes = std::move(attributes);
      c.meta.dtype = "f8";
      c.values = std::move(values);
      coordinates_.emplace(name, std::move(c));
    };
    coordinate("time", std::vector<double>(times_.begin(), times_.end()),
               {{"units", text_attribute(kTimeUnits)}, {"calendar", text_attribute(calendar_name(kTimeCalendar))},
                {"standard_name", text_attribute("time")}, {"long_name", text_attribute("valid time")}});
    for (const auto& [type, levels] : axis_levels) {
      std::map<std::string, Attribute> attributes{{"GRIB_typeOfLevel", text_attribute(type)}, {"long_name", text_attribute(type)}};
      if (auto units = level_units(type)) attributes["units"] = text_attribute(*units);
      if (type == "isobaricInhPa" || type == "isobaricInPa") {
        attributes["standard_name"] = text_attribute("air_pressure");
        attributes["positive"] = text_attribute("down");
      }
      coordinate(axis_name[type], std::vector<double>(levels.begin(), levels.end()), std::move(attributes));
    }
    // A reduced grid's coordinates run along the cells ("values"), one per point.
    const std::string along = grid_.reduced ? "values" : "";
    coordinate("latitude", grid_.latitudes,
               {{"units", text_attribute("degrees_north")}, {"standard_name", text_attribute("latitude")}, {"long_name", text_attribute("latitude")}},
               along);
    coordinate("longitude", grid_.longitudes,
               {{"units", text_attribute("degrees_east")}, {"standard_name", text_attribute("longitude")}, {"long_name", text_attribute("longitude")}},
               along);

    names_ = order;
    for (const auto& [name, c] : coordinates_) names_.push_back(name);
  }

  std::vector<double> decode(const MessageInfo& message) const {
    const std::string place = where(message);
    const std::vector<unsigned char> bytes = file_.message(message.location, place);
    const EcCodesLog log;
    Handle handle;
    {
      std::lock_guard<std::mutex> lock(eccodes_mutex());
      handle.reset(codes_handle_new_from_message(nullptr, bytes.data(), bytes.size()));
    }
    if (!handle) throw DataError(place + ": ecCodes cannot parse the message" + EcCodesLog::said());
    // ecCodes puts missingValue where the bitmap has no point; see kFillValue.
    const int set = codes_set_double(handle.get(), "missingValue", kFillValue);
    if (set != CODES_SUCCESS) throw DataError(place + ": key 'missingValue': " + codes_get_error_message(set) + EcCodesLog::said());
    size_t size = 0;
    int status = codes_get_size(handle.get(), "values", &size);
    if (status != CODES_SUCCESS) throw DataError(place + ": key 'values': " + codes_get_error_message(status) + EcCodesLog::said());
    const size_t expected = grid_.points();
    if (size != expected) {
      throw DataError(place + ": key 'values' has " + std::to_string(size) + " values for a grid of " + std::to_string(expected) + " points");
    }
    // ecCodes sizes its unpacking buffers from the message's own counts, and a corrupt count made
    // it ask for 12 GB before noticing (found by grib_reader_fuzz). The coded values can be no
    // more than the grid's points (fewer with a bitmap): checked before decoding.
    long coded = 0;
    if (codes_get_long(handle.get(), "numberOfCodedValues", &coded) == CODES_SUCCESS &&
        (coded < 0 || static_cast<size_t>(coded) > expected)) {
      throw DataError(place + ": key 'numberOfCodedValues' is " + std::to_string(coded) + " for a grid of " +
                      std::to_string(expected) + " points (a corrupt message?)");
    }
    std::vector<double> values(size);
    status = codes_get_double_array(handle.get(), "values", values.data(), &size);
    if (status != CODES_SUCCESS) throw DataError(place + ": key 'values' ('" + message.short_name + "'): " + codes_get_error_message(status) + EcCodesLog::said());
    if (size != expected) throw DataError(place + ": key 'values' decoded " + std::to_string(size) + " of " + std::to_string(expected) + " points");
    return values;
  }

  void check_slab(const VariableMeta& meta, const std::vector<size_t>& start, const std::vector<size_t>& count) const {
    if (start.size() != meta.dims.size() || count.size() != meta.dims.size()) {
      throw DataError("reading '" + meta.name + "' in " + path_ + ": a slab of rank " + std::to_string(start.size()) +
                      " for a variable of rank " + std::to_string(meta.dims.size()));
    }
    for (size_t d = 0; d < start.size(); ++d) {
      if (start[d] > meta.dims[d].length || count[d] > meta.dims[d].length - start[d]) {
        throw DataError("reading '" + meta.name + "' in " + path_ + ": dimension '" + meta.dims[d].name + "' has " +
                        std::to_string(meta.dims[d].length) + " entries, asked for " + std::to_string(start[d]) + ".." +
                        std::to_string(start[d] + count[d]));
      }
    }
  }

  std::string path_;
  GribFile file_;
  std::string format_;
  std::vector<MessageInfo> messages_;
  Grid grid_;
  std::vector<int64_t> times_;
  std::vector<std::string> names_;
  std::map<std::string, GribVariable> variables_;
  std::map<std::string, Coordinate> coordinates_;
};

bool has_grib_extension(const std::string& path) {
  std::string lower = path;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* extension : {".grib", ".grib2", ".grb", ".grb2", ".grib1", ".grb1"}) {
    const size_t n = std::strlen(extension);
    if (lower.size() >= n && lower.compare(lower.size() - n, n, extension) == 0) return true;
  }
  return false;
}

}  // namespace

bool looks_like_grib(const std::string& path) {
  if (has_grib_extension(path)) return true;
  std::ifstream file(path, std::ios::binary);
  char magic[4] = {};
  return file.read(magic, 4) && std::memcmp(magic, "GRIB", 4) == 0;
}

std::unique_ptr<Reader> open_grib(const std::string& path) { return std::make_unique<GribReader>(path); }

}  // namespace wxtrain::data
