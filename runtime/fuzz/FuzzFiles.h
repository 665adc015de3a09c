//===- FuzzFiles.h - fuzz inputs as files, for loaders that read paths ----===//

#ifndef TRIAD_RUNTIME_FUZZ_FUZZFILES_H
#define TRIAD_RUNTIME_FUZZ_FUZZFILES_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace triad::rt::fuzz {

/// A folder of this process's own under $TMPDIR (or /tmp), made once.
inline const std::string &scratchFolder() {
  static const std::string folder = [] {
    const char *tmp = std::getenv("TMPDIR");
    std::string path = std::string(tmp && *tmp ? tmp : "/tmp") +
                       "/triad-fuzz-" + std::to_string(::getpid());
    ::mkdir(path.c_str(), 0700);
    return path;
  }();
  return folder;
}

/// Writes `size` bytes at `data` to `path` (replacing it); false on error.
inline bool writeBytes(const std::string &path, const uint8_t *data,
                       size_t size) {
  FILE *file = std::fopen(path.c_str(), "wb");
  if (!file)
    return false;
  bool ok = std::fwrite(data, 1, size, file) == size;
  return std::fclose(file) == 0 && ok;
}

} // namespace triad::rt::fuzz

#endif // TRIAD_RUNTIME_FUZZ_FUZZFILES_H
