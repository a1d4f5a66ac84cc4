// libFuzzer: the bytes (endian) and transpose codecs, checked against a direct computation. The
// input's first bytes choose the chunk (rank, sizes, element size, byte order, permutation); the
// rest is the encoded chunk. A chunk of the right size must decode so that decoded element d
// equals the encoded element at (d[permutation[0]], d[permutation[1]], ...), byte-swapped when
// big-endian; any other size must be a DataError.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "data/readers/zarr/zarr_codecs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wxtrain::data::zarr;
  if (size < 7) return 0;
  const size_t rank = 1 + data[0] % 4;
  std::vector<size_t> shape;
  for (size_t d = 0; d < rank; ++d) shape.push_back(1 + data[1 + d] % 5);
  const size_t item_size = size_t{1} << (data[5] % 4);
  const bool big = data[5] & 4;
  std::vector<size_t> permutation(rank);
  std::iota(permutation.begin(), permutation.end(), size_t{0});
  for (int step = 0; step < data[6] % 24; ++step) std::next_permutation(permutation.begin(), permutation.end());
  const uint8_t* encoded = data + 7;
  const size_t encoded_size = size - 7;

  Codec transpose;
  transpose.kind = Codec::Kind::kTranspose;
  transpose.name = "transpose";
  transpose.permutation = permutation;
  Codec bytes;
  bytes.kind = Codec::Kind::kBytes;
  bytes.name = "bytes";
  bytes.endian = big ? Endian::kBig : Endian::kLittle;
  const DataType type{ScalarKind::kUnsignedInt, item_size};
  size_t elements = 1;
  for (size_t s : shape) elements *= s;
  Bytes decoded;
  try {
    decoded = decode_chunk({transpose, bytes}, type, shape, Bytes(item_size, 0), encoded, encoded_size);
  } catch (const wxtrain::DataError&) {
    if (encoded_size == elements * item_size) __builtin_trap();  // the right size must decode
    return 0;
  }
  if (encoded_size != elements * item_size || decoded.size() != encoded_size) __builtin_trap();
  std::vector<size_t> encoded_shape(rank);
  for (size_t i = 0; i < rank; ++i) encoded_shape[i] = shape[permutation[i]];
  std::vector<size_t> index(rank, 0);
  for (size_t n = 0; n < elements; ++n) {
    size_t source = 0;
    for (size_t i = 0; i < rank; ++i) source = source * encoded_shape[i] + index[permutation[i]];
    for (size_t b = 0; b < item_size; ++b) {
      const uint8_t expected = encoded[source * item_size + (big ? item_size - 1 - b : b)];
      if (decoded[n * item_size + b] != expected) __builtin_trap();
    }
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return 0;
}
