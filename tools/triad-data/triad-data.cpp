//===- triad-data.cpp - turns text into a byte-level token corpus ---------===//
//
// triad-data --output FILE [--width u16|u32] TEXT...
//
// Concatenates the given text files and writes one token per byte (ids
// 0..255, a vocabulary of 256) as little-endian uint16 (or uint32), the flat
// layout triad-run reads. The output is written atomically: a temporary file
// in the same folder, fsync, rename. Bad input is one line on stderr and exit
// status 1.
//
//===----------------------------------------------------------------------===//

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

ABSL_FLAG(std::string, output, "", "Token file to write (required)");
ABSL_FLAG(std::string, width, "u16", "Token width: u16 or u32");

namespace {

[[noreturn]] void fail(const std::string &message) {
  std::fprintf(stderr, "triad-data: error: %s\n", message.c_str());
  std::exit(1);
}

absl::Status readFile(const std::string &path, std::string &text) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0)
    return absl::NotFoundError(
        absl::StrCat("cannot read '", path, "': ", strerror(errno)));
  if (!S_ISREG(info.st_mode))
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a regular file"));
  FILE *file = std::fopen(path.c_str(), "rb");
  if (!file)
    return absl::NotFoundError(
        absl::StrCat("cannot read '", path, "': ", strerror(errno)));
  char buffer[1 << 16];
  size_t read;
  while ((read = std::fread(buffer, 1, sizeof(buffer), file)) > 0)
    text.append(buffer, read);
  bool error = std::ferror(file);
  std::fclose(file);
  if (error)
    return absl::DataLossError(absl::StrCat("error reading '", path, "'"));
  return absl::OkStatus();
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a
/// crash leaves either the old file or the complete new one.
absl::Status writeAtomically(const std::string &path,
                             const std::vector<unsigned char> &bytes) {
  std::string temporary = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write '", path, "': ", strerror(errno)));
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      int error = errno;
      ::close(fd);
      ::unlink(temporary.c_str());
      return absl::DataLossError(
          absl::StrCat("cannot write '", path, "': ", strerror(error)));
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int error = errno;
    ::unlink(temporary.c_str());
    return absl::DataLossError(
        absl::StrCat("cannot write '", path, "': ", strerror(error)));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    int error = errno;
    ::unlink(temporary.c_str());
    return absl::DataLossError(
        absl::StrCat("cannot write '", path, "': ", strerror(error)));
  }
  return absl::OkStatus();
}

} // namespace

int main(int argc, char **argv) {
  absl::SetProgramUsageMessage(
      "turns text files into a byte-level token corpus (vocabulary 256)\n\n"
      "  triad-data --output corpus.bin notes.txt more.txt\n");
  std::vector<char *> positional = absl::ParseCommandLine(argc, argv);
  std::string output = absl::GetFlag(FLAGS_output);
  std::string width = absl::GetFlag(FLAGS_width);
  if (output.empty())
    fail("give --output FILE");
  if (width != "u16" && width != "u32")
    fail(absl::StrCat("unknown --width '", width, "' (expected u16 or u32)"));
  if (positional.size() < 2)
    fail("give at least one text file to read");

  std::string text;
  for (size_t i = 1; i < positional.size(); ++i)
    if (absl::Status status = readFile(positional[i], text); !status.ok())
      fail(std::string(status.message()));
  if (text.empty())
    fail("the input files are empty");

  int tokenBytes = width == "u16" ? 2 : 4;
  std::vector<unsigned char> bytes;
  bytes.reserve(text.size() * tokenBytes);
  for (unsigned char c : text) {
    bytes.push_back(c);
    for (int b = 1; b < tokenBytes; ++b)
      bytes.push_back(0);
  }
  if (absl::Status status = writeAtomically(output, bytes); !status.ok())
    fail(std::string(status.message()));
  std::printf("triad-data: wrote %zu byte-level tokens (vocabulary 256, %s) "
              "from %zu file(s) to %s\n",
              text.size(), width.c_str(), positional.size() - 1,
              output.c_str());
  return 0;
}
