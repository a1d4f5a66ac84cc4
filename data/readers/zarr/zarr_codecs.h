#pragma once
// Decoding Zarr chunks: the codec chain of an array (zarr_metadata.h) applied in reverse to the
// bytes of one stored chunk, through Debian's c-blosc, libzstd, liblz4 and zlib. Every decoder
// bounds what it allocates and checks every size it is given, so corrupt or hostile chunks are a
// DataError (saying what was wrong; the reader adds the store, the array and the chunk key), never
// a crash: these functions are fuzzed (fuzz/zarr_*_fuzz.cpp).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "data/readers/zarr/zarr_metadata.h"

namespace wxtrain::data::zarr {

using Bytes = std::vector<uint8_t>;

// One stored chunk of `chunk_shape` decoded through `chain`: its elements in native byte order,
// C order. `fill_bytes` (one element) fills the empty inner chunks of a shard.
Bytes decode_chunk(const CodecChain& chain, const DataType& dtype, const std::vector<size_t>& chunk_shape,
                   const Bytes& fill_bytes, const uint8_t* data, size_t size);

// The bytes->bytes decoders, each producing at most `max_size` bytes.
Bytes blosc_decode(const uint8_t* data, size_t size, size_t max_size);
// Bytes [first, first + length) of what the blosc buffer decodes to, decompressing only the blosc
// blocks that hold them (blosc_getitem): a sample that needs 3 of a chunk's 13 pressure levels
// decodes about 3/13 of it. The buffer must decode to exactly `chunk_bytes`, and `first` and
// `length` be multiples of its typesize inside it; nullopt otherwise (the caller decodes the whole
// chunk, which reports what is wrong).
std::optional<Bytes> blosc_decode_range(const uint8_t* data, size_t size, size_t chunk_bytes, size_t first,
                                        size_t length);
Bytes zstd_decode(const uint8_t* data, size_t size, size_t max_size);
// numcodecs' LZ4: a 4-byte little-endian uncompressed size, then one LZ4 block.
Bytes lz4_decode(const uint8_t* data, size_t size, size_t max_size);
// zlib (RFC 1950) when !gzip, gzip (RFC 1952) when gzip.
Bytes inflate_decode(const uint8_t* data, size_t size, size_t max_size, bool gzip);

// CRC-32C (Castagnoli), as the crc32c codec appends it (4 bytes, little-endian).
uint32_t crc32c(const uint8_t* data, size_t size);
// The size of the data before its checksum, after checking it.
size_t crc32c_checked_size(const uint8_t* data, size_t size);

// sharding_indexed: where each inner chunk of a shard lies; both fields 2^64-1 for an empty one.
struct ShardIndexEntry {
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  bool empty() const { return offset == ~uint64_t{0} && nbytes == ~uint64_t{0}; }
};

// Inner chunks per shard dimension: shard shape / inner chunk shape.
std::vector<size_t> chunks_per_shard(const ShardingCodec& sharding, const std::vector<size_t>& shard_shape);
// Bytes the encoded index takes at the start or end of the shard.
uint64_t shard_index_size(const ShardingCodec& sharding, const std::vector<size_t>& shard_shape);
// Decodes the index (`index`, shard_index_size bytes) of a shard of `shard_size` bytes, checking
// that every non-empty entry lies inside the shard and outside the index.
std::vector<ShardIndexEntry> decode_shard_index(const ShardingCodec& sharding, const std::vector<size_t>& shard_shape,
                                                const uint8_t* index, size_t index_size, uint64_t shard_size);

// Elements of `type` (native byte order) converted to float or double.
void convert_elements(const DataType& type, const uint8_t* elements, size_t count, float* out);
void convert_elements(const DataType& type, const uint8_t* elements, size_t count, double* out);

// C-order strides (in elements) of an array of `shape`.
std::vector<size_t> c_strides(const std::vector<size_t>& shape);

// Visits the contiguous runs of a block of `extent` elements that starts at element `source_base`
// of one C-order array (`source_strides`) and lands at `target_base` of another
// (`target_strides`): copy(source_offset, target_offset, length) in elements. Trailing dimensions
// contiguous in both are merged into one run.
template <typename Copy>
void visit_runs(const std::vector<size_t>& extent, const std::vector<size_t>& source_strides, size_t source_base,
                const std::vector<size_t>& target_strides, size_t target_base, Copy&& copy) {
  const size_t rank = extent.size();
  for (size_t size : extent) {
    if (size == 0) return;
  }
  if (rank == 0) {
    copy(source_base, target_base, size_t{1});
    return;
  }
  // Merge dimension d into the run while the run spans whole rows of both arrays.
  size_t run = extent[rank - 1];
  size_t outer_rank = rank - 1;
  while (outer_rank > 0 && source_strides[outer_rank - 1] == run && target_strides[outer_rank - 1] == run) {
    run *= extent[outer_rank - 1];
    --outer_rank;
  }
  std::vector<size_t> position(outer_rank, 0);
  size_t source = source_base, target = target_base;
  while (true) {
    copy(source, target, run);
    size_t d = outer_rank;
    while (d > 0) {
      --d;
      if (++position[d] < extent[d]) {
        source += source_strides[d];
        target += target_strides[d];
        break;
      }
      source -= (extent[d] - 1) * source_strides[d];
      target -= (extent[d] - 1) * target_strides[d];
      position[d] = 0;
      if (d == 0) return;
    }
    if (outer_rank == 0) return;
  }
}

}  // namespace wxtrain::data::zarr
