#pragma once
// Zarr array metadata, v2 (.zarray + .zattrs) and v3 (zarr.json), parsed into one ArrayMeta. A v2
// array's layout (order, dtype byte order, compressor) is expressed as the v3 codec chain it is
// equivalent to ([transpose if F] + bytes(endian) + [compressor]), so one decoder serves both.
// The parsers take text, not files, so the fuzzer can call them on arbitrary bytes; every problem
// is a DataError naming the array and the metadata key at fault.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/readers/reader.h"

namespace wxtrain::data::zarr {

enum class ScalarKind { kFloat, kSignedInt, kUnsignedInt };

// An element type the reader converts to float: f2/f4/f8, i1..i8, u1..u8 (bool reads as u1).
struct DataType {
  ScalarKind kind = ScalarKind::kFloat;
  size_t size = 4;  // bytes per element
};

enum class Endian { kLittle, kBig };

struct ShardingCodec;

// Thrown for an array whose elements are not numbers the reader converts to float (strings,
// objects, complex, structured: xarray writes string coordinates as "<U8" or "|O"). The store still
// opens without that array; asking for it gives this message.
class UnsupportedDataType : public wxtrain::DataError {
 public:
  using DataError::DataError;
};

// One entry of a codec chain. Chains are in encoding order: array->array codecs (transpose), one
// array->bytes codec (bytes or sharding_indexed), then bytes->bytes codecs (compressors, crc32c).
struct Codec {
  enum class Kind { kTranspose, kBytes, kSharding, kBlosc, kZstd, kLz4, kZlib, kGzip, kCrc32c };
  Kind kind = Kind::kBytes;
  std::string name;                                // as written in the metadata, for messages
  std::vector<size_t> permutation;                 // transpose: encoded dim i is decoded dim permutation[i]
  Endian endian = Endian::kLittle;                 // bytes
  std::shared_ptr<const ShardingCodec> sharding;   // sharding_indexed
};

using CodecChain = std::vector<Codec>;

// sharding_indexed: a shard (the array's chunk) holds a grid of inner chunks, each encoded with
// `inner`, and an index of (offset, nbytes) uint64 pairs per inner chunk encoded with `index`.
struct ShardingCodec {
  std::vector<size_t> inner_chunk_shape;
  CodecChain inner;
  CodecChain index;
  bool index_at_end = true;
};

struct ArrayMeta {
  std::string name;
  int zarr_format = 2;
  std::vector<size_t> shape;
  std::vector<size_t> chunk_shape;        // the stored chunk (for a sharded array: the shard)
  DataType dtype;
  std::string dtype_name;                 // as written: "<f4", "int16"
  CodecChain codecs;
  std::vector<uint8_t> fill_bytes;        // one element in native byte order (zeros for null)
  std::optional<double> fill_value;       // nullopt when fill_value is null
  // Chunk keys: v3 "default" is prefix "c" then indices each after `separator`; v2 (and v3's
  // "v2" encoding) are indices joined by `separator`, "0" for a 0-d array.
  bool key_prefix_c = false;
  char separator = '.';
  std::vector<std::string> dimension_names;
  std::map<std::string, Attribute> attributes;
  // What was read on an assumption the user should hear of (a sentence each, naming the array).
  std::vector<std::string> notes;

  std::string chunk_key(const std::vector<size_t>& chunk_index) const;
};

// Parses a v2 array. `zattrs_text` may be empty (no .zattrs). `name` is used in messages.
ArrayMeta parse_v2_array(const std::string& zarray_text, const std::string& zattrs_text, const std::string& name);
// The same from JSON already parsed (consolidated metadata holds every array's).
ArrayMeta v2_array_from_json(const nlohmann::json& zarray, const nlohmann::json& zattrs, const std::string& name);

// Parses a v3 zarr.json whose node_type is "array".
ArrayMeta parse_v3_array(const std::string& json_text, const std::string& name);
// The same from JSON already parsed.
ArrayMeta v3_array_from_json(const nlohmann::json& metadata, const std::string& name);

// Parses Zarr metadata JSON. Python's json (zarr-python, xarray) writes NaN, Infinity and
// -Infinity bare for non-finite attributes, which is not JSON; they are accepted here and read
// back as numbers by json_number. Throws DataError naming `what` when the text is not JSON.
nlohmann::json parse_metadata_json(const std::string& text, const std::string& what);

// A JSON number, or one of the non-finite spellings ("NaN", "Infinity", "-Infinity", and the bare
// forms parse_metadata_json accepts) as a double; nullopt otherwise.
std::optional<double> json_number(const nlohmann::json& value);

// Reader attributes from a JSON object (.zattrs, v3 "attributes"): strings as text, numbers and
// lists of numbers as numbers, anything else as its JSON text. `_ARRAY_DIMENSIONS` is left out.
std::map<std::string, Attribute> attributes_from_json(const nlohmann::json& object);

// An IEEE half float (f2, float16) as float.
float half_to_float(uint16_t half);

// Product of `shape` times `item_size`, or a DataError naming `what` when it overflows 2^62.
uint64_t checked_byte_count(const std::vector<size_t>& shape, size_t item_size, const std::string& what);

}  // namespace wxtrain::data::zarr
