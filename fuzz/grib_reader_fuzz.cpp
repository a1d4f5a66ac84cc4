// libFuzzer target for the GRIB reader (data/readers/grib): the bytes as a GRIB file, opened,
// listed and every variable's first slab read. A wxtrain::Error is the expected answer to a bad
// file; a crash, leak or sanitizer report is a bug. Seeds: fuzz/corpus/grib_reader_fuzz/, written by
// tests/readers/test_grib_reader.cpp (GribReader.DISABLED_WriteFuzzSeeds).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/readers/grib/grib_reader.h"

namespace {

// One file per process, rewritten for every input: the reader opens files by path.
const std::string& input_path() {
  static const std::string path = "/tmp/wxtrain_grib_fuzz_" + std::to_string(::getpid()) + ".grib2";
  return path;
}

// A constant field (bitsPerValue 0) can declare up to 2^28 points in a few bytes, which the
// reader accepts; decoding that many is no bug, just slow, so slabs past this are not read.
constexpr size_t kMaxSlabPoints = size_t{1} << 20;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FILE* file = std::fopen(input_path().c_str(), "wb");
  if (!file) return 0;
  std::fwrite(data, 1, size, file);
  std::fclose(file);
  try {
    auto reader = wxtrain::data::open_grib(input_path());
    for (const std::string& name : reader->variable_names()) {
      const wxtrain::data::VariableMeta& meta = reader->variable(name);
      std::vector<size_t> start(meta.dims.size(), 0), count;
      size_t points = 1;
      for (size_t d = 0; d < meta.dims.size(); ++d) {
        // The first slab: one time (and level), the whole grid; a coordinate whole.
        const size_t length = meta.dims.size() > 1 && d + 2 < meta.dims.size() ? std::min<size_t>(1, meta.dims[d].length)
                                                                                : meta.dims[d].length;
        count.push_back(length);
        points *= length;
      }
      if (points == 0 || points > kMaxSlabPoints) continue;
      std::vector<float> slab(points);
      reader->read(name, start, count, slab.data());
      if (meta.dims.size() == 1) reader->read_doubles(name);
    }
  } catch (const wxtrain::Error&) {
    // A corrupt file is reported, which is what is asked of the reader.
  }
  return 0;
}
