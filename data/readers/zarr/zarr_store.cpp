#include "data/readers/zarr/zarr_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace wxtrain::data::zarr {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

void read_exactly(int fd, const std::string& path, uint64_t offset, uint8_t* out, uint64_t size) {
  uint64_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd, out + done, static_cast<size_t>(std::min<uint64_t>(size - done, 1u << 30)),
                                static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw DataError("cannot read " + path + ": " + std::strerror(errno));
    if (got == 0) {
      throw DataError(path + " is shorter than expected: wanted bytes " + std::to_string(offset) + ".." +
                      std::to_string(offset + size) + ", the file ends at " + std::to_string(offset + done));
    }
    done += static_cast<uint64_t>(got);
  }
}

std::string text_of(const std::optional<Bytes>& bytes) { return bytes ? std::string(bytes->begin(), bytes->end()) : std::string(); }

std::string join(const std::string& directory, const std::string& name) { return directory + "/" + name; }

std::string array_name_of_store(const std::string& path) {
  fs::path store = fs::path(path).lexically_normal();
  if (store.filename().empty()) store = store.parent_path();
  std::string name = store.filename().string();
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".zarr") == 0) name.resize(name.size() - 5);
  return name;
}

// Child directories holding `marker`, sorted by name.
std::vector<std::string> children_holding(const std::string& path, const std::string& marker) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(path, error)) {
    if (entry.is_directory() && fs::exists(entry.path() / marker)) names.push_back(entry.path().filename().string());
  }
  if (error) throw DataError("cannot list the Zarr store " + path + ": " + error.message());
  std::sort(names.begin(), names.end());
  return names;
}

const json* member(const json& object, const std::string& key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// Adds the array `parse` reads, or notes it as unreadable when its elements are not numbers.
template <typename Parse>
void add_array(StoreLayout& layout, const std::string& name, const std::string& directory, Parse parse) {
  try {
    layout.arrays.push_back({parse(), directory});
  } catch (const UnsupportedDataType& error) {
    layout.unreadable[name] = error.what();
  }
}

bool is_array_node(const json& metadata) {
  const json* type = member(metadata, "node_type");
  return type && *type == "array";
}

StoreLayout read_v3(const std::string& path) {
  StoreLayout layout;
  layout.zarr_format = 3;
  const json root = parse_metadata_json(text_of(read_file_if_exists(join(path, "zarr.json"))), "zarr.json");
  if (is_array_node(root)) {
    const std::string name = array_name_of_store(path);
    add_array(layout, name, path, [&] { return v3_array_from_json(root, name); });
    return layout;
  }
  const json* type = member(root, "node_type");
  if (!type || *type != "group") throw DataError("zarr.json: node_type must be \"group\" or \"array\", got " + (type ? type->dump() : "(missing)"));
  const json* consolidated = member(root, "consolidated_metadata");
  const json* entries = consolidated ? member(*consolidated, "metadata") : nullptr;
  if (entries && entries->is_object()) {
    for (auto it = entries->begin(); it != entries->end(); ++it) {
      if (it.key().find('/') != std::string::npos || !is_array_node(it.value())) continue;  // nested groups' arrays
      add_array(layout, it.key(), join(path, it.key()), [&] { return v3_array_from_json(it.value(), it.key()); });
    }
    return layout;
  }
  for (const std::string& child : children_holding(path, "zarr.json")) {
    const std::string directory = join(path, child);
    const json metadata = parse_metadata_json(text_of(read_file_if_exists(join(directory, "zarr.json"))), child + "/zarr.json");
    if (is_array_node(metadata)) add_array(layout, child, directory, [&] { return v3_array_from_json(metadata, child); });
  }
  return layout;
}

StoreLayout read_v2(const std::string& path) {
  StoreLayout layout;
  layout.zarr_format = 2;
  if (auto consolidated = read_file_if_exists(join(path, ".zmetadata"))) {
    const json root = parse_metadata_json(text_of(consolidated), ".zmetadata");
    const json* metadata = member(root, "metadata");
    if (!metadata || !metadata->is_object()) throw DataError(".zmetadata: no \"metadata\" object");
    const json none = json::object();
    if (const json* zarray = member(*metadata, ".zarray")) {
      const json* zattrs = member(*metadata, ".zattrs");
      const std::string name = array_name_of_store(path);
      add_array(layout, name, path, [&] { return v2_array_from_json(*zarray, zattrs ? *zattrs : none, name); });
      return layout;
    }
    const std::string suffix = "/.zarray";
    for (auto it = metadata->begin(); it != metadata->end(); ++it) {
      const std::string& key = it.key();
      if (key.size() <= suffix.size() || key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
      const std::string name = key.substr(0, key.size() - suffix.size());
      if (name.find('/') != std::string::npos) continue;  // arrays of nested groups
      const json* zattrs = member(*metadata, name + "/.zattrs");
      add_array(layout, name, join(path, name), [&] { return v2_array_from_json(it.value(), zattrs ? *zattrs : none, name); });
    }
    return layout;
  }
  if (auto zarray = read_file_if_exists(join(path, ".zarray"))) {
    const std::string name = array_name_of_store(path);
    const std::string zattrs = text_of(read_file_if_exists(join(path, ".zattrs")));
    add_array(layout, name, path, [&] { return parse_v2_array(text_of(zarray), zattrs, name); });
    return layout;
  }
  for (const std::string& child : children_holding(path, ".zarray")) {
    const std::string directory = join(path, child);
    const std::string zarray = text_of(read_file_if_exists(join(directory, ".zarray")));
    const std::string zattrs = text_of(read_file_if_exists(join(directory, ".zattrs")));
    add_array(layout, child, directory, [&] { return parse_v2_array(zarray, zattrs, child); });
  }
  return layout;
}

}  // namespace

StoreLayout read_store_layout(const std::string& path) {
  try {
    std::error_code error;
    if (fs::exists(join(path, "zarr.json"), error)) return read_v3(path);
    if (fs::exists(join(path, ".zmetadata"), error) || fs::exists(join(path, ".zarray"), error) ||
        fs::exists(join(path, ".zgroup"), error)) {
      return read_v2(path);
    }
  } catch (const DataError& error) {
    throw DataError("Zarr store " + path + ": " + error.what());
  }
  throw DataError(path + " is not a Zarr store (no .zgroup, .zarray, .zmetadata or zarr.json in it)");
}

std::optional<Bytes> read_file_if_exists(const std::string& path) {
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
    throw DataError("cannot open " + path + ": " + std::strerror(errno));
  }
  struct stat status {};
  if (::fstat(file.get(), &status) != 0) throw DataError("cannot stat " + path + ": " + std::strerror(errno));
  if (S_ISDIR(status.st_mode)) throw DataError(path + " is a directory where a chunk or metadata file was expected");
  Bytes bytes(static_cast<size_t>(status.st_size));
  read_exactly(file.get(), path, 0, bytes.data(), bytes.size());
  return bytes;
}

Bytes read_file_range(const std::string& path, uint64_t offset, uint64_t size) {
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) throw DataError("cannot open " + path + ": " + std::strerror(errno));
  Bytes bytes(static_cast<size_t>(size));
  read_exactly(file.get(), path, offset, bytes.data(), size);
  return bytes;
}

std::optional<uint64_t> file_size_if_exists(const std::string& path) {
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
    throw DataError("cannot stat " + path + ": " + std::strerror(errno));
  }
  return static_cast<uint64_t>(status.st_size);
}

std::shared_ptr<const Bytes> ChunkCache::find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return nullptr;
  entries_.splice(entries_.begin(), entries_, it->second);
  return it->second->second;
}

void ChunkCache::insert(const std::string& key, std::shared_ptr<const Bytes> value) {
  const uint64_t bytes = value->size();
  if (bytes > capacity_) return;  // (a zero capacity disables the cache)
  std::lock_guard<std::mutex> lock(mutex_);
  if (by_key_.count(key)) return;  // another thread decoded it meanwhile
  entries_.emplace_front(key, std::move(value));
  by_key_[key] = entries_.begin();
  used_ += bytes;
  while (used_ > capacity_) {
    used_ -= entries_.back().second->size();
    by_key_.erase(entries_.back().first);
    entries_.pop_back();
  }
}

uint64_t ChunkCache::size_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return used_;
}

}  // namespace wxtrain::data::zarr
