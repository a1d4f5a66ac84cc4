#include "data/readers/classic_header.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <vector>

#include "core/error.h"

// The header layout (big-endian throughout, names and values padded to 4 bytes):
//   magic "CDF" version(1|2|5) · numrecs · dim_list · gatt_list · var_list
//   list = tag count [items]   (tag 0 with count 0 when absent)
//   dim  = name length(0 = the record dimension)
//   attr = name type count values
//   var  = name ndims dimids vatt_list type vsize begin
// Counts, lengths, ndims and dimids are 4 bytes, 8 in CDF-5; begin is 4 bytes in CDF-1, 8 otherwise.
// https://docs.unidata.ucar.edu/netcdf-c/current/file_format_specifications.html
namespace wxtrain::data {
namespace {

constexpr uint32_t kTagDimension = 0x0A, kTagVariable = 0x0B, kTagAttribute = 0x0C;
constexpr uint64_t kStreaming = 0xFFFFFFFFull;  // numrecs of a file still being written

// The header is cut short: classic_data_end reports it, check_classic_header leaves it to netCDF-C.
struct CutShort {};

class HeaderReader {
 public:
  HeaderReader(const std::string& path, bool lenient_end)
      : path_(path), in_(path, std::ios::binary), lenient_end_(lenient_end) {
    if (!in_) throw DataError("cannot open " + path + " to check its NetCDF header");
    in_.seekg(0, std::ios::end);
    size_ = static_cast<uint64_t>(in_.tellg());
    in_.seekg(0);
  }

  uint64_t u32() { return big_endian(4); }
  uint64_t u64() { return big_endian(8); }
  void skip(uint64_t bytes) {
    in_.seekg(static_cast<std::streamoff>(bytes), std::ios::cur);
    if (!in_) cut_short();
  }
  // `count` items of at least `item_bytes` each are declared next. netCDF-C allocates what a header
  // declares before it reads it (a name's or attribute's bytes, a list's pointers): a length field
  // of 2^40 in a 1 KB file is a 1 TB calloc (found by fuzz/netcdf_reader_fuzz). A list, whose
  // entries netCDF-C reads one by one, may be cut short by the end of the file (that is left to
  // netCDF-C, as before); a name or attribute must lie within the file: netCDF-C would read it past
  // the end and take what follows from there as the next lengths (a 32 GiB calloc, found by the
  // fuzzer). Far more than the file holds is a corrupt length, not a cut.
  void expect(uint64_t count, uint64_t item_bytes, const char* what, bool may_cross_end) {
    const std::streamoff at = in_.tellg();
    const uint64_t left = at < 0 || static_cast<uint64_t>(at) > size_ ? 0 : size_ - static_cast<uint64_t>(at);
    if (item_bytes == 0) return;
    const std::string declared = std::string(what) + " declares " + std::to_string(count) + " x " +
                                 std::to_string(item_bytes) + " bytes where the file has " + std::to_string(left) + " left";
    if (count > (left + kCutShortSlack) / item_bytes) malformed(declared);
    if (!may_cross_end && count > left / item_bytes) {
      throw DataError(path_ + " is truncated: its NetCDF header is cut short (" + declared + ")");
    }
  }
  [[noreturn]] void malformed(const std::string& what) const {
    throw DataError(path_ + " is not a readable NetCDF file: its classic header is malformed (" + what + ")");
  }

 private:
  // How far past the end of the file a declared length may reach and still be a file cut short.
  static constexpr uint64_t kCutShortSlack = uint64_t{16} << 20;

  uint64_t big_endian(int bytes) {
    unsigned char buffer[8] = {};
    if (!in_.read(reinterpret_cast<char*>(buffer), bytes)) {
      // netCDF-C reads a header cut short as if zeros followed: a length field split by the end
      // of the file is its bytes and then zeros (0x007fc000 in the last 4 bytes of a CDF-5 file is
      // a name of 0x007fc000'00000000 bytes to netCDF-C; found by fuzz/netcdf_reader_fuzz). The
      // first such field is returned so that expect() sees it; the next read ends the walk.
      if (!lenient_end_ || past_end_) cut_short();
      past_end_ = true;
      in_.clear();
    }
    uint64_t value = 0;
    for (int i = 0; i < bytes; ++i) value = (value << 8) | buffer[i];
    return value;
  }
  [[noreturn]] void cut_short() const {
    if (lenient_end_) throw CutShort{};
    throw DataError(path_ + " is truncated: the file ends inside its NetCDF header");
  }

  std::string path_;
  std::ifstream in_;
  uint64_t size_ = 0;
  bool lenient_end_ = false;
  bool past_end_ = false;
};

uint64_t padded(uint64_t bytes) { return (bytes + 3) / 4 * 4; }

// Sizes from a corrupt header can overflow 64 bits; saturated, they still exceed any file.
uint64_t times(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? UINT64_MAX : out;
}
uint64_t plus(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? UINT64_MAX : out;
}

uint64_t type_size(HeaderReader& reader, uint64_t type) {
  switch (type) {
    case 1: case 2: case 7: return 1;   // byte, char, ubyte
    case 3: case 8: return 2;           // short, ushort
    case 4: case 5: case 9: return 4;   // int, float, uint
    case 6: case 10: case 11: return 8;  // double, int64, uint64
    default: reader.malformed("unknown type " + std::to_string(type));
  }
}

}  // namespace

namespace {

uint64_t walk_header(const std::string& path, bool lenient_end) {
  HeaderReader reader(path, lenient_end);
  const uint64_t magic = reader.u32();
  const uint64_t version = magic & 0xFF;
  if ((magic >> 8) != 0x434446 || (version != 1 && version != 2 && version != 5)) reader.malformed("no CDF magic");
  const bool cdf5 = version == 5;
  auto count = [&] { return cdf5 ? reader.u64() : reader.u32(); };
  auto skip_name = [&] {
    const uint64_t length = count();
    reader.expect(length, 1, "a name", /*may_cross_end=*/false);
    reader.skip(padded(length));
  };
  auto list = [&](uint32_t expected_tag, const char* what) {
    const uint64_t tag = reader.u32();
    const uint64_t n = count();
    if (tag != expected_tag && !(tag == 0 && n == 0)) reader.malformed(std::string("expected the ") + what + " list");
    reader.expect(n, 8, what, /*may_cross_end=*/true);  // the least an entry takes: an empty name's length and one count
    return n;
  };
  auto skip_attributes = [&] {
    for (uint64_t n = list(kTagAttribute, "attribute"); n > 0; --n) {
      skip_name();
      const uint64_t size = type_size(reader, reader.u32());
      const uint64_t values = count();
      reader.expect(values, size, "an attribute", /*may_cross_end=*/false);
      reader.skip(padded(values * size));
    }
  };

  const uint64_t numrecs = count();
  std::vector<uint64_t> dim_lengths;
  for (uint64_t n = list(kTagDimension, "dimension"); n > 0; --n) {
    skip_name();
    dim_lengths.push_back(count());
  }
  skip_attributes();

  struct Variable {
    uint64_t begin, bytes, vsize;
    bool record;
  };
  std::vector<Variable> variables;
  for (uint64_t n = list(kTagVariable, "variable"); n > 0; --n) {
    skip_name();
    const uint64_t ndims = count();
    reader.expect(ndims, cdf5 ? 8 : 4, "a variable's dimension list", /*may_cross_end=*/false);
    Variable v{0, 1, 0, false};
    for (uint64_t d = 0; d < ndims; ++d) {
      const uint64_t id = count();
      if (id >= dim_lengths.size()) reader.malformed("dimension id " + std::to_string(id) + " out of range");
      if (d == 0 && dim_lengths[id] == 0) {
        v.record = true;  // one record's worth below
      } else {
        v.bytes = times(v.bytes, dim_lengths[id]);
      }
    }
    skip_attributes();
    v.bytes = times(v.bytes, type_size(reader, reader.u32()));
    v.vsize = count();
    v.begin = version == 1 ? reader.u32() : reader.u64();
    variables.push_back(v);
  }

  // Records interleave the record variables; a file with exactly one has unpadded records.
  const auto records = std::count_if(variables.begin(), variables.end(), [](const Variable& v) { return v.record; });
  uint64_t record_size = 0;
  for (const Variable& v : variables) {
    if (v.record) record_size = plus(record_size, records == 1 ? v.bytes : v.vsize);
  }
  uint64_t end = 0;
  for (const Variable& v : variables) {
    if (!v.record) {
      end = std::max(end, plus(v.begin, v.bytes));
    } else if (numrecs != kStreaming && numrecs > 0) {
      end = std::max(end, plus(plus(v.begin, times(numrecs - 1, record_size)), v.bytes));
    }
  }
  return end;
}

}  // namespace

uint64_t classic_data_end(const std::string& path) { return walk_header(path, /*lenient_end=*/false); }

void check_classic_header(const std::string& path) {
  try {
    (void)walk_header(path, /*lenient_end=*/true);
  } catch (const CutShort&) {
    // netCDF-C reads what is there and says what it found; check_not_truncated names it otherwise.
  }
}

}  // namespace wxtrain::data
