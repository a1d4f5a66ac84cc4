#pragma once
// Which rank owns which range of a flat buffer. Under ZeRO a group's flat buffer of `numel`
// elements is padded to a multiple of the ranks it is sharded over, and rank r owns
// [r*S, (r+1)*S) with S = padded / ranks; unsharded, the one "shard" is the whole buffer. The
// parameter store pads by it, the gradient reducer sends each owner its piece by it, the sharded
// optimizer keeps state for the owned range and consolidates checkpoints by it.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace wxtrain::distributed {

struct ShardLayout {
  int64_t numel = 0;        // real elements
  int64_t padded = 0;       // numel rounded up to a multiple of `ranks`
  int64_t shard_begin = 0;  // this rank's range [shard_begin, shard_begin + shard_size)
  int64_t shard_size = 0;
  int ranks = 1;            // ranks the buffer is sharded over (1: replicated, the shard is all of it)

  // ranks = 1 gives the unsharded layout: no padding, rank 0 "owns" everything.
  static ShardLayout of(int64_t numel, int ranks, int rank) {
    ShardLayout l;
    l.numel = numel;
    l.ranks = ranks;
    l.padded = (numel + ranks - 1) / ranks * ranks;
    l.shard_size = l.padded / ranks;
    l.shard_begin = ranks > 1 ? rank * l.shard_size : 0;
    return l;
  }
  bool sharded() const { return ranks > 1; }

  // Elements of [begin, end) that each rank owns, in rank order: the counts of a reduce-scatter of
  // that range.
  std::vector<int64_t> counts_in(int64_t begin, int64_t end) const {
    std::vector<int64_t> counts(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      const int64_t lo = std::max(begin, r * shard_size);
      const int64_t hi = std::min(end, (r + 1) * shard_size);
      counts[static_cast<size_t>(r)] = std::max<int64_t>(0, hi - lo);
    }
    return counts;
  }
  // Where this rank's part of [begin, end) starts inside its shard (0 when it owns none of it).
  int64_t shard_offset_of(int64_t begin, int64_t end) const {
    const bool owns_some = std::max(begin, shard_begin) < std::min(end, shard_begin + shard_size);
    return owns_some ? std::max(begin, shard_begin) - shard_begin : 0;
  }
  // Real (not padding) elements in this rank's shard.
  int64_t owned_numel() const { return std::max<int64_t>(0, std::min(shard_size, numel - shard_begin)); }
};

}  // namespace wxtrain::distributed
