//===- TensorBoard.cpp - scalar summaries TensorBoard reads ---------------===//

#include "runtime/support/TensorBoard.h"

#include "absl/strings/str_cat.h"

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

namespace triad::rt {

namespace {

std::array<uint32_t, 256> crcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc >> 1) ^ (crc & 1 ? 0x82f63b78u : 0u);
    table[i] = crc;
  }
  return table;
}

/// Protocol-buffer encoding of the few fields an Event needs.
void varint(std::string &out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}
void key(std::string &out, uint32_t field, uint32_t wireType) {
  varint(out, (static_cast<uint64_t>(field) << 3) | wireType);
}
void bytesField(std::string &out, uint32_t field, const std::string &bytes) {
  key(out, field, 2);
  varint(out, bytes.size());
  out += bytes;
}
template <typename T> void fixedField(std::string &out, uint32_t field, T v) {
  key(out, field, sizeof(T) == 8 ? 1 : 5);
  char raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof(T)); // little-endian hosts only (x86, arm64)
  out.append(raw, sizeof(T));
}

double unixSeconds() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// Event { double wall_time = 1; int64 step = 2; oneof { string
/// file_version = 3; Summary summary = 5; } }
std::string event(int64_t step, const std::string *fileVersion,
                  const std::string *summary) {
  std::string out;
  fixedField(out, 1, unixSeconds());
  key(out, 2, 0);
  varint(out, static_cast<uint64_t>(step));
  if (fileVersion)
    bytesField(out, 3, *fileVersion);
  if (summary)
    bytesField(out, 5, *summary);
  return out;
}

} // namespace

uint32_t crc32c(const void *data, size_t size) {
  static const std::array<uint32_t, 256> table = crcTable();
  const auto *bytes = static_cast<const unsigned char *>(data);
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i)
    crc = table[(crc ^ bytes[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

absl::StatusOr<TensorBoardWriter>
TensorBoardWriter::open(const std::string &dir) {
  if (dir.empty())
    return absl::InvalidArgumentError("no folder for the event file");
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create folder '", dir, "': ", std::strerror(errno)));
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  TensorBoardWriter writer;
  writer.filePath = absl::StrCat(dir, "/events.out.tfevents.",
                                 static_cast<int64_t>(unixSeconds()), ".", host,
                                 ".", getpid(), ".triad");
  writer.file.reset(std::fopen(writer.filePath.c_str(), "wb"));
  if (!writer.file)
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create '", writer.filePath, "': ", std::strerror(errno)));
  std::string version = "brain.Event:2";
  if (absl::Status status = writer.frame(event(0, &version, nullptr));
      !status.ok())
    return status;
  return writer;
}

absl::Status TensorBoardWriter::write(
    int64_t step, const std::vector<std::pair<std::string, double>> &scalars) {
  // Summary { repeated Value value = 1; }, Value { string tag = 1; float
  // simple_value = 2; }
  std::string summary;
  for (const auto &[tag, value] : scalars) {
    std::string entry;
    bytesField(entry, 1, tag);
    fixedField(entry, 2, static_cast<float>(value));
    bytesField(summary, 1, entry);
  }
  return frame(event(step, nullptr, &summary));
}

absl::Status TensorBoardWriter::frame(const std::string &record) {
  uint64_t length = record.size();
  char header[12];
  std::memcpy(header, &length, 8);
  uint32_t lengthCrc = maskedCrc32c(header, 8);
  std::memcpy(header + 8, &lengthCrc, 4);
  uint32_t dataCrc = maskedCrc32c(record.data(), record.size());
  if (std::fwrite(header, 1, 12, file.get()) != 12 ||
      std::fwrite(record.data(), 1, record.size(), file.get()) !=
          record.size() ||
      std::fwrite(&dataCrc, 1, 4, file.get()) != 4 ||
      std::fflush(file.get()) != 0)
    return absl::DataLossError(
        absl::StrCat("cannot write '", filePath, "': ", std::strerror(errno)));
  return absl::OkStatus();
}

} // namespace triad::rt
