// libFuzzer: the Zarr metadata parsers on arbitrary bytes. The first byte picks the parser:
// even = v2 (.zarray, then .zattrs after the first NUL byte), odd = v3 zarr.json. Whatever parses
// must be usable: chunk keys built, the fill value one element wide.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "data/readers/zarr/zarr_metadata.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wxtrain::data::zarr;
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    ArrayMeta meta;
    if (data[0] % 2 == 0) {
      const size_t split = text.find('\0');
      meta = parse_v2_array(text.substr(0, split), split == std::string::npos ? "" : text.substr(split + 1), "fuzzed");
    } else {
      meta = parse_v3_array(text, "fuzzed");
    }
    if (meta.chunk_shape.size() != meta.shape.size() || meta.dimension_names.size() != meta.shape.size()) __builtin_trap();
    if (meta.fill_bytes.size() != meta.dtype.size) __builtin_trap();
    std::vector<size_t> last_chunk;
    for (size_t d = 0; d < meta.shape.size(); ++d) {
      last_chunk.push_back(meta.shape[d] == 0 ? 0 : (meta.shape[d] - 1) / meta.chunk_shape[d]);
    }
    (void)meta.chunk_key(last_chunk);
  } catch (const wxtrain::DataError&) {
  }
  return 0;
}
