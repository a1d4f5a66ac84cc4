#pragma once
// Zarr v2 and v3 stores read natively (no NCZarr): metadata, codecs and chunks. See zarr_store.h.
#include <cstdint>
#include <memory>
#include <string>

#include "data/readers/reader.h"

namespace wxtrain::data {

struct ZarrOptions {
  // Decoded chunks kept for reuse, shared by the loader's threads (least recently used out first).
  int64_t chunk_cache_bytes = 256LL * 1024 * 1024;
};

// True when `path` is a directory holding .zgroup, .zarray, .zmetadata or zarr.json.
bool is_zarr_store(const std::string& path);

// Opens a Zarr v2 or v3 group (its arrays are the variables) or a single array. Throws DataError
// naming the store and the metadata key at fault.
std::unique_ptr<Reader> open_zarr(const std::string& path, ZarrOptions options = {});

}  // namespace wxtrain::data
