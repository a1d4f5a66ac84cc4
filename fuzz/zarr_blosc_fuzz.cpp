// libFuzzer: the Zarr blosc chunk decoder on arbitrary bytes: c-blosc (through blosc_cbuffer_validate and blosc_decompress_ctx), and its partial decode (blosc_getitem). Corrupt input must be a
// DataError, never a crash or an allocation past the bound the reader gives it.
#include <cstddef>
#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "data/readers/zarr/zarr_codecs.h"

namespace {
constexpr size_t kMaxDecoded = size_t{1} << 22;  // the reader passes 2x the chunk + 1 MiB; 4 MiB here
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const wxtrain::data::zarr::Bytes decoded = wxtrain::data::zarr::blosc_decode(data, size, kMaxDecoded);
    if (decoded.size() > kMaxDecoded) __builtin_trap();
    // The partial decode the reader uses for slabs under half a chunk must give the same bytes.
    if (decoded.size() >= 8) {
      const size_t first = decoded.size() / 4 / 4 * 4, length = decoded.size() / 2 / 4 * 4;
      const auto part = wxtrain::data::zarr::blosc_decode_range(data, size, decoded.size(), first, length);
      if (part && (part->size() != length || !std::equal(part->begin(), part->end(), decoded.begin() + first))) {
        __builtin_trap();
      }
    }
  } catch (const wxtrain::DataError&) {
  }
  return 0;
}
