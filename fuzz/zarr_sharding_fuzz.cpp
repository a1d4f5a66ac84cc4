// libFuzzer: the sharding_indexed codec on arbitrary shard bytes: the index (its crc32c, offsets
// and sizes against the shard) and the inner chunks through their own codecs. The first byte
// picks one of the layouts the tests write (index at the end with crc32c and blosc inner chunks;
// index at the start, gzip inner chunks; no index checksum, transposed raw inner chunks).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "data/readers/zarr/zarr_codecs.h"

namespace {

using namespace wxtrain::data::zarr;

ArrayMeta sharded_array(const std::string& inner_codecs, const std::string& index_codecs, const std::string& location) {
  return parse_v3_array(
      R"({"zarr_format": 3, "node_type": "array", "shape": [8, 12], "data_type": "float32",
          "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 6]}},
          "chunk_key_encoding": {"name": "default"}, "fill_value": "NaN",
          "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 3], "codecs": )" +
          inner_codecs + R"(, "index_codecs": )" + index_codecs + R"(, "index_location": ")" + location + R"("}}]})",
      "fuzzed");
}

const ArrayMeta kLayouts[] = {
    sharded_array(R"([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "blosc", "configuration":
                      {"cname": "zstd", "clevel": 5, "shuffle": "bitshuffle", "typesize": 4, "blocksize": 0}}])",
                  R"([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}])", "end"),
    sharded_array(R"([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}}])",
                  R"([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}])", "start"),
    sharded_array(R"([{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes", "configuration": {"endian": "big"}}])",
                  R"([{"name": "bytes", "configuration": {"endian": "little"}}])", "end"),
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const ArrayMeta& meta = kLayouts[data[0] % 3];
  try {
    const Bytes shard = decode_chunk(meta.codecs, meta.dtype, meta.chunk_shape, meta.fill_bytes, data + 1, size - 1);
    if (shard.size() != 4 * 6 * 4) __builtin_trap();
  } catch (const wxtrain::DataError&) {
  }
  return 0;
}
