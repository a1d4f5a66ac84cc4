#include "tracking/tensorboard/event_file.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/atomic_file.h"

namespace wxtrain::tracking {

namespace {

const std::array<uint32_t, 256>& crc32c_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void put_fixed(std::string& out, const void* bytes, size_t n) {  // little-endian hosts (x86-64, aarch64)
  out.append(static_cast<const char*>(bytes), n);
}

// Field keys: (number << 3) | wire type (0 varint, 1 64-bit, 2 length-delimited, 5 32-bit).
void put_bytes_field(std::string& out, int number, std::string_view bytes) {
  put_varint(out, static_cast<uint64_t>(number) << 3 | 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_varint(e, 1 << 3 | 1);
  put_fixed(e, &wall_time, 8);
  if (step != 0) {
    put_varint(e, 2 << 3 | 0);
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  const auto& table = crc32c_table();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string out;
  const uint64_t length = data.size();
  put_fixed(out, &length, 8);
  const uint32_t length_crc = masked_crc32c(std::string_view(out.data(), 8));
  put_fixed(out, &length_crc, 4);
  out.append(data);
  const uint32_t data_crc = masked_crc32c(data);
  put_fixed(out, &data_crc, 4);
  return out;
}

std::string file_version_event(double wall_time) {
  std::string e = event_header(wall_time, 0);
  put_bytes_field(e, 3, "brain.Event:2");
  return e;
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes_field(v, 1, tag);
    const float f = static_cast<float>(value);
    put_varint(v, 2 << 3 | 5);
    put_fixed(v, &f, 4);
    put_bytes_field(summary, 1, v);
  }
  std::string e = event_header(wall_time, step);
  put_bytes_field(e, 5, summary);
  return e;
}

EventFile::EventFile(const std::string& dir) {
  make_directories(dir);
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." +
                                         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count()) +
                                         "." + host + "." + std::to_string(getpid()) + ".wxtrain"))
              .string();
  file_ = std::fopen(path_.c_str(), "ab");
  if (!file_) throw WriteError(path_, errno);
  write_record(file_version_event(std::chrono::duration<double>(now).count()));
}

EventFile::~EventFile() {
  if (file_) std::fclose(file_);
}

void EventFile::write(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  write_record(scalars_event(wall_time, step, values));
}

void EventFile::write_record(std::string_view event) {
  const std::string record = tfrecord(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0)
    throw WriteError(path_, errno ? errno : EIO);
}

void EventFile::sync() {
  if (std::fflush(file_) != 0 || fsync(fileno(file_)) != 0) throw WriteError(path_, errno ? errno : EIO);
}

}  // namespace wxtrain::tracking
