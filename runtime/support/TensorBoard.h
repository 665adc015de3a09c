//===- TensorBoard.h - scalar summaries TensorBoard reads --------*- C++
//-*-===//
//
// Writes TensorBoard's event files without TensorFlow: a file of TFRecord
// frames (length, masked CRC-32C of the length, an Event protocol buffer,
// masked CRC-32C of the data), the first Event naming the file version, the
// others holding one step's scalar summaries. Only the few protobuf fields
// scalars need are encoded (Event.wall_time, step, file_version, summary;
// Summary.value; Value.tag, simple_value).
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_SUPPORT_TENSORBOARD_H
#define TRIAD_RUNTIME_SUPPORT_TENSORBOARD_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace triad::rt {

/// CRC-32C (Castagnoli) of `size` bytes, as TFRecord frames carry it.
uint32_t crc32c(const void *data, size_t size);

/// TFRecord's masked CRC: rotated and offset so that a CRC of CRCs does not
/// look like data.
inline uint32_t maskedCrc32c(const void *data, size_t size) {
  uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

class TensorBoardWriter {
public:
  /// Creates folder `dir` if needed and a new event file in it
  /// (events.out.tfevents.<seconds>.<host>.<pid>.triad), starting with the
  /// file-version event.
  static absl::StatusOr<TensorBoardWriter> open(const std::string &dir);

  /// One event at `step` with the scalars (tag, value); flushed, so that a
  /// running TensorBoard shows it.
  absl::Status
  write(int64_t step,
        const std::vector<std::pair<std::string, double>> &scalars);

  const std::string &path() const { return filePath; }

private:
  absl::Status frame(const std::string &record);

  struct Closer {
    void operator()(std::FILE *file) const { std::fclose(file); }
  };
  std::unique_ptr<std::FILE, Closer> file;
  std::string filePath;
};

} // namespace triad::rt

#endif // TRIAD_RUNTIME_SUPPORT_TENSORBOARD_H
