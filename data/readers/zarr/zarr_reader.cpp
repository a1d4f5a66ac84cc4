// The Zarr Reader: slabs assembled from the chunks they intersect, each decoded once into the
// shared cache and converted while copied out.
#include "data/readers/zarr/zarr_reader.h"

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "data/readers/zarr/zarr_codecs.h"
#include "data/readers/zarr/zarr_store.h"

namespace wxtrain::data {
namespace {

using zarr::ArrayMeta;
using zarr::Bytes;
using zarr::ShardIndexEntry;

std::string index_text(const std::vector<size_t>& index) {
  std::string text = "[";
  for (size_t d = 0; d < index.size(); ++d) text += (d ? ", " : "") + std::to_string(index[d]);
  return text + "]";
}

struct OpenArray {
  zarr::StoredArray stored;
  // The unit read and cached: the chunk, or for an array whose only codec is sharding_indexed,
  // the inner chunk, read alone from its shard through the shard's index.
  std::vector<size_t> read_chunk_shape;
  const zarr::ShardingCodec* sharding = nullptr;
  std::shared_ptr<const Bytes> fill_chunk;  // a read chunk of fill values
  // The chunk is C-order little-endian elements compressed by blosc alone (xarray's default
  // layout): a part of it can be decoded without the rest (zarr::blosc_decode_range).
  bool blosc_ranges = false;
};

class ZarrReader final : public Reader {
 public:
  ZarrReader(const std::string& path, ZarrOptions options) : path_(path), cache_(options.chunk_cache_bytes) {
    zarr::StoreLayout layout = zarr::read_store_layout(path);
    format_ = "Zarr v" + std::to_string(layout.zarr_format);
    unreadable_ = layout.unreadable;
    for (auto& stored : layout.arrays) {
      const ArrayMeta& meta = stored.meta;
      VariableMeta variable;
      variable.name = meta.name;
      for (size_t d = 0; d < meta.shape.size(); ++d) variable.dims.push_back({meta.dimension_names[d], meta.shape[d]});
      variable.attributes = meta.attributes;
      variable.dtype = meta.dtype_name;
      notes_.insert(notes_.end(), meta.notes.begin(), meta.notes.end());
      OpenArray array;
      array.read_chunk_shape = meta.chunk_shape;
      if (meta.codecs.size() == 1 && meta.codecs[0].kind == zarr::Codec::Kind::kSharding) {
        array.sharding = meta.codecs[0].sharding.get();
        array.read_chunk_shape = array.sharding->inner_chunk_shape;
      }
      const size_t elements = static_cast<size_t>(zarr::checked_byte_count(array.read_chunk_shape, 1, meta.name));
      auto fill = std::make_shared<Bytes>(elements * meta.dtype.size);
      for (size_t i = 0; i < elements; ++i) std::copy(meta.fill_bytes.begin(), meta.fill_bytes.end(), fill->begin() + i * meta.dtype.size);
      array.fill_chunk = std::move(fill);
      const zarr::CodecChain& chain = meta.codecs;
      array.blosc_ranges = chain.size() == 2 && chain[0].kind == zarr::Codec::Kind::kBytes &&
                           (chain[0].endian == zarr::Endian::kLittle || meta.dtype.size == 1) &&
                           chain[1].kind == zarr::Codec::Kind::kBlosc;
      array.stored = std::move(stored);
      names_.push_back(variable.name);
      variables_.emplace(variable.name, std::move(variable));
      arrays_.emplace(array.stored.meta.name, std::move(array));
    }
  }

  const std::string& path() const override { return path_; }
  std::string format() const override { return format_; }
  std::vector<std::string> variable_names() const override { return names_; }
  std::vector<std::string> notes() const override { return notes_; }

  const VariableMeta& variable(const std::string& name) const override {
    auto it = variables_.find(name);
    if (it == variables_.end()) {
      if (auto unreadable = unreadable_.find(name); unreadable != unreadable_.end()) {
        throw DataError("variable '" + name + "' in " + path_ + " cannot be read as numbers: " + unreadable->second);
      }
      std::string listing;
      for (const auto& n : names_) listing += (listing.empty() ? "" : ", ") + n;
      throw DataError("variable '" + name + "' not found in " + path_ + "; the store has: " + (listing.empty() ? "(no arrays)" : listing));
    }
    return it->second;
  }

  void read(const std::string& name, const std::vector<size_t>& start, const std::vector<size_t>& count,
            float* out) const override {
    check_slab(path_, variable(name), start, count);
    read_slab(arrays_.at(name), start, count, out);
  }

  std::vector<double> read_doubles(const std::string& name) const override {
    const VariableMeta& meta = variable(name);
    std::vector<size_t> start(meta.dims.size(), 0), count;
    for (const auto& dim : meta.dims) count.push_back(dim.length);
    const uint64_t elements = zarr::checked_byte_count(count, 1, "variable '" + name + "' in " + path_);
    std::vector<double> values(static_cast<size_t>(elements));
    read_slab(arrays_.at(name), start, count, values.data());
    return values;
  }

 private:
  template <typename Out>
  void read_slab(const OpenArray& array, const std::vector<size_t>& start, const std::vector<size_t>& count, Out* out) const {
    const size_t rank = start.size();
    for (size_t size : count) {
      if (size == 0) return;
    }
    const std::vector<size_t>& chunk = array.read_chunk_shape;
    const std::vector<size_t> chunk_strides = zarr::c_strides(chunk);
    const std::vector<size_t> out_strides = zarr::c_strides(count);
    const zarr::DataType& dtype = array.stored.meta.dtype;
    std::vector<size_t> first(rank), last(rank);
    for (size_t d = 0; d < rank; ++d) {
      first[d] = start[d] / chunk[d];
      last[d] = (start[d] + count[d] - 1) / chunk[d];
    }
    const size_t chunk_elements = chunk.empty() ? 1 : chunk_strides[0] * chunk[0];
    std::vector<size_t> index = first, extent(rank);
    while (true) {
      size_t chunk_base = 0, out_base = 0, chunk_last = 0;
      for (size_t d = 0; d < rank; ++d) {
        const size_t origin = index[d] * chunk[d];
        const size_t begin = std::max(start[d], origin);
        const size_t end = std::min(start[d] + count[d], origin + chunk[d]);
        extent[d] = end - begin;
        chunk_base += (begin - origin) * chunk_strides[d];
        chunk_last += (end - 1 - origin) * chunk_strides[d];
        out_base += (begin - start[d]) * out_strides[d];
      }
      // Less than half of a chunk that is not cached: decode only the elements between the
      // slab's first and last in it (and keep them out of the cache, which holds whole chunks).
      std::shared_ptr<const Bytes> data;
      const size_t span = chunk_last - chunk_base + 1;
      if (array.blosc_ranges && 2 * span < chunk_elements) data = load_chunk_range(array, index, chunk_base, span);
      if (data) {
        chunk_base = 0;
      } else {
        data = load_chunk(array, index);
      }
      zarr::visit_runs(extent, chunk_strides, chunk_base, out_strides, out_base, [&](size_t source, size_t target, size_t length) {
        zarr::convert_elements(dtype, data->data() + source * dtype.size, length, out + target);
      });
      size_t d = rank;
      while (d > 0 && index[d - 1] == last[d - 1]) {
        index[d - 1] = first[d - 1];
        --d;
      }
      if (d == 0) return;
      ++index[d - 1];
    }
  }

  std::string chunk_error(const OpenArray& array, const std::string& key, const std::string& what) const {
    return "Zarr store " + path_ + ", array '" + array.stored.meta.name + "', chunk '" + key + "': " + what;
  }

  // The read chunk at `index`, decoded (native elements, C order), from the cache when there.
  std::shared_ptr<const Bytes> load_chunk(const OpenArray& array, const std::vector<size_t>& index) const {
    const ArrayMeta& meta = array.stored.meta;
    std::string cache_key = meta.name + '\0' + index_text(index);
    if (auto cached = cache_.find(cache_key)) return cached;
    std::shared_ptr<const Bytes> decoded = array.sharding ? load_inner_chunk(array, index) : load_stored_chunk(array, index);
    if (decoded != array.fill_chunk) cache_.insert(cache_key, decoded);
    return decoded;
  }

  // Elements [first, first + count) of a blosc-only chunk, decoded alone; nullptr when the chunk is
  // cached or missing (load_chunk serves those) or blosc cannot cut that range.
  std::shared_ptr<const Bytes> load_chunk_range(const OpenArray& array, const std::vector<size_t>& index, size_t first,
                                                size_t count) const {
    const ArrayMeta& meta = array.stored.meta;
    if (cache_.find(meta.name + '\0' + index_text(index))) return nullptr;
    const std::string key = meta.chunk_key(index);
    try {
      std::optional<Bytes> stored = zarr::read_file_if_exists(array.stored.directory + "/" + key);
      if (!stored) return nullptr;
      const size_t chunk_bytes = array.fill_chunk->size();
      std::optional<Bytes> part = zarr::blosc_decode_range(stored->data(), stored->size(), chunk_bytes,
                                                           first * meta.dtype.size, count * meta.dtype.size);
      if (!part) return nullptr;
      return std::make_shared<const Bytes>(std::move(*part));
    } catch (const DataError& error) {
      throw DataError(chunk_error(array, key, error.what()));
    }
  }

  std::shared_ptr<const Bytes> load_stored_chunk(const OpenArray& array, const std::vector<size_t>& index) const {
    const ArrayMeta& meta = array.stored.meta;
    const std::string key = meta.chunk_key(index);
    const std::string file = array.stored.directory + "/" + key;
    try {
      std::optional<Bytes> stored = zarr::read_file_if_exists(file);
      if (!stored) return array.fill_chunk;  // the spec: a chunk never written holds the fill value
      return std::make_shared<const Bytes>(
          zarr::decode_chunk(meta.codecs, meta.dtype, meta.chunk_shape, meta.fill_bytes, stored->data(), stored->size()));
    } catch (const DataError& error) {
      throw DataError(chunk_error(array, key, error.what()));
    }
  }

  std::shared_ptr<const Bytes> load_inner_chunk(const OpenArray& array, const std::vector<size_t>& index) const {
    const ArrayMeta& meta = array.stored.meta;
    const zarr::ShardingCodec& sharding = *array.sharding;
    const std::vector<size_t> grid = zarr::chunks_per_shard(sharding, meta.chunk_shape);
    std::vector<size_t> shard(index.size());
    size_t entry = 0;
    for (size_t d = 0; d < index.size(); ++d) {
      shard[d] = index[d] / grid[d];
      entry = entry * grid[d] + index[d] % grid[d];
    }
    const std::string key = meta.chunk_key(shard);
    const std::string file = array.stored.directory + "/" + key;
    try {
      const std::shared_ptr<const Bytes> entries = shard_index(array, key, file);
      if (!entries) return array.fill_chunk;  // no shard file
      ShardIndexEntry location;
      std::memcpy(&location, entries->data() + entry * sizeof(ShardIndexEntry), sizeof(ShardIndexEntry));
      if (location.empty()) return array.fill_chunk;
      const Bytes stored = zarr::read_file_range(file, location.offset, location.nbytes);
      return std::make_shared<const Bytes>(zarr::decode_chunk(sharding.inner, meta.dtype, sharding.inner_chunk_shape,
                                                              meta.fill_bytes, stored.data(), stored.size()));
    } catch (const DataError& error) {
      throw DataError(chunk_error(array, key + "' inner chunk '" + index_text(index), error.what()));
    }
  }

  // The decoded index of the shard in `file` (ShardIndexEntry after ShardIndexEntry), cached
  // beside the chunks; nullptr when the shard was never written.
  std::shared_ptr<const Bytes> shard_index(const OpenArray& array, const std::string& key, const std::string& file) const {
    const ArrayMeta& meta = array.stored.meta;
    const std::string cache_key = meta.name + '\0' + "index " + key;
    if (auto cached = cache_.find(cache_key)) return cached;
    const std::optional<uint64_t> shard_size = zarr::file_size_if_exists(file);
    if (!shard_size) return nullptr;
    const uint64_t index_size = zarr::shard_index_size(*array.sharding, meta.chunk_shape);
    if (index_size > *shard_size) {
      throw DataError("shard of " + std::to_string(*shard_size) + " bytes is shorter than its index (" + std::to_string(index_size) + " bytes)");
    }
    const Bytes index = zarr::read_file_range(file, array.sharding->index_at_end ? *shard_size - index_size : 0, index_size);
    const std::vector<ShardIndexEntry> entries =
        zarr::decode_shard_index(*array.sharding, meta.chunk_shape, index.data(), index.size(), *shard_size);
    auto packed = std::make_shared<Bytes>(entries.size() * sizeof(ShardIndexEntry));
    std::memcpy(packed->data(), entries.data(), packed->size());
    cache_.insert(cache_key, packed);
    return packed;
  }

  std::string path_;
  std::string format_;
  std::vector<std::string> names_;
  std::vector<std::string> notes_;  // the arrays' notes (Reader::notes)
  std::map<std::string, VariableMeta> variables_;
  std::map<std::string, OpenArray> arrays_;
  std::map<std::string, std::string> unreadable_;  // string arrays and the like: named in errors
  mutable zarr::ChunkCache cache_;
};

}  // namespace

bool is_zarr_store(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_directory(path, error)) return false;
  for (const char* marker : {".zgroup", ".zarray", ".zmetadata", "zarr.json"}) {
    if (std::filesystem::exists(std::filesystem::path(path) / marker, error)) return true;
  }
  return false;
}

std::unique_ptr<Reader> open_zarr(const std::string& path, ZarrOptions options) {
  return std::make_unique<ZarrReader>(path, options);
}

}  // namespace wxtrain::data
