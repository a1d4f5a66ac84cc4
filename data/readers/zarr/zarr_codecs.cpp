#include "data/readers/zarr/zarr_codecs.h"

#include <blosc.h>
#include <lz4.h>
#include <zlib.h>
#include <zstd.h>

#include <array>
#include <climits>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace wxtrain::data::zarr {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the Zarr decoders assume a little-endian host");

std::string shape_text(const std::vector<size_t>& shape) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d) text += (d ? ", " : "") + std::to_string(shape[d]);
  return text + "]";
}

// Bytes->bytes decoders get this much room: a compressor's output feeds either the raw elements
// or (after sharding) a shard, both near the decoded size.
size_t decoded_size_limit(uint64_t element_bytes) {
  const uint64_t limit = 2 * element_bytes + (uint64_t{1} << 20);
  return static_cast<size_t>(std::min<uint64_t>(limit, uint64_t{1} << 32));
}

void swap_bytes(uint8_t* elements, size_t count, size_t size) {
  for (size_t i = 0; i < count; ++i) {
    uint8_t* element = elements + i * size;
    for (size_t a = 0, b = size - 1; a < b; ++a, --b) std::swap(element[a], element[b]);
  }
}

// Undoes a transpose: `encoded` is C order over encoded_shape, where encoded dim i is decoded dim
// permutation[i]; the result is C order over the decoded shape.
Bytes untranspose(const Bytes& encoded, const std::vector<size_t>& encoded_shape, const std::vector<size_t>& permutation,
                  size_t item_size) {
  const size_t rank = encoded_shape.size();
  std::vector<size_t> decoded_shape(rank);
  for (size_t i = 0; i < rank; ++i) decoded_shape[permutation[i]] = encoded_shape[i];
  const std::vector<size_t> decoded_strides = c_strides(decoded_shape);
  std::vector<size_t> target_strides(rank);  // where a step along encoded dim i lands
  for (size_t i = 0; i < rank; ++i) target_strides[i] = decoded_strides[permutation[i]];
  Bytes decoded(encoded.size());
  const size_t count = encoded.size() / item_size;
  std::vector<size_t> position(rank, 0);
  size_t target = 0;
  for (size_t source = 0; source < count; ++source) {
    std::memcpy(decoded.data() + target * item_size, encoded.data() + source * item_size, item_size);
    for (size_t d = rank; d-- > 0;) {
      if (++position[d] < encoded_shape[d]) {
        target += target_strides[d];
        break;
      }
      target -= (encoded_shape[d] - 1) * target_strides[d];
      position[d] = 0;
    }
  }
  return decoded;
}

Bytes decode_shard(const ShardingCodec& sharding, const DataType& dtype, const std::vector<size_t>& shard_shape,
                   const Bytes& fill_bytes, const uint8_t* data, size_t size) {
  const uint64_t index_size = shard_index_size(sharding, shard_shape);
  if (index_size > size) {
    throw DataError("shard of " + std::to_string(size) + " bytes is shorter than its index (" + std::to_string(index_size) + " bytes)");
  }
  const uint8_t* index = sharding.index_at_end ? data + size - index_size : data;
  const std::vector<ShardIndexEntry> entries = decode_shard_index(sharding, shard_shape, index, index_size, size);
  const size_t item = dtype.size;
  const uint64_t shard_elements = checked_byte_count(shard_shape, 1, "shard");
  Bytes shard(static_cast<size_t>(shard_elements) * item);
  const std::vector<size_t> grid = chunks_per_shard(sharding, shard_shape);
  const std::vector<size_t>& inner_shape = sharding.inner_chunk_shape;
  const std::vector<size_t> shard_strides = c_strides(shard_shape);
  const std::vector<size_t> inner_strides = c_strides(inner_shape);
  const size_t inner_elements = static_cast<size_t>(checked_byte_count(inner_shape, 1, "inner chunk"));
  std::vector<size_t> position(grid.size(), 0);
  for (size_t n = 0; n < entries.size(); ++n) {
    Bytes inner;
    if (entries[n].empty()) {
      inner.resize(inner_elements * item);
      for (size_t i = 0; i < inner_elements; ++i) std::memcpy(inner.data() + i * item, fill_bytes.data(), item);
    } else {
      inner = decode_chunk(sharding.inner, dtype, inner_shape, fill_bytes, data + entries[n].offset,
                           static_cast<size_t>(entries[n].nbytes));
    }
    size_t base = 0;
    for (size_t d = 0; d < grid.size(); ++d) base += position[d] * inner_shape[d] * shard_strides[d];
    visit_runs(inner_shape, inner_strides, 0, shard_strides, base, [&](size_t source, size_t target, size_t length) {
      std::memcpy(shard.data() + target * item, inner.data() + source * item, length * item);
    });
    for (size_t d = grid.size(); d-- > 0;) {
      if (++position[d] < grid[d]) break;
      position[d] = 0;
    }
  }
  return shard;
}

const std::array<uint32_t, 256>& crc32c_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> entries{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t crc = i;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));  // reflected Castagnoli
      entries[i] = crc;
    }
    return entries;
  }();
  return table;
}

template <typename Source, typename Out>
void convert_as(const uint8_t* elements, size_t count, Out* out) {
  for (size_t i = 0; i < count; ++i) {
    Source value;
    std::memcpy(&value, elements + i * sizeof(Source), sizeof(Source));
    out[i] = static_cast<Out>(value);
  }
}

template <typename Out>
void convert_any(const DataType& type, const uint8_t* elements, size_t count, Out* out) {
  switch (type.kind) {
    case ScalarKind::kFloat:
      if (type.size == 4) return convert_as<float>(elements, count, out);
      if (type.size == 8) return convert_as<double>(elements, count, out);
      for (size_t i = 0; i < count; ++i) {
        uint16_t half;
        std::memcpy(&half, elements + 2 * i, 2);
        out[i] = static_cast<Out>(half_to_float(half));
      }
      return;
    case ScalarKind::kSignedInt:
      if (type.size == 1) return convert_as<int8_t>(elements, count, out);
      if (type.size == 2) return convert_as<int16_t>(elements, count, out);
      if (type.size == 4) return convert_as<int32_t>(elements, count, out);
      return convert_as<int64_t>(elements, count, out);
    case ScalarKind::kUnsignedInt:
      if (type.size == 1) return convert_as<uint8_t>(elements, count, out);
      if (type.size == 2) return convert_as<uint16_t>(elements, count, out);
      if (type.size == 4) return convert_as<uint32_t>(elements, count, out);
      return convert_as<uint64_t>(elements, count, out);
  }
}

}  // namespace

std::vector<size_t> c_strides(const std::vector<size_t>& shape) {
  std::vector<size_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

Bytes decode_chunk(const CodecChain& chain, const DataType& dtype, const std::vector<size_t>& chunk_shape,
                   const Bytes& fill_bytes, const uint8_t* data, size_t size) {
  // The shape each array->array codec sees, and where the array->bytes codec sits.
  std::vector<std::vector<size_t>> shapes{chunk_shape};
  size_t array_to_bytes = 0;
  while (array_to_bytes < chain.size() && chain[array_to_bytes].kind == Codec::Kind::kTranspose) {
    const std::vector<size_t>& permutation = chain[array_to_bytes].permutation;
    const std::vector<size_t>& before = shapes.back();
    if (permutation.size() != before.size()) throw DataError("transpose order does not match the chunk's rank");
    std::vector<size_t> after(before.size());
    for (size_t i = 0; i < before.size(); ++i) after[i] = before[permutation[i]];
    shapes.push_back(after);
    ++array_to_bytes;
  }
  if (array_to_bytes == chain.size()) throw DataError("codec chain has no bytes or sharding_indexed codec");
  const uint64_t element_bytes = checked_byte_count(chunk_shape, dtype.size, "chunk");
  const size_t limit = decoded_size_limit(element_bytes);

  const uint8_t* encoded = data;
  size_t encoded_size = size;
  Bytes stage;
  for (size_t i = chain.size(); i-- > array_to_bytes + 1;) {
    const Codec& codec = chain[i];
    Bytes decoded;
    switch (codec.kind) {
      case Codec::Kind::kBlosc: decoded = blosc_decode(encoded, encoded_size, limit); break;
      case Codec::Kind::kZstd: decoded = zstd_decode(encoded, encoded_size, limit); break;
      case Codec::Kind::kLz4: decoded = lz4_decode(encoded, encoded_size, limit); break;
      case Codec::Kind::kZlib: decoded = inflate_decode(encoded, encoded_size, limit, false); break;
      case Codec::Kind::kGzip: decoded = inflate_decode(encoded, encoded_size, limit, true); break;
      case Codec::Kind::kCrc32c: encoded_size = crc32c_checked_size(encoded, encoded_size); continue;
      default: throw DataError("codec '" + codec.name + "' is not a bytes->bytes codec");
    }
    stage = std::move(decoded);
    encoded = stage.data();
    encoded_size = stage.size();
  }

  const Codec& codec = chain[array_to_bytes];
  const std::vector<size_t>& encoded_shape = shapes.back();
  Bytes elements;
  if (codec.kind == Codec::Kind::kBytes) {
    if (encoded_size != element_bytes) {
      throw DataError("decoded to " + std::to_string(encoded_size) + " bytes, expected " + std::to_string(element_bytes) +
                      " for a chunk of " + shape_text(chunk_shape) + " elements of " + std::to_string(dtype.size) + " bytes");
    }
    if (encoded == stage.data()) {  // a decompressor's output: taken over, not copied
      stage.resize(encoded_size);
      elements = std::move(stage);
    } else {
      elements.assign(encoded, encoded + encoded_size);
    }
    if (codec.endian == Endian::kBig && dtype.size > 1) swap_bytes(elements.data(), elements.size() / dtype.size, dtype.size);
  } else if (codec.kind == Codec::Kind::kSharding && codec.sharding) {
    elements = decode_shard(*codec.sharding, dtype, encoded_shape, fill_bytes, encoded, encoded_size);
  } else {
    throw DataError("codec '" + codec.name + "' is not an array->bytes codec");
  }
  for (size_t i = array_to_bytes; i-- > 0;) elements = untranspose(elements, shapes[i + 1], chain[i].permutation, dtype.size);
  return elements;
}

Bytes blosc_decode(const uint8_t* data, size_t size, size_t max_size) {
  size_t decoded_size = 0;
  if (size < BLOSC_MIN_HEADER_LENGTH || blosc_cbuffer_validate(data, size, &decoded_size) != 0) {
    throw DataError("blosc: not a valid blosc buffer (" + std::to_string(size) + " bytes)");
  }
  if (decoded_size > max_size) {
    throw DataError("blosc: header announces " + std::to_string(decoded_size) + " bytes, more than the " +
                    std::to_string(max_size) + " this chunk can hold");
  }
  Bytes decoded(decoded_size);
  if (decoded_size == 0) return decoded;
  // The context variant takes no global lock: the loader's threads decode in parallel.
  const int result = blosc_decompress_ctx(data, decoded.data(), decoded.size(), 1);
  if (result < 0 || static_cast<size_t>(result) != decoded_size) {
    throw DataError("blosc: decompression failed (corrupt data, code " + std::to_string(result) + ")");
  }
  return decoded;
}

std::optional<Bytes> blosc_decode_range(const uint8_t* data, size_t size, size_t chunk_bytes, size_t first,
                                        size_t length) {
  size_t decoded_size = 0;
  if (size < BLOSC_MIN_HEADER_LENGTH || blosc_cbuffer_validate(data, size, &decoded_size) != 0) {
    throw DataError("blosc: not a valid blosc buffer (" + std::to_string(size) + " bytes)");
  }
  size_t typesize = 0, nbytes = 0, cbytes = 0, blocksize = 0;
  int flags = 0;
  blosc_cbuffer_metainfo(data, &typesize, &flags);
  blosc_cbuffer_sizes(data, &nbytes, &cbytes, &blocksize);
  // getitem allocates a few blocks of scratch: bound them by the chunk, as the full decode is.
  if (decoded_size != chunk_bytes || blocksize == 0 || blocksize > decoded_size || typesize == 0 ||
      first % typesize != 0 || length % typesize != 0 || first > decoded_size || length > decoded_size - first ||
      decoded_size > static_cast<size_t>(INT32_MAX)) {
    return std::nullopt;
  }
  Bytes decoded(length);
  if (length == 0) return decoded;
  // blosc_getitem works on a context of its own (no global state), so threads may call it at once.
  const int result = blosc_getitem(data, static_cast<int>(first / typesize), static_cast<int>(length / typesize),
                                   decoded.data());
  if (result < 0 || static_cast<size_t>(result) != length) {
    throw DataError("blosc: decompression failed (corrupt data, code " + std::to_string(result) + ")");
  }
  return decoded;
}

Bytes zstd_decode(const uint8_t* data, size_t size, size_t max_size) {
  std::unique_ptr<ZSTD_DStream, size_t (*)(ZSTD_DStream*)> stream(ZSTD_createDStream(), ZSTD_freeDStream);
  if (!stream) throw DataError("zstd: out of memory");
  // The frame's content size, when written, sizes the buffer at once; streaming covers frames
  // without it and several frames in a row.
  const unsigned long long announced = ZSTD_getFrameContentSize(data, size);
  if (announced == ZSTD_CONTENTSIZE_ERROR) throw DataError("zstd: not a zstd frame (" + std::to_string(size) + " bytes)");
  if (announced != ZSTD_CONTENTSIZE_UNKNOWN && announced > max_size) {
    throw DataError("zstd: frame announces " + std::to_string(announced) + " bytes, more than the " + std::to_string(max_size) +
                    " this chunk can hold");
  }
  Bytes decoded(announced != ZSTD_CONTENTSIZE_UNKNOWN ? static_cast<size_t>(announced) : std::min<size_t>(max_size, 1 << 16));
  ZSTD_inBuffer input{data, size, 0};
  ZSTD_outBuffer output{decoded.data(), decoded.size(), 0};
  size_t remaining = 1;  // ZSTD_decompressStream's hint: 0 once a frame is complete and flushed
  while (true) {
    if (output.pos == output.size) {
      if (remaining == 0 && input.pos == input.size) break;
      if (decoded.size() >= max_size) {
        throw DataError("zstd: decodes to more than the " + std::to_string(max_size) + " bytes this chunk can hold");
      }
      decoded.resize(std::min<size_t>(max_size, std::max<size_t>(2 * decoded.size(), 1 << 16)));
      output.dst = decoded.data();
      output.size = decoded.size();
    }
    remaining = ZSTD_decompressStream(stream.get(), &output, &input);
    if (ZSTD_isError(remaining)) throw DataError(std::string("zstd: ") + ZSTD_getErrorName(remaining));
    if (input.pos == input.size && output.pos < output.size) break;  // all input used, all output flushed
  }
  if (remaining != 0) throw DataError("zstd: truncated frame");
  decoded.resize(output.pos);
  return decoded;
}

Bytes lz4_decode(const uint8_t* data, size_t size, size_t max_size) {
  if (size < 4) throw DataError("lz4: " + std::to_string(size) + " bytes, shorter than numcodecs' 4-byte size header");
  const uint32_t decoded_size = uint32_t{data[0]} | uint32_t{data[1]} << 8 | uint32_t{data[2]} << 16 | uint32_t{data[3]} << 24;
  if (decoded_size > max_size || decoded_size > static_cast<uint32_t>(INT_MAX) || size - 4 > static_cast<size_t>(INT_MAX)) {
    throw DataError("lz4: header announces " + std::to_string(decoded_size) + " bytes, more than the " +
                    std::to_string(max_size) + " this chunk can hold");
  }
  Bytes decoded(decoded_size);
  const int result = LZ4_decompress_safe(reinterpret_cast<const char*>(data + 4), reinterpret_cast<char*>(decoded.data()),
                                         static_cast<int>(size - 4), static_cast<int>(decoded_size));
  if (result < 0 || static_cast<uint32_t>(result) != decoded_size) {
    throw DataError("lz4: corrupt block (decoded " + std::to_string(result) + " of " + std::to_string(decoded_size) + " bytes)");
  }
  return decoded;
}

Bytes inflate_decode(const uint8_t* data, size_t size, size_t max_size, bool gzip) {
  const char* name = gzip ? "gzip" : "zlib";
  z_stream stream{};
  if (inflateInit2(&stream, gzip ? 15 + 16 : 15) != Z_OK) throw DataError(std::string(name) + ": cannot initialise zlib");
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&stream, inflateEnd);
  Bytes decoded(std::min<size_t>(max_size, std::max<size_t>(size * 4, 1 << 16)));
  stream.next_in = const_cast<Bytef*>(data);
  size_t consumed = 0, produced = 0;
  int status = Z_OK;
  while (status != Z_STREAM_END) {
    if (produced == decoded.size()) {
      if (decoded.size() >= max_size) {
        throw DataError(std::string(name) + ": decodes to more than the " + std::to_string(max_size) + " bytes this chunk can hold");
      }
      decoded.resize(std::min<size_t>(max_size, 2 * decoded.size()));
    }
    // zlib counts in uInt: feed and drain at most 1 GiB per call.
    const size_t in_chunk = std::min<size_t>(size - consumed, 1u << 30);
    const size_t out_chunk = std::min<size_t>(decoded.size() - produced, 1u << 30);
    stream.next_in = const_cast<Bytef*>(data + consumed);
    stream.avail_in = static_cast<uInt>(in_chunk);
    stream.next_out = decoded.data() + produced;
    stream.avail_out = static_cast<uInt>(out_chunk);
    status = inflate(&stream, Z_NO_FLUSH);
    consumed += in_chunk - stream.avail_in;
    produced += out_chunk - stream.avail_out;
    if (status == Z_BUF_ERROR && stream.avail_out != 0 && consumed == size) {
      throw DataError(std::string(name) + ": truncated stream");
    }
    if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR) {
      throw DataError(std::string(name) + ": corrupt stream (" + (stream.msg ? stream.msg : "zlib error " + std::to_string(status)) + ")");
    }
  }
  decoded.resize(produced);
  return decoded;
}

uint32_t crc32c(const uint8_t* data, size_t size) {
  const auto& table = crc32c_table();
  uint32_t crc = ~0u;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ data[i]) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

size_t crc32c_checked_size(const uint8_t* data, size_t size) {
  if (size < 4) throw DataError("crc32c: " + std::to_string(size) + " bytes, too short to hold the 4-byte checksum");
  const size_t payload = size - 4;
  const uint32_t stored = uint32_t{data[payload]} | uint32_t{data[payload + 1]} << 8 | uint32_t{data[payload + 2]} << 16 |
                          uint32_t{data[payload + 3]} << 24;
  const uint32_t computed = crc32c(data, payload);
  if (stored != computed) {
    char text[80];
    std::snprintf(text, sizeof text, "crc32c: checksum mismatch (stored 0x%08x, computed 0x%08x)", stored, computed);
    throw DataError(text);
  }
  return payload;
}

std::vector<size_t> chunks_per_shard(const ShardingCodec& sharding, const std::vector<size_t>& shard_shape) {
  if (sharding.inner_chunk_shape.size() != shard_shape.size()) throw DataError("sharding: inner chunk rank differs from the shard's");
  std::vector<size_t> grid(shard_shape.size());
  for (size_t d = 0; d < grid.size(); ++d) {
    const size_t inner = sharding.inner_chunk_shape[d];
    if (inner == 0 || shard_shape[d] % inner != 0) {
      throw DataError("sharding: inner chunks " + shape_text(sharding.inner_chunk_shape) + " do not divide the shard " + shape_text(shard_shape));
    }
    grid[d] = shard_shape[d] / inner;
  }
  return grid;
}

uint64_t shard_index_size(const ShardingCodec& sharding, const std::vector<size_t>& shard_shape) {
  uint64_t size = checked_byte_count(chunks_per_shard(sharding, shard_shape), 16, "shard index");
  for (const Codec& codec : sharding.index) {
    if (codec.kind == Codec::Kind::kCrc32c) size += 4;
  }
  return size;
}

std::vector<ShardIndexEntry> decode_shard_index(const ShardingCodec& sharding, const std::vector<size_t>& shard_shape,
                                                const uint8_t* index, size_t index_size, uint64_t shard_size) {
  std::vector<size_t> index_shape = chunks_per_shard(sharding, shard_shape);
  index_shape.push_back(2);
  const DataType uint64_type{ScalarKind::kUnsignedInt, 8};
  Bytes decoded;
  try {
    decoded = decode_chunk(sharding.index, uint64_type, index_shape, Bytes(8, 0), index, index_size);
  } catch (const DataError& error) {
    throw DataError(std::string("shard index: ") + error.what());
  }
  const uint64_t index_bytes = shard_index_size(sharding, shard_shape);
  // Data lies between the index and the shard's other end.
  const uint64_t data_begin = sharding.index_at_end ? 0 : index_bytes;
  const uint64_t data_end = sharding.index_at_end ? shard_size - std::min(shard_size, index_bytes) : shard_size;
  std::vector<ShardIndexEntry> entries(decoded.size() / 16);
  for (size_t n = 0; n < entries.size(); ++n) {
    std::memcpy(&entries[n].offset, decoded.data() + 16 * n, 8);
    std::memcpy(&entries[n].nbytes, decoded.data() + 16 * n + 8, 8);
    const ShardIndexEntry& entry = entries[n];
    if (entry.empty()) continue;
    if (entry.offset < data_begin || entry.offset > data_end || entry.nbytes > data_end - entry.offset) {
      throw DataError("shard index: inner chunk " + std::to_string(n) + " at bytes " + std::to_string(entry.offset) + "+" +
                      std::to_string(entry.nbytes) + " lies outside the shard's data (bytes " + std::to_string(data_begin) + ".." +
                      std::to_string(data_end) + ")");
    }
  }
  return entries;
}

void convert_elements(const DataType& type, const uint8_t* elements, size_t count, float* out) {
  convert_any(type, elements, count, out);
}

void convert_elements(const DataType& type, const uint8_t* elements, size_t count, double* out) {
  convert_any(type, elements, count, out);
}

}  // namespace wxtrain::data::zarr
