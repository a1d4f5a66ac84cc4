#include "data/readers/classic_header.h"

#include <algorithm>
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

class HeaderReader {
 public:
  explicit HeaderReader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) throw DataError("cannot open " + path + " to check its NetCDF header");
  }

  uint64_t u32() { return big_endian(4); }
  uint64_t u64() { return big_endian(8); }
  void skip(uint64_t bytes) {
    in_.seekg(static_cast<std::streamoff>(bytes), std::ios::cur);
    if (!in_) cut_short();
  }
  [[noreturn]] void malformed(const std::string& what) const {
    throw DataError(path_ + " is not a readable NetCDF file: its classic header is malformed (" + what + ")");
  }

 private:
  uint64_t big_endian(int bytes) {
    unsigned char buffer[8];
    if (!in_.read(reinterpret_cast<char*>(buffer), bytes)) cut_short();
    uint64_t value = 0;
    for (int i = 0; i < bytes; ++i) value = (value << 8) | buffer[i];
    return value;
  }
  [[noreturn]] void cut_short() const {
    throw DataError(path_ + " is truncated: the file ends inside its NetCDF header");
  }

  std::string path_;
  std::ifstream in_;
};

uint64_t padded(uint64_t bytes) { return (bytes + 3) / 4 * 4; }

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

uint64_t classic_data_end(const std::string& path) {
  HeaderReader reader(path);
  const uint64_t magic = reader.u32();
  const uint64_t version = magic & 0xFF;
  if ((magic >> 8) != 0x434446 || (version != 1 && version != 2 && version != 5)) reader.malformed("no CDF magic");
  const bool cdf5 = version == 5;
  auto count = [&] { return cdf5 ? reader.u64() : reader.u32(); };
  auto skip_name = [&] { reader.skip(padded(count())); };
  auto list = [&](uint32_t expected_tag, const char* what) {
    const uint64_t tag = reader.u32();
    const uint64_t n = count();
    if (tag != expected_tag && !(tag == 0 && n == 0)) reader.malformed(std::string("expected the ") + what + " list");
    return n;
  };
  auto skip_attributes = [&] {
    for (uint64_t n = list(kTagAttribute, "attribute"); n > 0; --n) {
      skip_name();
      const uint64_t size = type_size(reader, reader.u32());
      reader.skip(padded(count() * size));
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
    Variable v{0, 1, 0, false};
    for (uint64_t d = 0; d < ndims; ++d) {
      const uint64_t id = count();
      if (id >= dim_lengths.size()) reader.malformed("dimension id " + std::to_string(id) + " out of range");
      if (d == 0 && dim_lengths[id] == 0) {
        v.record = true;  // one record's worth below
      } else {
        v.bytes *= dim_lengths[id];
      }
    }
    skip_attributes();
    v.bytes *= type_size(reader, reader.u32());
    v.vsize = count();
    v.begin = version == 1 ? reader.u32() : reader.u64();
    variables.push_back(v);
  }

  // Records interleave the record variables; a file with exactly one has unpadded records.
  const auto records = std::count_if(variables.begin(), variables.end(), [](const Variable& v) { return v.record; });
  uint64_t record_size = 0;
  for (const Variable& v : variables) {
    if (v.record) record_size += records == 1 ? v.bytes : v.vsize;
  }
  uint64_t end = 0;
  for (const Variable& v : variables) {
    if (!v.record) {
      end = std::max(end, v.begin + v.bytes);
    } else if (numrecs != kStreaming && numrecs > 0) {
      end = std::max(end, v.begin + (numrecs - 1) * record_size + v.bytes);
    }
  }
  return end;
}

}  // namespace wxtrain::data
