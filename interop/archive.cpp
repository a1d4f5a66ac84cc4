#include "interop/archive.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace wxtrain::interop {
namespace {

uint64_t little_endian(const std::string& bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
  return value;
}

void put_le(std::string& out, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

std::string strip_dot_slash(std::string name) {
  while (name.rfind("./", 0) == 0) name.erase(0, 2);
  return name;
}

// --- zip ---

Archive read_zip(const std::string& bytes, const std::string& source) {
  const uint64_t size = bytes.size();
  auto damaged = [&](const std::string& what) -> Error {
    return Error(source + ": not a readable zip archive (truncated or damaged): " + what);
  };
  // End of central directory: 22 bytes and a comment of up to 64 KiB at the end of the file.
  if (size < 22) throw damaged("it is " + std::to_string(size) + " bytes long");
  size_t eocd = std::string::npos;
  const uint64_t lowest = size > 22 + 65535 ? size - 22 - 65535 : 0;
  for (uint64_t i = size - 22 + 1; i-- > lowest;) {
    if (little_endian(bytes, i, 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd == std::string::npos) throw damaged("no end-of-central-directory record");
  uint64_t entries = little_endian(bytes, eocd + 10, 2);
  uint64_t directory_size = little_endian(bytes, eocd + 12, 4);
  uint64_t directory_offset = little_endian(bytes, eocd + 16, 4);
  // Zip64 (LibTorch's writer): the locator just before the end record points at the zip64 record.
  if (eocd >= 20 && little_endian(bytes, eocd - 20, 4) == 0x07064b50) {
    const uint64_t record = little_endian(bytes, eocd - 20 + 8, 8);
    if (record <= size && size - record >= 56 && little_endian(bytes, record, 4) == 0x06064b50) {
      entries = little_endian(bytes, record + 32, 8);
      directory_size = little_endian(bytes, record + 40, 8);
      directory_offset = little_endian(bytes, record + 48, 8);
    }
  }
  if (directory_offset > size || directory_size > size - directory_offset || entries > directory_size / 46)
    throw damaged("its directory declares " + std::to_string(entries) + " entries in " + std::to_string(directory_size) +
                  " bytes at byte " + std::to_string(directory_offset) + " of " + std::to_string(size));
  Archive archive;
  archive.format = "zip";
  uint64_t at = directory_offset;
  const uint64_t end = directory_offset + directory_size;
  for (uint64_t n = 0; n < entries; ++n) {
    if (end - at < 46 || little_endian(bytes, at, 4) != 0x02014b50)
      throw damaged("directory entry " + std::to_string(n) + " is not where the directory says");
    const uint64_t flags = little_endian(bytes, at + 8, 2);
    const uint64_t method = little_endian(bytes, at + 10, 2);
    uint64_t compressed = little_endian(bytes, at + 20, 4);
    uint64_t uncompressed = little_endian(bytes, at + 24, 4);
    const uint64_t name_length = little_endian(bytes, at + 28, 2);
    const uint64_t extra_length = little_endian(bytes, at + 30, 2);
    const uint64_t comment_length = little_endian(bytes, at + 32, 2);
    uint64_t local = little_endian(bytes, at + 42, 4);
    if (end - at - 46 < name_length + extra_length + comment_length)
      throw damaged("directory entry " + std::to_string(n) + " runs past the directory");
    const std::string name = bytes.substr(at + 46, name_length);
    // Zip64 sizes and offset: in the extra field with id 1, for each field that reads 0xFFFFFFFF.
    const uint64_t extra_end = at + 46 + name_length + extra_length;
    for (uint64_t e = at + 46 + name_length; e + 4 <= extra_end;) {
      const uint64_t id = little_endian(bytes, e, 2), length = little_endian(bytes, e + 2, 2);
      uint64_t field = e + 4;
      const uint64_t field_end = std::min(field + length, extra_end);
      if (id == 1) {
        for (uint64_t* value : {&uncompressed, &compressed, &local}) {
          if (*value != 0xFFFFFFFF) continue;
          if (field + 8 > field_end) break;
          *value = little_endian(bytes, field, 8);
          field += 8;
        }
      }
      e += 4 + length;
    }
    at = extra_end + comment_length;
    if (!name.empty() && name.back() == '/') continue;  // a folder
    if (flags & 1) throw Error(source + ": entry '" + name + "' is encrypted");
    if (method != 0)
      throw Error(source + ": entry '" + name + "' is compressed (zip method " + std::to_string(method) +
                  "); wxtrain reads stored entries, as torch.save and PhysicsNeMo write them (re-zip with -0)");
    if (local > size || size - local < 30 || little_endian(bytes, local, 4) != 0x04034b50)
      throw damaged("entry '" + name + "' has no local header at byte " + std::to_string(local));
    const uint64_t data = local + 30 + little_endian(bytes, local + 26, 2) + little_endian(bytes, local + 28, 2);
    if (compressed != uncompressed || data > size || compressed > size - data)
      throw damaged("entry '" + name + "' declares " + std::to_string(compressed) + " bytes at byte " +
                    std::to_string(data) + " of " + std::to_string(size));
    archive.files[strip_dot_slash(name)] = bytes.substr(data, compressed);
  }
  return archive;
}

// --- tar ---

uint64_t tar_number(const std::string& bytes, size_t at, size_t width, const std::string& source) {
  // Octal digits, NUL/space terminated; GNU base-256 for sizes of 8 GiB and more.
  if (static_cast<unsigned char>(bytes[at]) & 0x80) {
    uint64_t value = 0;
    for (size_t i = 1; i < width; ++i) value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
    return value;
  }
  uint64_t value = 0;
  size_t i = 0;
  while (i < width && bytes[at + i] == ' ') ++i;
  for (; i < width && bytes[at + i] >= '0' && bytes[at + i] <= '7'; ++i) value = value * 8 + (bytes[at + i] - '0');
  if (i < width && bytes[at + i] != '\0' && bytes[at + i] != ' ')
    throw Error(source + ": not a readable tar archive (damaged header at byte " + std::to_string(at) + ")");
  return value;
}

std::string tar_text(const std::string& bytes, size_t at, size_t width) {
  const std::string field = bytes.substr(at, width);
  return field.substr(0, field.find('\0'));
}

Archive read_tar(const std::string& bytes, const std::string& source) {
  Archive archive;
  archive.format = "tar";
  std::string long_name;  // a GNU 'L' record names the next entry
  for (size_t at = 0; at + 512 <= bytes.size();) {
    if (bytes.compare(at, 512, std::string(512, '\0')) == 0) break;  // end of archive
    const uint64_t size = tar_number(bytes, at + 124, 12, source);
    const char type = bytes[at + 156];
    std::string name = tar_text(bytes, at, 100);
    if (bytes.compare(at + 257, 5, "ustar") == 0) {
      const std::string prefix = tar_text(bytes, at + 345, 155);
      if (!prefix.empty()) name = prefix + "/" + name;
    }
    const size_t data = at + 512;
    if (size > bytes.size() - data)
      throw Error(source + ": not a readable tar archive (truncated): entry '" + name + "' declares " +
                  std::to_string(size) + " bytes, " + std::to_string(bytes.size() - data) + " remain");
    if (type == 'L') {
      long_name = tar_text(bytes, data, size);
    } else if (type == '0' || type == '\0' || type == '7') {
      archive.files[strip_dot_slash(long_name.empty() ? name : long_name)] = bytes.substr(data, size);
      long_name.clear();
    } else {
      long_name.clear();  // folders, links and pax headers carry no file of their own
    }
    at = data + (size + 511) / 512 * 512;
  }
  return archive;
}

}  // namespace

bool is_zip(const std::string& bytes) {
  return bytes.size() >= 4 && (little_endian(bytes, 0, 4) == 0x04034b50 || little_endian(bytes, 0, 4) == 0x06054b50);
}

bool is_tar(const std::string& bytes) {
  if (bytes.size() < 512) return false;
  if (bytes.compare(257, 5, "ustar") == 0) return true;
  // A pre-POSIX header: its checksum field matches the header's bytes (the field read as spaces).
  uint64_t sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(bytes[i]);
  uint64_t stored = 0;
  for (size_t i = 148; i < 156 && bytes[i] >= '0' && bytes[i] <= '7'; ++i) stored = stored * 8 + (bytes[i] - '0');
  return stored != 0 && stored == sum;
}

std::string read_file_bytes(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) throw Error(path + ": file not found");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  if (!in && !in.eof()) throw Error(path + ": cannot read the file");
  return out.str();
}

Archive read_archive(const std::string& bytes, const std::string& source) {
  if (is_tar(bytes)) return read_tar(bytes, source);
  if (is_zip(bytes)) return read_zip(bytes, source);
  throw Error(source + ": neither a zip nor a tar archive (a .mdlus is one of them, a torch.save file a zip)");
}

uint32_t crc32(const std::string& bytes) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::string write_stored_zip(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out, directory;
  // 1980-01-01 00:00 in DOS time: the files carry no date of their own.
  const uint64_t dos_time = 0, dos_date = (0 << 9) | (1 << 5) | 1;
  for (const auto& [name, data] : entries) {
    if (data.size() >= 0xFFFFFFFFu || out.size() >= 0xFFFFFFFFu)
      throw Error("cannot write " + name + " into a zip: past 4 GiB needs Zip64, which this writer does not make");
    const uint32_t crc = crc32(data);
    const uint64_t offset = out.size();
    put_le(out, 0x04034b50, 4);
    put_le(out, 20, 2);  // version needed: 2.0
    put_le(out, 0, 2);   // flags
    put_le(out, 0, 2);   // stored
    put_le(out, dos_time, 2);
    put_le(out, dos_date, 2);
    put_le(out, crc, 4);
    put_le(out, data.size(), 4);
    put_le(out, data.size(), 4);
    put_le(out, name.size(), 2);
    put_le(out, 0, 2);
    out += name;
    out += data;
    put_le(directory, 0x02014b50, 4);
    put_le(directory, 0x0314, 2);  // made by: Unix, zip 2.0
    put_le(directory, 20, 2);  // needed
    put_le(directory, 0, 2);
    put_le(directory, 0, 2);
    put_le(directory, dos_time, 2);
    put_le(directory, dos_date, 2);
    put_le(directory, crc, 4);
    put_le(directory, data.size(), 4);
    put_le(directory, data.size(), 4);
    put_le(directory, name.size(), 2);
    put_le(directory, 0, 2);  // extra
    put_le(directory, 0, 2);  // comment
    put_le(directory, 0, 2);  // disk
    put_le(directory, 0, 2);  // internal attributes
    put_le(directory, 0x81A40000u, 4);  // external: a regular file, rw-r--r--
    put_le(directory, offset, 4);
    directory += name;
  }
  const uint64_t directory_offset = out.size();
  if (directory_offset + directory.size() >= 0xFFFFFFFFu)
    throw Error("cannot write a zip past 4 GiB: that needs Zip64, which this writer does not make");
  out += directory;
  put_le(out, 0x06054b50, 4);
  put_le(out, 0, 2);
  put_le(out, 0, 2);
  put_le(out, entries.size(), 2);
  put_le(out, entries.size(), 2);
  put_le(out, directory.size(), 4);
  put_le(out, directory_offset, 4);
  put_le(out, 0, 2);
  return out;
}

}  // namespace wxtrain::interop
