// libFuzzer: the crc32c codec's check on arbitrary bytes. A chunk either passes (and then its
// last 4 bytes are the little-endian CRC-32C of the rest) or is a DataError.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "data/readers/zarr/zarr_codecs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wxtrain::data::zarr;
  try {
    const size_t payload = crc32c_checked_size(data, size);
    if (payload + 4 != size) __builtin_trap();
    const uint32_t stored = uint32_t{data[payload]} | uint32_t{data[payload + 1]} << 8 |
                            uint32_t{data[payload + 2]} << 16 | uint32_t{data[payload + 3]} << 24;
    if (stored != crc32c(data, payload)) __builtin_trap();
  } catch (const wxtrain::DataError&) {
  }
  return 0;
}
