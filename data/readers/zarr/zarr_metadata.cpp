#include "data/readers/zarr/zarr_metadata.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace wxtrain::data::zarr {
namespace {

using nlohmann::json;

// Bare NaN/Infinity/-Infinity become these strings: a control character no attribute text
// carries, so json_number can tell them from the text "NaN".
const std::string kBareNan = "\x01NaN";
const std::string kBareInfinity = "\x01Infinity";
const std::string kBareNegativeInfinity = "\x01-Infinity";
constexpr int kMaxJsonDepth = 64;      // metadata is a few levels deep; deeper is hostile input
constexpr size_t kMaxRank = 32;
constexpr int kMaxShardingDepth = 4;
// One decoded chunk is held in memory whole; blosc itself stops at 2 GiB.
constexpr uint64_t kMaxChunkBytes = uint64_t{1} << 31;

[[noreturn]] void fail(const std::string& array, const std::string& key, const std::string& what) {
  throw DataError("Zarr array '" + array + "', metadata key '" + key + "': " + what);
}

const json* member(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

size_t json_size(const json& value, const std::string& array, const std::string& key) {
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > (uint64_t{1} << 62)) fail(array, key, "size " + value.dump() + " is too large");
    return static_cast<size_t>(value.get<uint64_t>());
  }
  if (value.is_number_integer()) fail(array, key, "negative size " + value.dump());
  fail(array, key, "expected a non-negative integer, got " + value.dump());
}

std::vector<size_t> json_shape(const json* value, const std::string& array, const std::string& key) {
  if (!value || !value->is_array()) fail(array, key, value ? "expected a list of sizes, got " + value->dump() : "missing");
  if (value->size() > kMaxRank) fail(array, key, "rank " + std::to_string(value->size()) + " is above the supported " + std::to_string(kMaxRank));
  std::vector<size_t> shape;
  for (const auto& entry : *value) shape.push_back(json_size(entry, array, key));
  return shape;
}

std::string shape_text(const std::vector<size_t>& shape) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d) text += (d ? ", " : "") + std::to_string(shape[d]);
  return text + "]";
}

std::string json_text(const json* value) { return value ? value->dump() : "(missing)"; }

// f2 fill values are stored as half floats: round to nearest even, keeping NaN and infinities.
uint16_t float_to_half(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t exponent = (bits >> 23) & 0xffu;
  uint32_t mantissa = bits & 0x7fffffu;
  if (exponent == 0xff) return sign | 0x7c00u | (mantissa ? 0x200u : 0u);
  const int half_exponent = static_cast<int>(exponent) - 127 + 15;
  if (half_exponent >= 31) return sign | 0x7c00u;
  if (half_exponent <= 0) {
    if (half_exponent < -10) return sign;
    mantissa |= 0x800000u;
    const int shift = 14 - half_exponent;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(half_exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into infinity: right
  return static_cast<uint16_t>(sign | half);
}

template <typename T>
std::vector<uint8_t> native_bytes(T value) {
  std::vector<uint8_t> bytes(sizeof(T));
  std::memcpy(bytes.data(), &value, sizeof(T));
  return bytes;
}

// The fill value as one native element, and as the double _FillValue reports.
void set_fill_value(ArrayMeta& meta, const json* value, const std::string& key) {
  meta.fill_bytes.assign(meta.dtype.size, 0);
  if (!value || value->is_null()) return;
  const DataType& type = meta.dtype;
  if (type.kind == ScalarKind::kFloat) {
    double number = 0;
    if (value->is_string() && value->get<std::string>().rfind("0x", 0) == 0) {
      // v3: the element's bit pattern in hex, e.g. "0x7fc00000" for a float32 NaN.
      const std::string hex = value->get<std::string>().substr(2);
      if (hex.size() != 2 * type.size || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
        fail(meta.name, key, "hex fill value " + value->dump() + " is not " + std::to_string(type.size) + " bytes");
      }
      const uint64_t bits = std::stoull(hex, nullptr, 16);
      if (type.size == 2) {
        meta.fill_bytes = native_bytes(static_cast<uint16_t>(bits));
        meta.fill_value = half_to_float(static_cast<uint16_t>(bits));
      } else if (type.size == 4) {
        meta.fill_bytes = native_bytes(static_cast<uint32_t>(bits));
        float f;
        std::memcpy(&f, meta.fill_bytes.data(), 4);
        meta.fill_value = f;
      } else {
        meta.fill_bytes = native_bytes(bits);
        std::memcpy(&number, meta.fill_bytes.data(), 8);
        meta.fill_value = number;
      }
      return;
    }
    auto parsed = json_number(*value);
    if (!parsed) fail(meta.name, key, "fill value " + value->dump() + " is not a number for dtype " + meta.dtype_name);
    number = *parsed;
    if (type.size == 2) meta.fill_bytes = native_bytes(float_to_half(static_cast<float>(number)));
    if (type.size == 4) meta.fill_bytes = native_bytes(static_cast<float>(number));
    if (type.size == 8) meta.fill_bytes = native_bytes(number);
    meta.fill_value = type.size == 4 ? static_cast<double>(static_cast<float>(number)) : number;
    return;
  }
  // Integers: taken from the JSON integer itself, so 64-bit fill values stay exact.
  bool negative = false;
  uint64_t magnitude = 0;
  if (value->is_boolean()) {
    magnitude = value->get<bool>() ? 1 : 0;
  } else if (value->is_number_unsigned()) {
    magnitude = value->get<uint64_t>();
  } else if (value->is_number_integer()) {
    const int64_t signed_value = value->get<int64_t>();
    negative = signed_value < 0;
    magnitude = negative ? uint64_t(0) - static_cast<uint64_t>(signed_value) : static_cast<uint64_t>(signed_value);
  } else if (value->is_number_float() && std::isfinite(value->get<double>()) &&
             value->get<double>() == std::trunc(value->get<double>()) && std::fabs(value->get<double>()) < 9.0e18) {
    const int64_t signed_value = static_cast<int64_t>(value->get<double>());
    negative = signed_value < 0;
    magnitude = negative ? uint64_t(0) - static_cast<uint64_t>(signed_value) : static_cast<uint64_t>(signed_value);
  } else {
    fail(meta.name, key, "fill value " + value->dump() + " is not an integer for dtype " + meta.dtype_name);
  }
  const unsigned bits = static_cast<unsigned>(8 * type.size);
  const bool is_signed = type.kind == ScalarKind::kSignedInt;
  const uint64_t max_positive = is_signed ? (uint64_t{1} << (bits - 1)) - 1 : (bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1);
  const uint64_t max_negative = is_signed ? (uint64_t{1} << (bits - 1)) : 0;
  if ((negative && magnitude > max_negative) || (!negative && magnitude > max_positive)) {
    fail(meta.name, key, "fill value " + value->dump() + " does not fit dtype " + meta.dtype_name);
  }
  const uint64_t twos = negative ? uint64_t(0) - magnitude : magnitude;
  switch (type.size) {
    case 1: meta.fill_bytes = native_bytes(static_cast<uint8_t>(twos)); break;
    case 2: meta.fill_bytes = native_bytes(static_cast<uint16_t>(twos)); break;
    case 4: meta.fill_bytes = native_bytes(static_cast<uint32_t>(twos)); break;
    default: meta.fill_bytes = native_bytes(twos); break;
  }
  meta.fill_value = negative ? -static_cast<double>(magnitude) : static_cast<double>(magnitude);
}

// Checks the chunk the reader decodes whole: every size positive, the byte count held in memory.
void check_chunk_shape(const ArrayMeta& meta, const std::vector<size_t>& chunk, const std::string& key) {
  for (size_t size : chunk) {
    if (size == 0) fail(meta.name, key, "chunk sizes must be positive, got " + shape_text(chunk));
  }
  const uint64_t bytes = checked_byte_count(chunk, meta.dtype.size, "array '" + meta.name + "' " + key);
  if (bytes > kMaxChunkBytes) {
    fail(meta.name, key, "a chunk of " + shape_text(chunk) + " holds " + std::to_string(bytes) +
                             " bytes, above the 2 GiB a chunk may have here");
  }
}

std::vector<size_t> permuted(const std::vector<size_t>& shape, const std::vector<size_t>& permutation) {
  std::vector<size_t> result(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) result[i] = shape[permutation[i]];
  return result;
}

// Parses a v3 codec list for chunks of `chunk_shape` and `dtype`, checking the order the spec
// requires (array->array, one array->bytes, bytes->bytes).
CodecChain parse_v3_codecs(const json* list, const ArrayMeta& meta, const DataType& dtype,
                           std::vector<size_t> chunk_shape, const std::string& key, int sharding_depth) {
  if (!list || !list->is_array() || list->empty()) fail(meta.name, key, "expected a non-empty list of codecs, got " + json_text(list));
  CodecChain chain;
  bool have_array_to_bytes = false;
  for (const auto& entry : *list) {
    std::string name;
    const json* configuration = nullptr;
    if (entry.is_string()) {
      name = entry.get<std::string>();
    } else if (const json* n = member(entry, "name"); n && n->is_string()) {
      name = n->get<std::string>();
      configuration = member(entry, "configuration");
    } else {
      fail(meta.name, key, "a codec must be a name or an object with a \"name\", got " + entry.dump());
    }
    const json empty = json::object();
    const json& config = configuration && configuration->is_object() ? *configuration : empty;
    const std::string where = key + "." + name;
    Codec codec;
    codec.name = name;
    // zarr-python 3 writes numcodecs' codecs under "numcodecs.<id>"; their bytes are the same.
    const std::string id = name.rfind("numcodecs.", 0) == 0 ? name.substr(10) : name;
    if (id == "transpose") {
      codec.kind = Codec::Kind::kTranspose;
      const json* order = member(config, "order");
      const size_t rank = chunk_shape.size();
      if (order && order->is_string() && (*order == "C" || *order == "F")) {
        for (size_t d = 0; d < rank; ++d) codec.permutation.push_back(*order == "C" ? d : rank - 1 - d);
      } else {
        codec.permutation = json_shape(order, meta.name, where + ".order");
        std::vector<bool> seen(rank, false);
        if (codec.permutation.size() != rank) fail(meta.name, where, "order " + json_text(order) + " is not a permutation of " + std::to_string(rank) + " dimensions");
        for (size_t axis : codec.permutation) {
          if (axis >= rank || seen[axis]) fail(meta.name, where, "order " + json_text(order) + " is not a permutation of " + std::to_string(rank) + " dimensions");
          seen[axis] = true;
        }
      }
      if (have_array_to_bytes) fail(meta.name, where, "transpose (array->array) must come before the bytes or sharding codec");
      chunk_shape = permuted(chunk_shape, codec.permutation);
    } else if (id == "bytes" || id == "endian") {
      codec.kind = Codec::Kind::kBytes;
      if (const json* endian = member(config, "endian")) {
        if (*endian == "big") {
          codec.endian = Endian::kBig;
        } else if (*endian != "little") {
          fail(meta.name, where, "endian must be \"little\" or \"big\", got " + endian->dump());
        }
      }
    } else if (id == "sharding_indexed") {
      codec.kind = Codec::Kind::kSharding;
      if (sharding_depth >= kMaxShardingDepth) fail(meta.name, where, "sharding nested more than " + std::to_string(kMaxShardingDepth) + " levels");
      auto sharding = std::make_shared<ShardingCodec>();
      sharding->inner_chunk_shape = json_shape(member(config, "chunk_shape"), meta.name, where + ".chunk_shape");
      const std::vector<size_t>& inner = sharding->inner_chunk_shape;
      if (inner.size() != chunk_shape.size()) {
        fail(meta.name, where + ".chunk_shape", "inner chunks " + shape_text(inner) + " have another rank than the shard " + shape_text(chunk_shape));
      }
      for (size_t d = 0; d < inner.size(); ++d) {
        if (inner[d] == 0 || chunk_shape[d] % inner[d] != 0) {
          fail(meta.name, where + ".chunk_shape", "inner chunks " + shape_text(inner) + " do not divide the shard " + shape_text(chunk_shape));
        }
      }
      check_chunk_shape(meta, inner, where + ".chunk_shape");
      sharding->inner = parse_v3_codecs(member(config, "codecs"), meta, dtype, inner, where + ".codecs", sharding_depth + 1);
      std::vector<size_t> index_shape;
      for (size_t d = 0; d < inner.size(); ++d) index_shape.push_back(chunk_shape[d] / inner[d]);
      index_shape.push_back(2);
      checked_byte_count(index_shape, 16, "array '" + meta.name + "' shard index");
      const json default_index = json::array({json{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}}, json{{"name", "crc32c"}}});
      const json* index_codecs = member(config, "index_codecs");
      sharding->index = parse_v3_codecs(index_codecs ? index_codecs : &default_index, meta,
                                        DataType{ScalarKind::kUnsignedInt, 8}, index_shape, where + ".index_codecs",
                                        sharding_depth + 1);
      for (const Codec& index_codec : sharding->index) {
        const bool fixed_size = index_codec.kind == Codec::Kind::kBytes || index_codec.kind == Codec::Kind::kTranspose ||
                                index_codec.kind == Codec::Kind::kCrc32c;
        if (!fixed_size) fail(meta.name, where + ".index_codecs", "codec '" + index_codec.name + "' gives the shard index no fixed size (only bytes, transpose and crc32c can)");
      }
      if (const json* location = member(config, "index_location")) {
        if (*location == "start") {
          sharding->index_at_end = false;
        } else if (*location != "end") {
          fail(meta.name, where + ".index_location", "expected \"start\" or \"end\", got " + location->dump());
        }
      }
      codec.sharding = std::move(sharding);
    } else if (id == "blosc") {
      codec.kind = Codec::Kind::kBlosc;  // the blosc header describes itself: the settings are for writers
    } else if (id == "zstd") {
      codec.kind = Codec::Kind::kZstd;   // a zstd frame carries its own checksum flag
    } else if (id == "gzip") {
      codec.kind = Codec::Kind::kGzip;
    } else if (id == "zlib") {
      codec.kind = Codec::Kind::kZlib;
    } else if (id == "lz4") {
      codec.kind = Codec::Kind::kLz4;
    } else if (id == "crc32c") {
      codec.kind = Codec::Kind::kCrc32c;
    } else {
      throw DataError("Zarr array '" + meta.name + "', metadata key '" + key + "': codec '" + name +
                      "' is not supported (supported: transpose, bytes, sharding_indexed, blosc, zstd, gzip, zlib, lz4, crc32c)");
    }
    const bool array_to_bytes = codec.kind == Codec::Kind::kBytes || codec.kind == Codec::Kind::kSharding;
    if (array_to_bytes) {
      if (have_array_to_bytes) fail(meta.name, where, "a codec chain has exactly one array->bytes codec (bytes or sharding_indexed)");
      have_array_to_bytes = true;
    } else if (codec.kind != Codec::Kind::kTranspose && !have_array_to_bytes) {
      fail(meta.name, where, "bytes->bytes codec '" + name + "' comes before the array->bytes codec (bytes or sharding_indexed)");
    }
    chain.push_back(std::move(codec));
  }
  if (!have_array_to_bytes) fail(meta.name, key, "no array->bytes codec (bytes or sharding_indexed) in the chain");
  return chain;
}

// What the reader decodes whole: the chunk, or for an array sharded with nothing around the
// sharding codec, the inner chunk (read from the shard by its index entry alone).
void check_decoded_unit(const ArrayMeta& meta, const std::string& key) {
  if (meta.codecs.size() == 1 && meta.codecs[0].kind == Codec::Kind::kSharding) {
    for (size_t size : meta.chunk_shape) {
      if (size == 0) fail(meta.name, key, "chunk sizes must be positive, got " + shape_text(meta.chunk_shape));
    }
    return;  // the inner chunk shape was checked with the codec
  }
  check_chunk_shape(meta, meta.chunk_shape, key);
}

void set_dtype_v3(ArrayMeta& meta, const json* value) {
  static const std::map<std::string, DataType> kTypes = {
      {"bool", {ScalarKind::kUnsignedInt, 1}},  {"int8", {ScalarKind::kSignedInt, 1}},
      {"int16", {ScalarKind::kSignedInt, 2}},   {"int32", {ScalarKind::kSignedInt, 4}},
      {"int64", {ScalarKind::kSignedInt, 8}},   {"uint8", {ScalarKind::kUnsignedInt, 1}},
      {"uint16", {ScalarKind::kUnsignedInt, 2}}, {"uint32", {ScalarKind::kUnsignedInt, 4}},
      {"uint64", {ScalarKind::kUnsignedInt, 8}}, {"float16", {ScalarKind::kFloat, 2}},
      {"float32", {ScalarKind::kFloat, 4}},     {"float64", {ScalarKind::kFloat, 8}}};
  if (!value) fail(meta.name, "data_type", "missing");
  if (!value->is_string()) {
    throw UnsupportedDataType("Zarr array '" + meta.name + "', metadata key 'data_type': data type " + value->dump() + " is not supported");
  }
  meta.dtype_name = value->get<std::string>();
  auto it = kTypes.find(meta.dtype_name);
  if (it == kTypes.end()) {
    throw UnsupportedDataType("Zarr array '" + meta.name + "', metadata key 'data_type': data type '" + meta.dtype_name +
                              "' is not supported (bool, int8..int64, uint8..uint64, float16/32/64)");
  }
  meta.dtype = it->second;
}

// v2: "<f4", ">i2", "|u1", "|b1"; datetime64/timedelta64 ("<M8[ns]") are int64 counts.
Endian set_dtype_v2(ArrayMeta& meta, const json* value) {
  if (value && value->is_array()) {
    throw UnsupportedDataType("Zarr array '" + meta.name + "', metadata key '.zarray dtype': structured dtypes are not supported");
  }
  if (!value || !value->is_string()) fail(meta.name, ".zarray dtype", "expected a dtype string such as \"<f4\", got " + json_text(value));
  const std::string text = value->get<std::string>();
  meta.dtype_name = text;
  if (text.size() < 3) {
    throw UnsupportedDataType("Zarr array '" + meta.name + "', metadata key '.zarray dtype': dtype '" + text + "' is not supported");
  }
  const char order = text[0];
  const char kind = text[1];
  const std::string size_text = text.substr(2);
  Endian endian = order == '>' ? Endian::kBig : Endian::kLittle;
  if (order != '<' && order != '>' && order != '|' && order != '=') fail(meta.name, ".zarray dtype", "dtype '" + text + "' has no byte order (<, > or |)");
  if ((kind == 'M' || kind == 'm') && size_text.rfind("8[", 0) == 0) {
    meta.dtype = {ScalarKind::kSignedInt, 8};
    return endian;
  }
  size_t size = 0;
  if (size_text == "1") size = 1;
  if (size_text == "2") size = 2;
  if (size_text == "4") size = 4;
  if (size_text == "8") size = 8;
  if (kind == 'f' && size >= 2) {
    meta.dtype = {ScalarKind::kFloat, size};
  } else if (kind == 'i' && size) {
    meta.dtype = {ScalarKind::kSignedInt, size};
  } else if ((kind == 'u' && size) || (kind == 'b' && size == 1)) {
    meta.dtype = {ScalarKind::kUnsignedInt, size};
  } else {
    throw UnsupportedDataType("Zarr array '" + meta.name + "', metadata key '.zarray dtype': dtype '" + text +
                              "' is not supported (f2/f4/f8, i1..i8, u1..u8, b1)");
  }
  return endian;
}

void set_dimension_names(ArrayMeta& meta, const json* names, const std::string& key) {
  meta.dimension_names.clear();
  if (names && !names->is_null()) {
    if (!names->is_array() || names->size() != meta.shape.size()) {
      fail(meta.name, key, "expected " + std::to_string(meta.shape.size()) + " dimension names, got " + names->dump());
    }
    for (size_t d = 0; d < names->size(); ++d) {
      const json& name = (*names)[d];
      if (name.is_string()) {
        meta.dimension_names.push_back(name.get<std::string>());
      } else if (name.is_null()) {
        meta.dimension_names.push_back("dim_" + std::to_string(d));
      } else {
        fail(meta.name, key, "dimension names must be strings, got " + names->dump());
      }
    }
    return;
  }
  for (size_t d = 0; d < meta.shape.size(); ++d) meta.dimension_names.push_back("dim_" + std::to_string(d));
}

void add_fill_value_attribute(ArrayMeta& meta) {
  if (meta.fill_value && !meta.attributes.count("_FillValue")) meta.attributes["_FillValue"].numbers = {*meta.fill_value};
}

template <typename Parse>
ArrayMeta guarded(const std::string& name, Parse parse) {
  try {
    return parse();
  } catch (const nlohmann::json::exception& error) {
    // Backstop: every access above checks types first; this names the array if one was missed.
    throw DataError("Zarr array '" + name + "': malformed metadata (" + error.what() + ")");
  }
}

}  // namespace

float half_to_float(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int shift = 0;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      ++shift;
    }
    bits = sign | (static_cast<uint32_t>(127 - 15 + 1 - shift) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

std::string ArrayMeta::chunk_key(const std::vector<size_t>& chunk_index) const {
  std::string key = key_prefix_c ? "c" : "";
  for (size_t d = 0; d < chunk_index.size(); ++d) {
    if (key_prefix_c || d > 0) key += separator;
    key += std::to_string(chunk_index[d]);
  }
  if (key.empty()) key = "0";  // v2's key for the one chunk of a 0-d array
  return key;
}

uint64_t checked_byte_count(const std::vector<size_t>& shape, size_t item_size, const std::string& what) {
  const uint64_t limit = uint64_t{1} << 62;
  uint64_t bytes = item_size;
  for (size_t size : shape) {
    if (size != 0 && bytes > limit / size) throw DataError(what + ": shape " + shape_text(shape) + " is too large");
    bytes *= size;
  }
  return bytes;
}

nlohmann::json parse_metadata_json(const std::string& text, const std::string& what) {
  // One pass outside strings: bare non-finite numbers become marker strings, and the nesting
  // depth is bounded (nlohmann's dump() recurses).
  std::string rewritten;
  rewritten.reserve(text.size());
  bool in_string = false;
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      rewritten += c;
      if (c == '\\' && i + 1 < text.size()) {
        rewritten += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) throw DataError(what + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    }
    if (c == ']' || c == '}') --depth;
    if (text.compare(i, 3, "NaN") == 0) {
      rewritten += "\"\\u0001NaN\"";
      i += 2;
    } else if (text.compare(i, 8, "Infinity") == 0) {
      rewritten += "\"\\u0001Infinity\"";
      i += 7;
    } else if (text.compare(i, 9, "-Infinity") == 0) {
      rewritten += "\"\\u0001-Infinity\"";
      i += 8;
    } else {
      rewritten += c;
    }
  }
  json parsed = json::parse(rewritten, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) throw DataError(what + ": not valid JSON");
  return parsed;
}

std::optional<double> json_number(const nlohmann::json& value) {
  if (value.is_number()) return value.get<double>();
  if (!value.is_string()) return std::nullopt;
  const std::string& text = value.get_ref<const std::string&>();
  if (text == "NaN" || text == kBareNan) return std::numeric_limits<double>::quiet_NaN();
  if (text == "Infinity" || text == kBareInfinity) return std::numeric_limits<double>::infinity();
  if (text == "-Infinity" || text == kBareNegativeInfinity) return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}

std::map<std::string, Attribute> attributes_from_json(const nlohmann::json& object) {
  std::map<std::string, Attribute> attributes;
  if (!object.is_object()) return attributes;
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (it.key() == "_ARRAY_DIMENSIONS") continue;
    const json& value = it.value();
    Attribute attribute;
    auto as_number = [](const json& v) -> std::optional<double> {
      if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
      if (v.is_string() && v.get_ref<const std::string&>().rfind("\x01", 0) != 0) return std::nullopt;
      return json_number(v);
    };
    if (auto number = as_number(value)) {
      attribute.numbers = {*number};
    } else if (value.is_string()) {
      attribute.text = value.get<std::string>();
    } else if (value.is_array() && !value.empty()) {
      for (const auto& entry : value) {
        auto number = as_number(entry);
        if (!number) {
          attribute.numbers.clear();
          break;
        }
        attribute.numbers.push_back(*number);
      }
      if (attribute.numbers.empty()) attribute.text = value.dump();
    } else if (value.is_null()) {
      continue;
    } else {
      attribute.text = value.dump();
    }
    attributes[it.key()] = std::move(attribute);
  }
  return attributes;
}

ArrayMeta parse_v2_array(const std::string& zarray_text, const std::string& zattrs_text, const std::string& name) {
  const json zarray = parse_metadata_json(zarray_text, "Zarr array '" + name + "' .zarray");
  const json zattrs = zattrs_text.empty() ? json::object() : parse_metadata_json(zattrs_text, "Zarr array '" + name + "' .zattrs");
  return v2_array_from_json(zarray, zattrs, name);
}

ArrayMeta v2_array_from_json(const nlohmann::json& zarray, const nlohmann::json& zattrs, const std::string& name) {
  return guarded(name, [&] {
    ArrayMeta meta;
    meta.name = name;
    meta.zarr_format = 2;
    if (!zarray.is_object()) fail(name, ".zarray", "expected a JSON object");
    if (const json* format = member(zarray, "zarr_format"); !format || *format != 2) fail(name, ".zarray zarr_format", "expected 2, got " + json_text(format));
    meta.shape = json_shape(member(zarray, "shape"), name, ".zarray shape");
    meta.chunk_shape = json_shape(member(zarray, "chunks"), name, ".zarray chunks");
    if (meta.chunk_shape.size() != meta.shape.size()) {
      fail(name, ".zarray chunks", "chunks " + shape_text(meta.chunk_shape) + " have another rank than shape " + shape_text(meta.shape));
    }
    checked_byte_count(meta.shape, 1, "array '" + name + "' .zarray shape");
    const Endian endian = set_dtype_v2(meta, member(zarray, "dtype"));
    check_chunk_shape(meta, meta.chunk_shape, ".zarray chunks");
    if (const json* filters = member(zarray, "filters"); filters && !filters->is_null() && !(filters->is_array() && filters->empty())) {
      std::string id = filters->dump();
      if (filters->is_array()) {
        const json* first = member((*filters)[0], "id");
        if (first && first->is_string()) id = first->get<std::string>();
      }
      throw DataError("Zarr array '" + name + "', metadata key '.zarray filters': filter '" + id + "' is not supported (only filters: null)");
    }
    // F order stores each chunk transposed: the v3 transpose codec with the axes reversed.
    const json* order = member(zarray, "order");
    if (order && *order == "F" && meta.shape.size() > 1) {
      Codec transpose;
      transpose.kind = Codec::Kind::kTranspose;
      transpose.name = "order F";
      for (size_t d = meta.shape.size(); d-- > 0;) transpose.permutation.push_back(d);
      meta.codecs.push_back(std::move(transpose));
    } else if (order && *order != "C" && *order != "F") {
      fail(name, ".zarray order", "expected \"C\" or \"F\", got " + order->dump());
    }
    Codec bytes;
    bytes.kind = Codec::Kind::kBytes;
    bytes.name = "dtype " + meta.dtype_name;
    bytes.endian = endian;
    meta.codecs.push_back(bytes);
    if (const json* compressor = member(zarray, "compressor"); compressor && !compressor->is_null()) {
      const json* id = member(*compressor, "id");
      if (!id || !id->is_string()) fail(name, ".zarray compressor", "expected an object with an \"id\", got " + compressor->dump());
      static const std::map<std::string, Codec::Kind> kCompressors = {{"blosc", Codec::Kind::kBlosc},
                                                                       {"zstd", Codec::Kind::kZstd},
                                                                       {"lz4", Codec::Kind::kLz4},
                                                                       {"zlib", Codec::Kind::kZlib},
                                                                       {"gzip", Codec::Kind::kGzip}};
      auto it = kCompressors.find(id->get<std::string>());
      if (it == kCompressors.end()) {
        throw DataError("Zarr array '" + name + "', metadata key '.zarray compressor': codec '" + id->get<std::string>() +
                        "' is not supported (supported: blosc, zstd, lz4, zlib, gzip)");
      }
      Codec codec;
      codec.kind = it->second;
      codec.name = it->first;
      meta.codecs.push_back(codec);
    }
    set_fill_value(meta, member(zarray, "fill_value"), ".zarray fill_value");
    if (const json* separator = member(zarray, "dimension_separator"); separator && !separator->is_null()) {
      if (*separator != "." && *separator != "/") fail(name, ".zarray dimension_separator", "expected \".\" or \"/\", got " + separator->dump());
      meta.separator = separator->get<std::string>()[0];
    }
    if (!zattrs.is_null() && !zattrs.is_object()) fail(name, ".zattrs", "expected a JSON object");
    set_dimension_names(meta, member(zattrs, "_ARRAY_DIMENSIONS"), ".zattrs _ARRAY_DIMENSIONS");
    meta.attributes = attributes_from_json(zattrs);
    add_fill_value_attribute(meta);
    return meta;
  });
}

ArrayMeta parse_v3_array(const std::string& json_text, const std::string& name) {
  return v3_array_from_json(parse_metadata_json(json_text, "Zarr array '" + name + "' zarr.json"), name);
}

ArrayMeta v3_array_from_json(const nlohmann::json& metadata, const std::string& name) {
  return guarded(name, [&] {
    ArrayMeta meta;
    meta.name = name;
    meta.zarr_format = 3;
    if (!metadata.is_object()) fail(name, "zarr.json", "expected a JSON object");
    if (const json* format = member(metadata, "zarr_format"); !format || *format != 3) fail(name, "zarr_format", "expected 3, got " + json_text(format));
    if (const json* type = member(metadata, "node_type"); !type || *type != "array") fail(name, "node_type", "expected \"array\", got " + json_text(type));
    meta.shape = json_shape(member(metadata, "shape"), name, "shape");
    checked_byte_count(meta.shape, 1, "array '" + name + "' shape");
    set_dtype_v3(meta, member(metadata, "data_type"));
    const json* grid = member(metadata, "chunk_grid");
    const json* grid_name = grid ? member(*grid, "name") : nullptr;
    if (!grid_name || *grid_name != "regular") {
      fail(name, "chunk_grid", "only the \"regular\" chunk grid is supported, got " + json_text(grid));
    }
    const json* grid_config = member(*grid, "configuration");
    meta.chunk_shape = json_shape(grid_config ? member(*grid_config, "chunk_shape") : nullptr, name,
                                  "chunk_grid.configuration.chunk_shape");
    if (meta.chunk_shape.size() != meta.shape.size()) {
      fail(name, "chunk_grid.configuration.chunk_shape", "chunks " + shape_text(meta.chunk_shape) + " have another rank than shape " + shape_text(meta.shape));
    }
    for (size_t size : meta.chunk_shape) {
      if (size == 0) fail(name, "chunk_grid.configuration.chunk_shape", "chunk sizes must be positive, got " + shape_text(meta.chunk_shape));
    }
    checked_byte_count(meta.chunk_shape, meta.dtype.size, "array '" + name + "' chunk_grid.configuration.chunk_shape");
    const json* codecs = member(metadata, "codecs");
    // zarrita.js writes an array created without codecs with `"codecs": []`, which the spec does not
    // allow (one array->bytes codec is required) and which users get stores from: its chunks are
    // the elements as they were in memory, little-endian. Read as the plain bytes codec, and said.
    const json plain_bytes = json::array({json{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}}});
    if (codecs && codecs->is_array() && codecs->empty()) {
      meta.notes.push_back("array '" + meta.name + "': zarr.json has an empty codecs list (as zarrita.js writes an "
                           "array created without codecs); read as the plain little-endian bytes codec");
      codecs = &plain_bytes;
    }
    meta.codecs = parse_v3_codecs(codecs, meta, meta.dtype, meta.chunk_shape, "codecs", 0);
    check_decoded_unit(meta, "chunk_grid.configuration.chunk_shape");
    const json* encoding = member(metadata, "chunk_key_encoding");
    const json* encoding_name = encoding ? member(*encoding, "name") : nullptr;
    const json* encoding_config = encoding ? member(*encoding, "configuration") : nullptr;
    const json* separator = encoding_config ? member(*encoding_config, "separator") : nullptr;
    if (encoding_name && *encoding_name == "default") {
      meta.key_prefix_c = true;
      meta.separator = '/';
    } else if (encoding_name && *encoding_name == "v2") {
      meta.separator = '.';
    } else {
      fail(name, "chunk_key_encoding", "expected \"default\" or \"v2\", got " + json_text(encoding));
    }
    if (separator) {
      if (*separator != "." && *separator != "/") fail(name, "chunk_key_encoding.configuration.separator", "expected \".\" or \"/\", got " + separator->dump());
      meta.separator = separator->get<std::string>()[0];
    }
    if (const json* transformers = member(metadata, "storage_transformers"); transformers && !transformers->is_null() && !(transformers->is_array() && transformers->empty())) {
      fail(name, "storage_transformers", "storage transformers are not supported, got " + transformers->dump());
    }
    set_fill_value(meta, member(metadata, "fill_value"), "fill_value");
    set_dimension_names(meta, member(metadata, "dimension_names"), "dimension_names");
    const json* attributes = member(metadata, "attributes");
    if (attributes && !attributes->is_null() && !attributes->is_object()) fail(name, "attributes", "expected a JSON object");
    if (attributes) meta.attributes = attributes_from_json(*attributes);
    add_fill_value_attribute(meta);
    return meta;
  });
}

}  // namespace wxtrain::data::zarr
