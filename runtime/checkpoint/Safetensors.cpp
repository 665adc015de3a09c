//===- Safetensors.cpp - the safetensors tensor file format ---------------===//

#include "runtime/checkpoint/Safetensors.h"

#include "runtime/support/Files.h"
#include "runtime/support/JsonDepth.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <nlohmann/json.hpp>

#include <cstring>

namespace triad::rt {

int64_t elementSize(DType dtype) {
  switch (dtype) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::BF16:
  case DType::F16:
    return 2;
  }
  return 0;
}

const char *dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "F32";
  case DType::BF16:
    return "BF16";
  case DType::F16:
    return "F16";
  case DType::I32:
    return "I32";
  }
  return "?";
}

std::optional<DType> parseDType(const std::string &name) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::I32})
    if (name == dtypeName(dtype))
      return dtype;
  return std::nullopt;
}

namespace {
/// Element count of a shape, or nullopt on a negative size or overflow.
std::optional<uint64_t> elements(const std::vector<int64_t> &shape) {
  uint64_t count = 1;
  for (int64_t size : shape) {
    if (size < 0)
      return std::nullopt;
    // At most 2^56 elements: their bytes (up to 8 each) fit in 64 bits.
    if (size != 0 && count > (uint64_t(1) << 56) / static_cast<uint64_t>(size))
      return std::nullopt;
    count *= static_cast<uint64_t>(size);
  }
  return count;
}
} // namespace

std::string tensorChecksum(const char *bytes, uint64_t size) {
  uint64_t hash = 0xCBF29CE484222325ull;
  uint64_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, bytes + i, 8);
    hash = (hash ^ word) * 0x100000001B3ull;
  }
  for (; i < size; ++i)
    hash = (hash ^ static_cast<unsigned char>(bytes[i])) * 0x100000001B3ull;
  return absl::StrFormat("fnv1a64w:%016x", hash);
}

absl::Status
writeSafetensors(const std::string &path,
                 const std::vector<TensorToWrite> &tensors,
                 const std::map<std::string, std::string> &metadata) {
  nlohmann::json header = nlohmann::json::object();
  std::map<std::string, std::string> withChecksums = metadata;
  for (const TensorToWrite &tensor : tensors)
    if (std::optional<uint64_t> count = elements(tensor.shape))
      withChecksums[kChecksumKeyPrefix + tensor.name] = tensorChecksum(
          static_cast<const char *>(tensor.data),
          *count * static_cast<uint64_t>(elementSize(tensor.dtype)));
  header["__metadata__"] = withChecksums;
  uint64_t offset = 0;
  for (const TensorToWrite &tensor : tensors) {
    std::optional<uint64_t> count = elements(tensor.shape);
    if (!count)
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", tensor.name, "' has an invalid shape"));
    uint64_t size = *count * static_cast<uint64_t>(elementSize(tensor.dtype));
    header[tensor.name] = {{"dtype", dtypeName(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string json = header.dump();
  // Pad the header with spaces to an 8-byte boundary, as the format allows.
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string bytes;
  bytes.reserve(8 + json.size() + offset);
  uint64_t headerSize = json.size();
  for (int b = 0; b < 8; ++b)
    bytes.push_back(static_cast<char>((headerSize >> (8 * b)) & 0xFF));
  bytes += json;
  for (const TensorToWrite &tensor : tensors) {
    uint64_t size = *elements(tensor.shape) *
                    static_cast<uint64_t>(elementSize(tensor.dtype));
    bytes.append(static_cast<const char *>(tensor.data), size);
  }
  return writeFileAtomically(path, bytes);
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::open(const std::string &path) {
  absl::StatusOr<std::string> content = readFile(path);
  if (!content.ok())
    return content.status();
  auto invalid = [&](const std::string &what) {
    return absl::DataLossError(
        absl::StrCat("invalid safetensors file '", path, "': ", what));
  };
  if (content->size() < 8)
    return invalid("shorter than its 8-byte header size");
  uint64_t headerSize = 0;
  for (int b = 7; b >= 0; --b)
    headerSize = headerSize << 8 | static_cast<unsigned char>((*content)[b]);
  if (headerSize > content->size() - 8)
    return invalid(absl::StrCat("the header claims ", headerSize,
                                " bytes but the file has ", content->size() - 8,
                                " after the size"));
  if (size_t depth =
          jsonDepth(std::string_view(*content).substr(8, headerSize));
      depth > kMaxJsonDepth)
    return invalid(absl::StrCat("the header nests ", depth,
                                " levels deep, more than ", kMaxJsonDepth));
  nlohmann::json header = nlohmann::json::parse(
      content->begin() + 8, content->begin() + 8 + headerSize, nullptr,
      /*allow_exceptions=*/false);
  try {
    if (header.is_discarded() || !header.is_object())
      return invalid("the header is not a JSON object");

    SafetensorsFile file;
    file.filePath = path;
    file.dataStart = 8 + headerSize;
    uint64_t dataSize = content->size() - file.dataStart;
    for (auto &[name, value] : header.items()) {
      if (name == "__metadata__") {
        if (!value.is_object())
          return invalid("__metadata__ is not an object");
        for (auto &[key, text] : value.items()) {
          if (!text.is_string())
            return invalid(
                absl::StrCat("metadata '", key, "' is not a string"));
          file.meta[key] = text.get<std::string>();
        }
        continue;
      }
      if (!value.is_object() || !value.contains("dtype") ||
          !value.contains("shape") || !value.contains("data_offsets") ||
          !value["dtype"].is_string() || !value["shape"].is_array() ||
          !value["data_offsets"].is_array() ||
          value["data_offsets"].size() != 2)
        return invalid(absl::StrCat("tensor '", name,
                                    "' needs dtype, shape and data_offsets"));
      TensorEntry entry;
      entry.name = name;
      std::optional<DType> dtype =
          parseDType(value["dtype"].get<std::string>());
      if (!dtype)
        return invalid(absl::StrCat("tensor '", name,
                                    "' has unsupported dtype '",
                                    value["dtype"].get<std::string>(), "'"));
      entry.dtype = *dtype;
      for (const auto &size : value["shape"]) {
        if (!size.is_number_integer())
          return invalid(absl::StrCat("tensor '", name, "' has a bad shape"));
        entry.shape.push_back(size.get<int64_t>());
      }
      const auto &offsets = value["data_offsets"];
      if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
        return invalid(
            absl::StrCat("tensor '", name, "' has bad data_offsets"));
      entry.begin = offsets[0].get<uint64_t>();
      entry.end = offsets[1].get<uint64_t>();
      std::optional<uint64_t> count = elements(entry.shape);
      if (!count)
        return invalid(absl::StrCat("tensor '", name, "' has a bad shape"));
      if (entry.begin > entry.end || entry.end > dataSize)
        return invalid(absl::StrCat(
            "tensor '", name, "' lies outside the data (", entry.begin, "..",
            entry.end, " of ", dataSize, " bytes)"));
      if (entry.end - entry.begin !=
          *count * static_cast<uint64_t>(elementSize(entry.dtype)))
        return invalid(absl::StrCat("tensor '", name, "' has ",
                                    entry.end - entry.begin,
                                    " bytes for its shape and dtype's ",
                                    *count * elementSize(entry.dtype)));
      file.tensors.push_back(std::move(entry));
    }
    file.content = std::move(*content);
    // Every tensor whose checksum is recorded must match it.
    for (const TensorEntry &entry : file.tensors) {
      auto it = file.meta.find(kChecksumKeyPrefix + entry.name);
      if (it == file.meta.end())
        continue;
      if (tensorChecksum(file.bytes(entry), entry.end - entry.begin) !=
          it->second)
        return invalid(absl::StrCat("tensor '", entry.name,
                                    "' is corrupt (its data does not match "
                                    "the checksum recorded with it)"));
      ++file.checked;
    }
    return file;
  } catch (const nlohmann::json::exception &error) {
    return invalid(error.what());
  }
}

const TensorEntry *SafetensorsFile::find(const std::string &name) const {
  for (const TensorEntry &entry : tensors)
    if (entry.name == name)
      return &entry;
  return nullptr;
}

} // namespace triad::rt
