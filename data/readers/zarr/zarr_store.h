#pragma once
// A Zarr store on the local file system: which arrays it holds and where (zarr_store.cpp), the
// chunk files read whole or by byte range, and the LRU cache of decoded chunks the reader's
// threads share. The Reader over it is in zarr_reader.cpp.
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/readers/zarr/zarr_codecs.h"
#include "data/readers/zarr/zarr_metadata.h"

namespace wxtrain::data::zarr {

struct StoredArray {
  ArrayMeta meta;
  std::string directory;  // the array's directory; chunk keys are relative to it
};

struct StoreLayout {
  int zarr_format = 2;
  std::vector<StoredArray> arrays;  // a group's top-level arrays by name, or the store's one array
  // Arrays left out because their elements are not numbers (string coordinates): name -> why.
  std::map<std::string, std::string> unreadable;
};

// Reads the store's metadata: v3 when zarr.json is at the root, else v2. A group's arrays come
// from its consolidated metadata when present (.zmetadata; a v3 group's consolidated_metadata),
// else from the child directories holding .zarray or zarr.json. A store that is one array gives
// that array, named after the directory (without .zarr). Throws DataError naming the store.
StoreLayout read_store_layout(const std::string& path);

// A whole file; nullopt when it does not exist (a missing chunk is the fill value). Throws
// DataError when it exists but cannot be read.
std::optional<Bytes> read_file_if_exists(const std::string& path);
// `size` bytes at `offset`; throws DataError when the file is shorter.
Bytes read_file_range(const std::string& path, uint64_t offset, uint64_t size);
// nullopt when the file does not exist.
std::optional<uint64_t> file_size_if_exists(const std::string& path);

// Decoded chunks (or shard indexes), least recently used out first once `capacity_bytes` is
// exceeded. Entries are shared_ptrs, so a chunk evicted while a thread copies from it stays alive.
// Thread-safe; the lock is held only to look up and insert, never while decoding.
class ChunkCache {
 public:
  explicit ChunkCache(int64_t capacity_bytes) : capacity_(capacity_bytes > 0 ? static_cast<uint64_t>(capacity_bytes) : 0) {}

  std::shared_ptr<const Bytes> find(const std::string& key);
  void insert(const std::string& key, std::shared_ptr<const Bytes> value);
  uint64_t size_bytes() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const Bytes>>;
  uint64_t capacity_;
  uint64_t used_ = 0;
  mutable std::mutex mutex_;
  std::list<Entry> entries_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_key_;
};

}  // namespace wxtrain::data::zarr
