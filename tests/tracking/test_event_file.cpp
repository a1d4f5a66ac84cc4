// TensorBoard's event file format, byte for byte: CRC32C and its mask against the values
// TensorBoard's own code computes, Event protos against protobuf's serialization of the same
// Event (tensorboard.compat.proto.event_pb2), and a file that holds the records in order.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tracking/tensorboard/event_file.h"

namespace wxtrain::tracking {
namespace {

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) out += std::string{digits[c >> 4], digits[c & 15]};
  return out;
}

TEST(EventFile, Crc32cMatchesTensorBoard) {
  // The CRC-32C check value, and TensorBoard's masked_crc32c(b"123456789").
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(masked_crc32c("123456789"), 0xC78AB0E5u);
  EXPECT_EQ(crc32c(""), 0u);
}

TEST(EventFile, EventsAreTheProtobufBytes) {
  // event_pb2.Event(wall_time=1700000000.25, step=7) with values loss = 0.5, memory/peak_GB = 1.25,
  // and the file-version event, serialized by protobuf.
  EXPECT_EQ(hex(scalars_event(1700000000.25, 7, {{"loss", 0.5}, {"memory/peak_GB", 1.25}})),
            "0900001040fc54d94110072a240a0b0a046c6f7373150000003f0a150a0e6d656d6f72792f7065616b5f4742150000a03f");
  EXPECT_EQ(hex(file_version_event(1700000000.25)), "0900001040fc54d9411a0d627261696e2e4576656e743a32");
}

TEST(EventFile, RecordFraming) {
  const std::string data = "abc";
  const std::string r = tfrecord(data);
  ASSERT_EQ(r.size(), 8u + 4u + 3u + 4u);
  uint64_t length = 0;
  std::memcpy(&length, r.data(), 8);
  EXPECT_EQ(length, 3u);
  uint32_t length_crc = 0, data_crc = 0;
  std::memcpy(&length_crc, r.data() + 8, 4);
  std::memcpy(&data_crc, r.data() + 15, 4);
  EXPECT_EQ(length_crc, masked_crc32c(r.substr(0, 8)));
  EXPECT_EQ(r.substr(12, 3), "abc");
  EXPECT_EQ(data_crc, masked_crc32c("abc"));
}

TEST(EventFile, WritesRecordsAsTheRunGoes) {
  const auto dir = std::filesystem::temp_directory_path() / "wxtrain_event_file_test";
  std::filesystem::remove_all(dir);
  std::string path;
  {
    EventFile file(dir.string());
    path = file.path();
    EXPECT_EQ(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
    file.write(1.5, 1, {{"loss", 2.0}});
    // Flushed already: a reader sees both records before the file is closed.
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    const std::string expected_tail = tfrecord(scalars_event(1.5, 1, {{"loss", 2.0}}));
    ASSERT_EQ(s.str().size(), tfrecord(file_version_event(0)).size() + expected_tail.size());
    EXPECT_EQ(s.str().substr(s.str().size() - expected_tail.size()), expected_tail);
  }
  std::filesystem::remove_all(dir);
}

TEST(EventFile, UnwritableFolderNamesTheFile) {
  try {
    EventFile file("/proc/wxtrain_no_such_dir");
    FAIL() << "expected WriteError";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/wxtrain_no_such_dir"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wxtrain::tracking
