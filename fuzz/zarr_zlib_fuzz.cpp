// libFuzzer: the Zarr zlib chunk decoder on arbitrary bytes: zlib streams (numcodecs Zlib). Corrupt input must be a
// DataError, never a crash or an allocation past the bound the reader gives it.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "data/readers/zarr/zarr_codecs.h"

namespace {
constexpr size_t kMaxDecoded = size_t{1} << 22;  // the reader passes 2x the chunk + 1 MiB; 4 MiB here
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const wxtrain::data::zarr::Bytes decoded = wxtrain::data::zarr::inflate_decode(data, size, kMaxDecoded, false);
    if (decoded.size() > kMaxDecoded) __builtin_trap();
  } catch (const wxtrain::DataError&) {
  }
  return 0;
}
