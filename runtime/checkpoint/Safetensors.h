//===- Safetensors.h - the safetensors tensor file format --------*- C++
//-*-===//
//
// A safetensors file is an 8-byte little-endian header size, a JSON header
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {string: string}}) and the tensors' bytes. Reading validates the header
// completely (sizes, offsets, dtypes) before any tensor is used, so a
// truncated or hand-edited file is an error, never an out-of-bounds read.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_CHECKPOINT_SAFETENSORS_H
#define TRIAD_RUNTIME_CHECKPOINT_SAFETENSORS_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace triad::rt {

enum class DType { F32, BF16, F16, I32 };

/// Bytes per element.
int64_t elementSize(DType dtype);
/// The safetensors spelling ("F32", "BF16", "F16", "I32").
const char *dtypeName(DType dtype);
std::optional<DType> parseDType(const std::string &name);

struct TensorEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  /// Byte range within the data section.
  uint64_t begin = 0, end = 0;
};

/// The checksum of a tensor's bytes that writeSafetensors records in the
/// metadata (key kChecksumKeyPrefix + name, value "fnv1a64w:" and 16 hex
/// digits: FNV-1a over little-endian 8-byte words, then the tail bytes).
inline constexpr const char *kChecksumKeyPrefix = "checksum:";
std::string tensorChecksum(const char *bytes, uint64_t size);

/// Writes tensors (bytes given in row-major order) and string metadata to
/// `path`, atomically, with each tensor's checksum in the metadata.
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void *data;
};
absl::Status
writeSafetensors(const std::string &path,
                 const std::vector<TensorToWrite> &tensors,
                 const std::map<std::string, std::string> &metadata);

class SafetensorsFile {
public:
  /// Reads and validates the whole file: the header, and every tensor
  /// whose checksum the metadata records against its bytes.
  static absl::StatusOr<SafetensorsFile> open(const std::string &path);
  /// Whether every tensor had a checksum to check (files Triad wrote).
  bool everyTensorChecked() const { return checked == tensors.size(); }

  const std::vector<TensorEntry> &entries() const { return tensors; }
  const std::map<std::string, std::string> &metadata() const { return meta; }
  const TensorEntry *find(const std::string &name) const;
  /// The bytes of an entry of this file.
  const char *bytes(const TensorEntry &entry) const {
    return content.data() + dataStart + entry.begin;
  }
  const std::string &path() const { return filePath; }

private:
  std::string filePath;
  std::string content;
  size_t dataStart = 0;
  std::vector<TensorEntry> tensors;
  std::map<std::string, std::string> meta;
  size_t checked = 0;
};

} // namespace triad::rt

#endif // TRIAD_RUNTIME_CHECKPOINT_SAFETENSORS_H
