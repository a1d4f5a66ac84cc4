// The native Zarr reader against stores written by xarray and zarr-python (v2) and by the
// spec-following writer in zarr_fixtures.py (v3): every array read whole, as slabs and as doubles
// must equal what numpy reads, element for element.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <thread>

#include "core/error.h"
#include "data/readers/reader.h"
#include "data/readers/zarr/zarr_reader.h"

using namespace wxtrain;
using namespace wxtrain::data;
namespace fs = std::filesystem;

namespace {

// Removes the fixtures' directory when the test process ends.
struct RemovedAtExit {
  std::string path;
  ~RemovedAtExit() {
    std::error_code ignored;
    if (!path.empty()) fs::remove_all(path, ignored);
  }
};

// The fixtures, written once per test process into a temporary directory.
const std::string& fixtures() {
  static RemovedAtExit cleanup;
  static const std::string directory = [] {
    char pattern[] = "/tmp/wxtrain_zarr_XXXXXX";
    const char* made = mkdtemp(pattern);
    if (!made) throw std::runtime_error("mkdtemp failed");
    const std::string command = std::string(WXTRAIN_SYSTEM_PYTHON) + " " + WXTRAIN_SOURCE_DIR +
                                "/tests/readers/zarr_fixtures.py " + made;
    cleanup.path = made;
    if (std::system(command.c_str()) != 0) throw std::runtime_error("zarr_fixtures.py failed: " + command);
    return std::string(made);
  }();
  return directory;
}

std::string store(const std::string& name) { return fixtures() + "/" + name; }

template <typename T>
std::vector<T> load_expected(const std::string& store_name, const std::string& array, const char* suffix) {
  std::ifstream file(fixtures() + "/expected/" + store_name + "/" + array + suffix, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));
  return values;
}

template <typename T>
bool same_value(T a, T b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof(T)) == 0;
}

// The slab [start, start+count) cut out of a whole C-order array of `shape`.
std::vector<float> cut(const std::vector<float>& whole, const std::vector<size_t>& shape, const std::vector<size_t>& start,
                       const std::vector<size_t>& count) {
  size_t total = 1;
  for (size_t c : count) total *= c;
  std::vector<float> slab;
  slab.reserve(total);
  std::vector<size_t> position(count.size(), 0);
  for (size_t n = 0; n < total; ++n) {
    size_t offset = 0;
    for (size_t d = 0; d < shape.size(); ++d) offset = offset * shape[d] + start[d] + position[d];
    slab.push_back(whole[offset]);
    for (size_t d = count.size(); d-- > 0;) {
      if (++position[d] < count[d]) break;
      position[d] = 0;
    }
  }
  return slab;
}

void expect_same(const std::vector<float>& actual, const std::vector<float>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_TRUE(same_value(actual[i], expected[i])) << what << " element " << i << ": " << actual[i] << " vs " << expected[i];
  }
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const DataError& error) {
    return error.what();
  }
  return "(no error)";
}

void expect_mentions(const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
}

}  // namespace

TEST(ZarrReader, EveryArrayEqualsWhatNumpyReads) {
  std::mt19937 random(11);
  size_t arrays = 0;
  for (const auto& folder : fs::directory_iterator(fixtures() + "/expected")) {
    const std::string store_name = folder.path().filename().string();
    auto reader = open_zarr(store(store_name), ZarrOptions{1 << 14});  // a small cache: evictions happen
    for (const auto& file : fs::directory_iterator(folder.path())) {
      if (file.path().extension() != ".f4") continue;
      const std::string name = file.path().stem().string();
      const std::string what = store_name + "/" + name;
      SCOPED_TRACE(what);
      ASSERT_TRUE(reader->has_variable(name));
      const VariableMeta& meta = reader->variable(name);
      std::vector<size_t> shape, zeros(meta.dims.size(), 0);
      size_t total = 1;
      for (const auto& dim : meta.dims) {
        shape.push_back(dim.length);
        total *= dim.length;
      }
      const std::vector<float> expected = load_expected<float>(store_name, name, ".f4");
      ASSERT_EQ(expected.size(), total);
      std::vector<float> whole(total);
      reader->read(name, zeros, shape, whole.data());
      expect_same(whole, expected, what + " whole");
      const std::vector<double> doubles = reader->read_doubles(name);
      const std::vector<double> expected_doubles = load_expected<double>(store_name, name, ".f8");
      ASSERT_EQ(doubles.size(), expected_doubles.size());
      for (size_t i = 0; i < doubles.size(); ++i) ASSERT_TRUE(same_value(doubles[i], expected_doubles[i])) << what << " double " << i;
      for (int trial = 0; trial < 12; ++trial) {
        std::vector<size_t> start(shape.size()), count(shape.size());
        for (size_t d = 0; d < shape.size(); ++d) {
          start[d] = std::uniform_int_distribution<size_t>(0, shape[d] - 1)(random);
          count[d] = std::uniform_int_distribution<size_t>(1, shape[d] - start[d])(random);
        }
        size_t slab_size = 1;
        for (size_t c : count) slab_size *= c;
        std::vector<float> slab(slab_size);
        reader->read(name, start, count, slab.data());
        expect_same(slab, cut(expected, shape, start, count), what + " slab");
      }
      ++arrays;
    }
  }
  EXPECT_EQ(arrays, 47u);  // every array the fixture script writes
}

// Read as the bytes codec (its values are in EveryArrayEqualsWhatNumpyReads), and said once.
TEST(ZarrReader, EmptyCodecListIsReadAsPlainBytesWithANote) {
  auto reader = open_zarr(store("v3_no_codecs.zarr"), ZarrOptions{});
  const std::vector<std::string> notes = reader->notes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("array 'v3_no_codecs'"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("empty codecs list"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("little-endian bytes"), std::string::npos) << notes[0];
  EXPECT_TRUE(open_zarr(store("v3_single.zarr"), ZarrOptions{})->notes().empty()) << "a store read as written has none";
}

TEST(ZarrReader, XarrayStoreDimensionsAttributesAndTime) {
  auto reader = open_reader(store("xarray_default.zarr"));
  EXPECT_EQ(reader->format(), "Zarr v2");
  EXPECT_EQ(reader->variable_names(), (std::vector<std::string>{"lat", "level", "lon", "t2m", "time", "z"}));
  const VariableMeta& t2m = reader->variable("t2m");
  ASSERT_EQ(t2m.dims.size(), 3u);
  EXPECT_EQ(t2m.dims[0].name, "time");
  EXPECT_EQ(t2m.dims[0].length, 4u);
  EXPECT_EQ(t2m.dims[2].name, "lon");
  EXPECT_EQ(t2m.dtype, "<f4");
  EXPECT_EQ(t2m.text("units").value_or(""), "K");
  ASSERT_TRUE(t2m.number("_FillValue"));  // from the array's fill_value "NaN"
  EXPECT_TRUE(std::isnan(*t2m.number("_FillValue")));
  EXPECT_FALSE(t2m.attributes.count("_ARRAY_DIMENSIONS"));
  const VariableMeta& time = reader->variable("time");
  EXPECT_EQ(time.text("units").value_or(""), "hours since 2020-01-01 00:00:00");
  EXPECT_FALSE(time.number("_FillValue"));  // fill_value null
  EXPECT_EQ(reader->read_doubles("time"), (std::vector<double>{0, 6, 12, 18}));

  auto packed = open_reader(store("xarray_codecs.zarr"));
  const VariableMeta& meta = packed->variable("packed");
  EXPECT_EQ(meta.dtype, "<i2");
  EXPECT_DOUBLE_EQ(meta.number("scale_factor").value_or(0), 0.01);
  EXPECT_DOUBLE_EQ(meta.number("add_offset").value_or(0), 270.0);
  EXPECT_EQ(meta.number("_FillValue").value_or(0), -32767);
  EXPECT_FALSE(packed->has_variable("station"));  // a string coordinate: listed nowhere, named when asked for
  expect_mentions(error_of([&] { packed->variable("station"); }), {"'station'", "<U3", "not supported"});
  float first = 0;
  packed->read("packed", {0, 0, 0}, {1, 1, 1}, &first);
  EXPECT_EQ(first, -32767.0f);  // as stored: no unpacking, no masking
}

TEST(ZarrReader, V2AttributesAndDimensionNames) {
  auto reader = open_zarr(store("zarr_layout.zarr"));
  const VariableMeta& forder = reader->variable("forder");
  EXPECT_EQ(forder.dims[0].name, "y");
  EXPECT_EQ(forder.dims[1].name, "x");
  EXPECT_EQ(forder.text("title").value_or(""), "F order");
  EXPECT_EQ(forder.attributes.at("levels").numbers, (std::vector<double>{1, 2, 3}));
  EXPECT_TRUE(std::isnan(forder.number("missing_value").value_or(0)));  // written bare as NaN by Python's json
  EXPECT_EQ(forder.text("nested").value_or(""), "{\"a\":1}");
  const VariableMeta& nested = reader->variable("nested");
  EXPECT_EQ(nested.dims[0].name, "dim_0");
  EXPECT_EQ(reader->variable("holes").number("_FillValue").value_or(0), -999.0);
  EXPECT_EQ(reader->variable("scalar").dims.size(), 0u);
  EXPECT_EQ(reader->read_doubles("scalar"), std::vector<double>{42.5});
  EXPECT_EQ(open_zarr(store("single.zarr"))->variable_names(), std::vector<std::string>{"single"});
}

TEST(ZarrReader, V3MetadataAttributesAndExactInt64) {
  for (const char* name : {"v3_consolidated.zarr", "v3_listed.zarr"}) {
    auto reader = open_reader(store(name));
    EXPECT_EQ(reader->format(), "Zarr v3");
    const VariableMeta& plain = reader->variable("plain");
    EXPECT_EQ(plain.dtype, "float32");
    EXPECT_EQ(plain.dims[0].name, "y");
    EXPECT_EQ(plain.dims[1].length, 8u);
    EXPECT_EQ(plain.text("units").value_or(""), "K");
    EXPECT_EQ(plain.number("scale_factor").value_or(0), 0.5);
    EXPECT_EQ(plain.attributes.at("flags").numbers, (std::vector<double>{1, 2, 4}));
    EXPECT_EQ(plain.number("_FillValue").value_or(1), 0.0);
    const std::vector<double> time = reader->read_doubles("time");
    ASSERT_EQ(time.size(), 5u);
    EXPECT_EQ(time[3], 1000000007.0);
    EXPECT_EQ(time[4], 9007199254740991.0);
    EXPECT_EQ(reader->variable("time").text("calendar").value_or(""), "gregorian");
    EXPECT_TRUE(std::isnan(reader->variable("sharded").number("_FillValue").value_or(0)));
  }
  auto reader = open_zarr(store("v3_consolidated.zarr"));
  EXPECT_EQ(reader->variable("be_blosc").number("_FillValue").value_or(0), -5.0);  // the attribute wins
  const VariableMeta& transposed = reader->variable("transposed_gzip");
  EXPECT_EQ(transposed.dims[0].name, "a");
  EXPECT_EQ(transposed.dims[1].name, "dim_1");  // a null dimension name
  EXPECT_EQ(transposed.dims[2].name, "c");
  EXPECT_EQ(open_zarr(store("v3_single.zarr"))->variable_names(), std::vector<std::string>{"v3_single"});
}

TEST(ZarrReader, OpensThroughOpenReaderAndTheNczarrUrl) {
  EXPECT_TRUE(is_zarr_store(store("xarray_default.zarr")));
  EXPECT_TRUE(is_zarr_store(store("v3_single.zarr")));
  EXPECT_FALSE(is_zarr_store(fixtures() + "/expected"));
  auto reader = open_reader("file://" + store("xarray_default.zarr") + "#mode=nczarr,file");
  EXPECT_EQ(reader->format(), "Zarr v2");
}

TEST(ZarrReader, ErrorsNameTheStoreTheArrayAndWhatIsWrong) {
  const std::string errors = fixtures() + "/errors/";
  expect_mentions(error_of([&] { open_zarr(errors + "unknown_codec.zarr"); }),
                  {"unknown_codec.zarr", "'temperature'", "fancy_codec"});
  expect_mentions(error_of([&] { open_zarr(errors + "unknown_filter.zarr"); }), {"unknown_filter.zarr", "'humidity'", "delta"});
  expect_mentions(error_of([&] { open_zarr(errors + "rank_mismatch.zarr"); }), {"rank_mismatch.zarr", "'geopotential'", "chunks"});
  expect_mentions(error_of([&] { open_zarr(errors + "shard_not_dividing.zarr"); }),
                  {"shard_not_dividing.zarr", "chunk_shape", "do not divide"});
  std::vector<float> out(16);
  auto corrupt = open_zarr(errors + "corrupt_chunk.zarr");
  corrupt->read("wind", {0, 0}, {2, 2}, out.data());  // the intact chunk reads
  EXPECT_EQ(out[0], 1.5f);
  expect_mentions(error_of([&] { corrupt->read("wind", {0, 0}, {4, 4}, out.data()); }),
                  {"corrupt_chunk.zarr", "'wind'", "'1.0'", "blosc"});
  auto short_chunk = open_zarr(errors + "short_chunk.zarr");
  expect_mentions(error_of([&] { short_chunk->read("pressure", {0, 0}, {4, 4}, out.data()); }),
                  {"short_chunk.zarr", "'pressure'", "'0.1'", "expected 16"});
  auto checksum = open_zarr(errors + "bad_checksum.zarr");
  expect_mentions(error_of([&] { checksum->read_doubles("bad_checksum"); }), {"bad_checksum.zarr", "'c/1'", "crc32c"});
  auto reader = open_zarr(store("xarray_default.zarr"));
  expect_mentions(error_of([&] { reader->variable("u10"); }), {"'u10'", "lat, level, lon, t2m, time, z"});
  expect_mentions(error_of([&] { reader->read("t2m", {3, 0, 0}, {2, 5, 6}, out.data()); }), {"'t2m'", "'time'", "3..5"});
  expect_mentions(error_of([&] { open_zarr(fixtures() + "/expected"); }), {"not a Zarr store"});
}

TEST(ZarrReader, ThreadsReadingThroughOneReaderAgree) {
  for (int64_t cache_bytes : {int64_t{0}, int64_t{2048}, int64_t{1} << 20}) {
    auto reader = open_zarr(store("v3_consolidated.zarr"), ZarrOptions{cache_bytes});
    auto v2 = open_zarr(store("xarray_default.zarr"), ZarrOptions{cache_bytes});
    const std::vector<float> sharded = load_expected<float>("v3_consolidated.zarr", "sharded", ".f4");
    const std::vector<float> z = load_expected<float>("xarray_default.zarr", "z", ".f4");
    std::vector<std::thread> threads;
    std::vector<int> mismatches(4, 0);
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        std::vector<float> slab(2 * 5 * 6);
        for (int round = 0; round < 200; ++round) {
          const size_t row = static_cast<size_t>((round + t) % 7);
          std::vector<float> rows(2 * 12);
          reader->read("sharded", {row, 0}, {2, 12}, rows.data());
          const std::vector<float> expected_rows = cut(sharded, {8, 12}, {row, 0}, {2, 12});
          if (!std::equal(rows.begin(), rows.end(), expected_rows.begin(), same_value<float>)) ++mismatches[t];
          const size_t step = static_cast<size_t>((round * 3 + t) % 4);
          v2->read("z", {step, 0, 0, 0}, {1, 2, 5, 6}, slab.data());
          if (slab != cut(z, {4, 2, 5, 6}, {step, 0, 0, 0}, {1, 2, 5, 6})) ++mismatches[t];
        }
      });
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(mismatches, std::vector<int>(4, 0)) << "cache " << cache_bytes;
  }
}
