#pragma once
// TensorBoard's event files, written without TensorFlow: a file of TFRecords, each an `Event`
// protocol buffer (tensorboard/compat/proto/event.proto) holding scalar summaries.
//
// TFRecord framing, per record:
//   uint64 length (little-endian) | uint32 masked CRC32C of those 8 bytes | data | uint32 masked CRC32C of data
// where masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 and CRC32C is the Castagnoli CRC.
//
// The protobuf wire encoding is written by hand for the few fields used:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
// TensorBoard's scalars are float32 (simple_value): a value is rounded to float once.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wxtrain::tracking {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) and TFRecord's masked form of it.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

// One record with its framing.
std::string tfrecord(std::string_view data);

// Serialized Event protocol buffers.
std::string file_version_event(double wall_time);  // "brain.Event:2", the first record of a file
std::string scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& values);

// An events.out.tfevents.<seconds>.<host>.<pid>.wxtrain file in `dir`, which TensorBoard
// finds by the name's prefix. Each write is flushed to the OS, so TensorBoard reads the run as it
// goes. A failed write throws WriteError naming the file.
class EventFile {
 public:
  explicit EventFile(const std::string& dir);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  void write(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& values);
  void sync();  // fsync
  const std::string& path() const { return path_; }

 private:
  void write_record(std::string_view event);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace wxtrain::tracking
