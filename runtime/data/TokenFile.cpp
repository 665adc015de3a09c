//===- TokenFile.cpp - token corpora and deterministic sampling -----------===//

#include "runtime/data/TokenFile.h"

#include "runtime/init/Init.h"
#include "runtime/init/Philox.h"

#include "absl/strings/str_cat.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace triad::rt {

absl::StatusOr<TokenFile> TokenFile::open(const std::string &path,
                                          TokenWidth width, int64_t vocab) {
  if (vocab <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat("vocabulary size must be positive, got ", vocab));
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return absl::NotFoundError(
        absl::StrCat("cannot open data file '", path, "': ", strerror(errno)));
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("data file '", path, "' is not a regular file"));
  }
  size_t tokenBytes = static_cast<size_t>(width);
  size_t bytes = static_cast<size_t>(info.st_size);
  if (bytes % tokenBytes != 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "data file '", path, "' has ", bytes, " bytes, not a whole number of ",
        tokenBytes, "-byte tokens (wrong token width?)"));
  }
  TokenFile file;
  file.filePath = path;
  file.bytes = bytes;
  file.count = static_cast<int64_t>(bytes / tokenBytes);
  file.width = width;
  if (bytes > 0) {
    void *mapped = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapped == MAP_FAILED) {
      int error = errno;
      ::close(fd);
      return absl::InternalError(
          absl::StrCat("cannot map data file '", path, "': ", strerror(error)));
    }
    file.data = static_cast<const unsigned char *>(mapped);
  }
  ::close(fd);
  for (int64_t i = 0; i < file.count; ++i)
    if (static_cast<int64_t>(file.at(i)) >= vocab)
      return absl::InvalidArgumentError(absl::StrCat(
          "data file '", path, "': token ", i, " has id ", file.at(i),
          ", outside the vocabulary [0, ", vocab, ")"));
  return file;
}

TokenFile::TokenFile(TokenFile &&other) noexcept { *this = std::move(other); }

TokenFile &TokenFile::operator=(TokenFile &&other) noexcept {
  if (this != &other) {
    if (data)
      munmap(const_cast<unsigned char *>(data), bytes);
    filePath = std::move(other.filePath);
    data = other.data;
    bytes = other.bytes;
    count = other.count;
    width = other.width;
    other.data = nullptr;
    other.bytes = 0;
    other.count = 0;
  }
  return *this;
}

TokenFile::~TokenFile() {
  if (data)
    munmap(const_cast<unsigned char *>(data), bytes);
}

uint32_t TokenFile::at(int64_t index) const {
  const unsigned char *p = data + index * static_cast<int64_t>(width);
  if (width == TokenWidth::U16)
    return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8;
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

absl::StatusOr<Sampler> Sampler::create(const TokenFile &file, int64_t seq,
                                        uint64_t seed) {
  if (seq <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat("sequence length must be positive, got ", seq));
  if (file.size() < seq + 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "data file '", file.path(), "' has ", file.size(),
        " tokens, fewer than one training window of seq + 1 = ", seq + 1));
  return Sampler(file, seq, seed);
}

namespace {

/// 64 random bits for global sample `sample` of `step` from the stream
/// `stream` of the run's seed: the same on every mesh.
uint64_t sampleBits(uint64_t seed, std::string_view stream, uint64_t step,
                    uint64_t sample) {
  PhiloxCounter bits = philox4x32(
      {static_cast<uint32_t>(sample), static_cast<uint32_t>(sample >> 32),
       static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32)},
      parameterKey(seed, stream));
  return static_cast<uint64_t>(bits[0]) | static_cast<uint64_t>(bits[1]) << 32;
}

} // namespace

int64_t Sampler::offset(uint64_t step, uint64_t sample) const {
  // Windows start anywhere that leaves room for seq + 1 tokens.
  uint64_t starts = static_cast<uint64_t>(file->size() - sequence);
  return static_cast<int64_t>(sampleBits(seed, "triad.data", step, sample) %
                              starts);
}

int32_t Sampler::prefixLength(uint64_t step, uint64_t sample) const {
  return static_cast<int32_t>(
      sampleBits(seed, "triad.prefix_lengths", step, sample) %
      static_cast<uint64_t>(sequence));
}

void Sampler::fillPrefixes(uint64_t step, uint64_t firstSample, int64_t rows,
                           int32_t *lengths, int32_t *labels,
                           int32_t ignoreIndex) const {
  for (int64_t r = 0; r < rows; ++r) {
    int32_t length = prefixLength(step, firstSample + static_cast<uint64_t>(r));
    lengths[r] = length;
    for (int64_t i = 0; i + 1 < length; ++i)
      labels[r * sequence + i] = ignoreIndex;
  }
}

void Sampler::fill(uint64_t step, uint64_t firstSample, int64_t rows,
                   int32_t *tokens, int32_t *labels) const {
  for (int64_t r = 0; r < rows; ++r) {
    int64_t start = offset(step, firstSample + static_cast<uint64_t>(r));
    for (int64_t s = 0; s < sequence; ++s) {
      tokens[r * sequence + s] = static_cast<int32_t>(file->at(start + s));
      labels[r * sequence + s] = static_cast<int32_t>(file->at(start + s + 1));
    }
  }
}

} // namespace triad::rt
