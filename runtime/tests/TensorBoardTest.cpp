//===- TensorBoardTest.cpp - TensorBoard event files ----------------------===//

#include "runtime/support/TensorBoard.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>

namespace triad::rt {
namespace {

TEST(TensorBoard, Crc32cMatchesTheStandardCheckValue) {
  // The check value of CRC-32C (RFC 3720, appendix B.4).
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(TensorBoard, WritesFramedEventsWhoseChecksumsHold) {
  char pattern[] = "/tmp/triad-tensorboard-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  std::string path;
  {
    absl::StatusOr<TensorBoardWriter> writer = TensorBoardWriter::open(pattern);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE(writer->write(3, {{"loss", 2.5}, {"lr", 1e-3}}).ok());
    path = writer->path();
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  // Two frames (the file version, then the scalars), each: length, masked
  // CRC of the length, the record, masked CRC of the record.
  size_t at = 0;
  int frames = 0;
  while (at < bytes.size()) {
    ASSERT_LE(at + 12, bytes.size());
    uint64_t length;
    uint32_t lengthCrc, dataCrc;
    std::memcpy(&length, bytes.data() + at, 8);
    std::memcpy(&lengthCrc, bytes.data() + at + 8, 4);
    EXPECT_EQ(lengthCrc, maskedCrc32c(bytes.data() + at, 8));
    ASSERT_LE(at + 12 + length + 4, bytes.size());
    std::memcpy(&dataCrc, bytes.data() + at + 12 + length, 4);
    EXPECT_EQ(dataCrc, maskedCrc32c(bytes.data() + at + 12, length));
    std::string record = bytes.substr(at + 12, length);
    if (frames == 0)
      EXPECT_NE(record.find("brain.Event:2"), std::string::npos);
    else
      EXPECT_NE(record.find("loss"), std::string::npos);
    at += 12 + length + 4;
    ++frames;
  }
  EXPECT_EQ(frames, 2);
  std::remove(path.c_str());
  rmdir(pattern);
}

TEST(TensorBoard, SaysWhyItCannotCreateTheFolder) {
  absl::StatusOr<TensorBoardWriter> writer =
      TensorBoardWriter::open("/proc/no/such");
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(std::string(writer.status().message())
                .find("cannot create folder '/proc/no/such'"),
            std::string::npos);
}

} // namespace
} // namespace triad::rt
