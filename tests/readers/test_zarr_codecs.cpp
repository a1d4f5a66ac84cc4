// The Zarr metadata parsers and chunk decoders on hand-written inputs: the messages for metadata
// that contradicts itself, the checksum and conversions against reference values, and the
// run visitor the slab copy is built on.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <functional>

#include "core/error.h"
#include "data/readers/zarr/zarr_codecs.h"
#include "data/readers/zarr/zarr_metadata.h"

using namespace wxtrain;
using namespace wxtrain::data::zarr;

namespace {

std::string v3_array(const std::string& shape, const std::string& chunks, const std::string& codecs,
                     const std::string& data_type = "\"float32\"", const std::string& fill = "0") {
  return R"({"zarr_format": 3, "node_type": "array", "shape": )" + shape + R"(, "data_type": )" + data_type +
         R"(, "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": )" + chunks +
         R"(}}, "chunk_key_encoding": {"name": "default"}, "fill_value": )" + fill + R"(, "codecs": )" + codecs + "}";
}

const std::string kBytes = R"([{"name": "bytes", "configuration": {"endian": "little"}}])";

std::string v2_array(const std::string& shape, const std::string& chunks, const std::string& dtype = "\"<f4\"",
                     const std::string& extra = "") {
  return R"({"zarr_format": 2, "shape": )" + shape + R"(, "chunks": )" + chunks + R"(, "dtype": )" + dtype +
         R"(, "compressor": null, "fill_value": 0, "filters": null, "order": "C")" + extra + "}";
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const DataError& error) {
    return error.what();
  }
  return "(no error)";
}

#define EXPECT_MENTIONS(message, part) EXPECT_NE(std::string(message).find(part), std::string::npos) << (message)

}  // namespace

TEST(ZarrMetadata, ContradictionsNameTheArrayAndTheKey) {
  EXPECT_MENTIONS(error_of([] { parse_v2_array(v2_array("[4, 4]", "[2]"), "", "t2m"); }), "'t2m', metadata key '.zarray chunks'");
  EXPECT_MENTIONS(error_of([] { parse_v2_array(v2_array("[4, -4]", "[2, 2]"), "", "t2m"); }), "negative size -4");
  EXPECT_MENTIONS(error_of([] { parse_v2_array(v2_array("[4]", "[0]"), "", "t2m"); }), "chunk sizes must be positive");
  EXPECT_MENTIONS(error_of([] { parse_v2_array(v2_array("[4]", "[2]", "\"<c8\""), "", "t2m"); }), "dtype '<c8' is not supported");
  EXPECT_MENTIONS(error_of([] { parse_v2_array(v2_array("[4]", "[2]", "\"<i2\"", R"(, "dimension_separator": "-")"), "", "t2m"); }),
                  "dimension_separator");
  EXPECT_MENTIONS(error_of([] { parse_v2_array(v2_array("[4]", "[2]"), R"({"_ARRAY_DIMENSIONS": ["a", "b"]})", "t2m"); }),
                  "expected 1 dimension names");
  EXPECT_MENTIONS(error_of([] { parse_v2_array(v2_array("[4]", "[2]", "\"<i2\""), "{", "t2m"); }), ".zattrs: not valid JSON");
  EXPECT_MENTIONS(error_of([] { parse_v2_array(R"({"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "|u1", "fill_value": 300})", "", "t2m"); }),
                  "fill value 300 does not fit dtype |u1");
  EXPECT_MENTIONS(error_of([] { parse_v2_array(v2_array("[4]", "[2]", "\"<f4\"", R"(, "compressor": {"id": "bz2"})"), "", "t2m"); }),
                  "codec 'bz2' is not supported");
  EXPECT_MENTIONS(error_of([] { parse_v2_array(v2_array("[1048576, 1048576]", "[1048576, 1048576]"), "", "t2m"); }), "above the 2 GiB");

  EXPECT_MENTIONS(error_of([] { parse_v3_array(v3_array("[4, 4]", "[2, 2, 2]", kBytes), "z"); }), "'z', metadata key 'chunk_grid.configuration.chunk_shape'");
  EXPECT_MENTIONS(error_of([] { parse_v3_array(v3_array("[4]", "[2]", kBytes, "\"complex64\""), "z"); }), "data type 'complex64' is not supported");
  EXPECT_MENTIONS(error_of([] { parse_v3_array(v3_array("[4]", "[2]", R"([{"name": "zstd"}])"), "z"); }),
                  "comes before the array->bytes codec");
  EXPECT_MENTIONS(error_of([] { parse_v3_array(v3_array("[4, 4]", "[2, 2]", R"([{"name": "transpose", "configuration": {"order": [0, 0]}}, "bytes"])"), "z"); }),
                  "not a permutation of 2 dimensions");
  EXPECT_MENTIONS(error_of([] {
                    parse_v3_array(v3_array("[8]", "[4]", R"([{"name": "sharding_indexed", "configuration": {"chunk_shape": [2], "codecs": ["bytes"],
                                   "index_codecs": ["bytes", {"name": "zstd"}]}}])"), "z");
                  }),
                  "gives the shard index no fixed size");
  EXPECT_MENTIONS(error_of([] { parse_v3_array(v3_array("[4]", "[2]", kBytes, "\"int16\"", "\"NaN\""), "z"); }), "not an integer for dtype int16");
  EXPECT_MENTIONS(error_of([] { parse_v3_array(v3_array("[4]", "[2]", kBytes, "\"float32\"", "\"0x7fc0\""), "z"); }), "is not 4 bytes");
  EXPECT_MENTIONS(error_of([] { parse_v3_array(std::string(100, '['), "z"); }), "nested deeper than 64");
}

TEST(ZarrMetadata, FillValuesAndChunkKeys) {
  const ArrayMeta big = parse_v3_array(v3_array("[4]", "[2]", kBytes, "\"int64\"", "-9223372036854775808"), "time");
  int64_t fill = 0;
  std::memcpy(&fill, big.fill_bytes.data(), 8);
  EXPECT_EQ(fill, INT64_MIN);  // from the JSON integer, not through a double
  const ArrayMeta nan = parse_v3_array(v3_array("[4]", "[2]", kBytes, "\"float64\"", "\"0x7ff8000000000000\""), "x");
  EXPECT_TRUE(std::isnan(*nan.fill_value));
  const ArrayMeta half = parse_v2_array(R"({"zarr_format": 2, "shape": [4, 6], "chunks": [2, 3], "dtype": "<f2", "fill_value": "-Infinity",
                                            "dimension_separator": "/"})", "", "h");
  uint16_t half_fill = 0;
  std::memcpy(&half_fill, half.fill_bytes.data(), 2);
  EXPECT_EQ(half_fill, 0xfc00);
  EXPECT_EQ(half.chunk_key({1, 2}), "1/2");
  EXPECT_EQ(nan.chunk_key({3}), "c/3");
  EXPECT_EQ(parse_v3_array(v3_array("[]", "[]", kBytes), "s").chunk_key({}), "c");
  EXPECT_EQ(parse_v2_array(v2_array("[]", "[]"), "", "s").chunk_key({}), "0");
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));  // the smallest subnormal
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
}

TEST(ZarrCodecs, Crc32cCheckValueAndMismatch) {
  const std::string text = "123456789";
  EXPECT_EQ(crc32c(reinterpret_cast<const uint8_t*>(text.data()), text.size()), 0xE3069283u);
  Bytes chunk(text.begin(), text.end());
  for (int shift : {0, 8, 16, 24}) chunk.push_back(static_cast<uint8_t>(0xE3069283u >> shift));
  EXPECT_EQ(crc32c_checked_size(chunk.data(), chunk.size()), 9u);
  chunk[0] ^= 1;
  EXPECT_MENTIONS(error_of([&] { crc32c_checked_size(chunk.data(), chunk.size()); }), "checksum mismatch");
}

TEST(ZarrCodecs, DecodersRejectWhatDoesNotFit) {
  const uint8_t lz4_header[] = {0xff, 0xff, 0xff, 0x7f, 0x00};
  EXPECT_MENTIONS(error_of([&] { lz4_decode(lz4_header, sizeof lz4_header, 1 << 20); }), "more than the 1048576");
  const uint8_t garbage[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
  EXPECT_MENTIONS(error_of([&] { blosc_decode(garbage, sizeof garbage, 1 << 20); }), "blosc");
  EXPECT_MENTIONS(error_of([&] { zstd_decode(garbage, sizeof garbage, 1 << 20); }), "zstd");
  EXPECT_MENTIONS(error_of([&] { inflate_decode(garbage, sizeof garbage, 1 << 20, true); }), "gzip");
  const ArrayMeta meta = parse_v3_array(v3_array("[4]", "[4]", kBytes, "\"int16\""), "x");
  EXPECT_MENTIONS(error_of([&] { decode_chunk(meta.codecs, meta.dtype, meta.chunk_shape, meta.fill_bytes, garbage, 7); }),
                  "decoded to 7 bytes, expected 8");
}

TEST(ZarrCodecs, ShardIndexEntriesMustLieInTheShard) {
  const ArrayMeta meta = parse_v3_array(
      v3_array("[4]", "[4]", R"([{"name": "sharding_indexed", "configuration": {"chunk_shape": [2], "codecs": ["bytes"], "index_codecs": ["bytes"]}}])",
               "\"uint8\"", "7"),
      "s");
  // Inner chunk 0 empty (fill 7), inner chunk 1 at bytes 0..2, then the 32-byte index.
  Bytes shard = {1, 2};
  auto put = [&](uint64_t value) {
    for (int b = 0; b < 8; ++b) shard.push_back(static_cast<uint8_t>(value >> (8 * b)));
  };
  put(~uint64_t{0});
  put(~uint64_t{0});
  put(0);
  put(2);
  EXPECT_EQ(decode_chunk(meta.codecs, meta.dtype, meta.chunk_shape, meta.fill_bytes, shard.data(), shard.size()), (Bytes{7, 7, 1, 2}));
  shard[2 + 16 + 8] = 3;  // inner chunk 1 now claims 3 bytes: it would run into the index
  EXPECT_MENTIONS(error_of([&] { decode_chunk(meta.codecs, meta.dtype, meta.chunk_shape, meta.fill_bytes, shard.data(), shard.size()); }),
                  "lies outside the shard's data");
}

TEST(ZarrCodecs, RunsMergeContiguousRows) {
  // A 2x3 block at (1, 0) of a 4x3 array into a 2x3 output: rows are whole, so one run of 6.
  std::vector<std::array<size_t, 3>> runs;
  visit_runs({2, 3}, c_strides({4, 3}), 3, c_strides({2, 3}), 0, [&](size_t s, size_t t, size_t n) { runs.push_back({s, t, n}); });
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0], (std::array<size_t, 3>{3, 0, 6}));
  runs.clear();
  // A 2x2 block at (1, 1) of a 4x3 array: two runs of 2.
  visit_runs({2, 2}, c_strides({4, 3}), 4, c_strides({2, 2}), 0, [&](size_t s, size_t t, size_t n) { runs.push_back({s, t, n}); });
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1], (std::array<size_t, 3>{7, 2, 2}));
}
