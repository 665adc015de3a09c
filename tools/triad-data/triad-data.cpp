//===- triad-data.cpp - turns text into a byte-level token corpus ---------===//
//
// triad-data --output FILE [--width u16|u32] TEXT...
//
// Concatenates the given text files and writes one token per byte (ids
// 0..255, a vocabulary of 256) as little-endian uint16 (or uint32), the flat
// layout triad-run reads. The output is written atomically (a temporary file
// in the same folder, fsync, rename). Bad input is one line on stderr and exit
// status 1.
//
//===----------------------------------------------------------------------===//

#include "runtime/support/Files.h"

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <vector>

ABSL_FLAG(std::string, output, "", "Token file to write (required)");
ABSL_FLAG(std::string, width, "u16", "Token width: u16 or u32");

namespace {

[[noreturn]] void fail(const std::string &message) {
  std::fprintf(stderr, "triad-data: error: %s\n", message.c_str());
  std::exit(1);
}

/// Appends the bytes of the regular file `path` to `text`.
absl::Status appendFile(const std::string &path, std::string &text) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0)
    return absl::NotFoundError(
        absl::StrCat("cannot read '", path, "': ", strerror(errno)));
  if (!S_ISREG(info.st_mode))
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a regular file"));
  absl::StatusOr<std::string> content = triad::rt::readFile(path);
  if (!content.ok())
    return content.status();
  text += *content;
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
    if (absl::Status status = appendFile(positional[i], text); !status.ok())
      fail(std::string(status.message()));
  if (text.empty())
    fail("the input files are empty");

  int tokenBytes = width == "u16" ? 2 : 4;
  std::string bytes;
  bytes.reserve(text.size() * tokenBytes);
  for (char c : text) {
    bytes.push_back(c);
    bytes.append(tokenBytes - 1, '\0');
  }
  if (absl::Status status = triad::rt::writeFileAtomically(output, bytes);
      !status.ok())
    fail(std::string(status.message()));
  std::printf("triad-data: wrote %zu byte-level tokens (vocabulary 256, %s) "
              "from %zu file(s) to %s\n",
              text.size(), width.c_str(), positional.size() - 1,
              output.c_str());
  return 0;
}
