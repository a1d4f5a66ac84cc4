#include "data/writers/zarr_v2_writer.h"

#include <blosc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace wxtrain::data {
namespace fs = std::filesystem;

namespace {

// Blosc-lz4 with byte shuffle, clevel 5: the compressor zarr-python (and so xarray) uses by default.
std::string blosc_compress(const char* data, size_t bytes, size_t typesize) {
  std::string out(bytes + BLOSC_MAX_OVERHEAD, '\0');
  const int written = blosc_compress_ctx(5, BLOSC_SHUFFLE, typesize, bytes, data, out.data(), out.size(), "lz4",
                                         0, 1);
  if (written <= 0) throw DataError("Blosc could not compress a chunk of " + std::to_string(bytes) + " bytes");
  out.resize(static_cast<size_t>(written));
  return out;
}

}  // namespace

ZarrV2Writer::ZarrV2Writer(std::string target) : target_(std::move(target)) {
  const fs::path path(target_);
  const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
  temporary_ = (parent / ("." + path.filename().string() + ".tmp-" + std::to_string(::getpid()))).string();
  std::error_code error;
  fs::remove_all(temporary_, error);
  // The target's folder must exist, as for a NetCDF file: a typo in it is an error, not a new tree.
  if (!fs::create_directory(temporary_, error)) {
    throw DataError("cannot write " + target_ + ": cannot create " + temporary_ + ": " +
                    (error ? error.message() : "it exists"));
  }
}

ZarrV2Writer::~ZarrV2Writer() {
  if (!committed_) {
    std::error_code ignored;
    fs::remove_all(temporary_, ignored);
  }
}

void ZarrV2Writer::write_file(const std::string& relative, const std::string& bytes) const {
  const fs::path path = fs::path(temporary_) / relative;
  std::error_code error;
  fs::create_directories(path.parent_path(), error);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.flush();
  if (!out) {
    throw DataError("cannot write " + (fs::path(target_) / relative).string() + ": " + std::strerror(errno));
  }
}

void ZarrV2Writer::define_array(const ZarrArraySpec& spec) {
  const size_t rank = spec.shape.size();
  if (spec.chunks.size() != rank || spec.dims.size() != rank) {
    throw DataError("Zarr array '" + spec.name + "' of " + target_ + ": shape, chunks and dims must have one rank");
  }
  for (size_t d = 0; d < rank; ++d) {
    if (spec.chunks[d] == 0) throw DataError("Zarr array '" + spec.name + "': a chunk dimension of 0");
  }
  nlohmann::json zarray = {
      {"zarr_format", 2},
      {"shape", spec.shape},
      {"chunks", spec.chunks},
      {"dtype", spec.int64 ? "<i8" : spec.float64 ? "<f8" : "<f4"},
      {"compressor", {{"id", "blosc"}, {"cname", "lz4"}, {"clevel", 5}, {"shuffle", 1}, {"blocksize", 0}}},
      {"fill_value", nullptr},
      {"order", "C"},
      {"filters", nullptr},
  };
  if (spec.fill_value) {
    if (std::isnan(*spec.fill_value)) zarray["fill_value"] = "NaN";
    else zarray["fill_value"] = *spec.fill_value;
  }
  nlohmann::json zattrs = spec.attributes;
  zattrs["_ARRAY_DIMENSIONS"] = spec.dims;
  write_file(spec.name + "/.zarray", zarray.dump(4));
  write_file(spec.name + "/.zattrs", zattrs.dump(4));
  consolidated_[spec.name + "/.zarray"] = zarray;
  consolidated_[spec.name + "/.zattrs"] = zattrs;
  arrays_[spec.name] = spec;
}

void ZarrV2Writer::write_chunk(const std::string& name, const std::vector<size_t>& index, const void* values) {
  const auto found = arrays_.find(name);
  if (found == arrays_.end()) throw DataError("Zarr array '" + name + "' of " + target_ + " was not defined");
  const ZarrArraySpec& spec = found->second;
  if (index.size() != spec.shape.size()) {
    throw DataError("Zarr array '" + name + "' of " + target_ + ": a chunk index of rank " +
                    std::to_string(index.size()) + " for an array of rank " + std::to_string(spec.shape.size()));
  }
  size_t elements = 1;
  std::string key;
  for (size_t d = 0; d < index.size(); ++d) {
    elements *= spec.chunks[d];
    key += (d ? "." : "") + std::to_string(index[d]);
  }
  if (index.empty()) key = "0";  // a 0-d array's one chunk
  const size_t itemsize = spec.float64 || spec.int64 ? 8 : 4;
  write_file(name + "/" + key, blosc_compress(static_cast<const char*>(values), elements * itemsize, itemsize));
}

void ZarrV2Writer::add_array(const ZarrArraySpec& spec, const void* values) {
  define_array(spec);
  const size_t rank = spec.shape.size();
  const size_t itemsize = spec.float64 || spec.int64 ? 8 : 4;
  if (rank == 0) {
    write_chunk(spec.name, {}, values);
    return;
  }
  // Every chunk, edge chunks padded to the full chunk shape as the spec requires.
  std::vector<size_t> grid(rank), strides(rank, 1);
  size_t chunk_count = 1, chunk_elements = 1;
  for (size_t d = 0; d < rank; ++d) {
    grid[d] = (spec.shape[d] + spec.chunks[d] - 1) / spec.chunks[d];
    chunk_count *= grid[d];
    chunk_elements *= spec.chunks[d];
  }
  for (size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * spec.shape[d];
  const char* source = static_cast<const char*>(values);
  std::vector<char> chunk(chunk_elements * itemsize);
  std::vector<size_t> index(rank, 0);
  for (size_t c = 0; c < chunk_count; ++c) {
    // index: the chunk's grid position; copy it element row by element row (innermost runs).
    std::fill(chunk.begin(), chunk.end(), 0);
    std::vector<size_t> local(rank, 0);
    const size_t inner = spec.chunks[rank - 1];
    for (size_t row = 0; row < chunk_elements / inner; ++row) {
      size_t rest = row, offset = 0;
      bool inside = true;
      for (size_t d = rank - 1; d-- > 0;) {
        local[d] = rest % spec.chunks[d];
        rest /= spec.chunks[d];
      }
      for (size_t d = 0; d + 1 < rank; ++d) {
        const size_t global = index[d] * spec.chunks[d] + local[d];
        inside = inside && global < spec.shape[d];
        offset += global * strides[d];
      }
      if (!inside) continue;
      const size_t first = index[rank - 1] * spec.chunks[rank - 1];
      const size_t count = std::min(inner, spec.shape[rank - 1] - first);
      std::memcpy(chunk.data() + row * inner * itemsize, source + (offset + first) * itemsize, count * itemsize);
    }
    write_chunk(spec.name, index, chunk.data());
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < grid[d]) break;
      index[d] = 0;
    }
  }
}

void ZarrV2Writer::set_group_attributes(const nlohmann::json& attributes) { group_attributes_ = attributes; }

void ZarrV2Writer::commit() {
  const nlohmann::json zgroup = {{"zarr_format", 2}};
  write_file(".zgroup", zgroup.dump(4));
  write_file(".zattrs", group_attributes_.dump(4));
  nlohmann::json metadata = consolidated_;
  metadata[".zgroup"] = zgroup;
  metadata[".zattrs"] = group_attributes_;
  write_file(".zmetadata", nlohmann::json{{"metadata", metadata}, {"zarr_consolidated_format", 1}}.dump(4));
  // A directory cannot be renamed over a non-empty one: move the old store aside first.
  std::error_code error;
  const std::string previous = temporary_ + ".old";
  const bool had_previous = fs::exists(target_, error);
  if (had_previous) fs::rename(target_, previous, error);
  if (error) throw DataError("cannot replace " + target_ + ": " + error.message());
  fs::rename(temporary_, target_, error);
  if (error) {
    if (had_previous) fs::rename(previous, target_);
    throw DataError("cannot move the new store into place at " + target_ + ": " + error.message());
  }
  committed_ = true;
  if (had_previous) fs::remove_all(previous, error);
}

}  // namespace wxtrain::data
