//===- Files.cpp - durable file writes for the runtime --------------------===//

#include "runtime/support/Files.h"

#include "absl/strings/str_cat.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace triad::rt {

namespace {
absl::Status writeError(const std::string &path, int error) {
  return absl::DataLossError(
      absl::StrCat("cannot write '", path, "': ", strerror(error)));
}

/// Makes a rename in the folder of `path` durable.
void syncFolder(const std::string &path) {
  size_t slash = path.rfind('/');
  std::string folder = slash == std::string::npos ? "." : path.substr(0, slash);
  int fd =
      ::open(folder.empty() ? "/" : folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

/// Removes what writers of `path` that died mid-write left beside it
/// (`path.tmp.<pid>` of a process that no longer exists on this host).
void removeStaleTemporaries(const std::string &path) {
  size_t slash = path.rfind('/');
  std::string folder = slash == std::string::npos ? "." : path.substr(0, slash);
  std::string prefix =
      (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp.";
  DIR *dir = ::opendir(folder.empty() ? "/" : folder.c_str());
  if (!dir)
    return;
  while (const dirent *entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0)
      continue;
    std::string digits = name.substr(prefix.size());
    if (digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid != ::getpid() && processGone(pid))
      ::unlink((folder + "/" + name).c_str());
  }
  ::closedir(dir);
}
} // namespace

absl::Status writeFileAtomically(const std::string &path,
                                 absl::string_view bytes) {
  std::string temporary = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return writeError(path, errno);
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      int error = errno;
      ::close(fd);
      ::unlink(temporary.c_str());
      return writeError(path, error);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int error = errno;
    ::close(fd);
    ::unlink(temporary.c_str());
    return writeError(path, error);
  }
  if (::close(fd) != 0) {
    int error = errno;
    ::unlink(temporary.c_str());
    return writeError(path, error);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    int error = errno;
    ::unlink(temporary.c_str());
    return writeError(path, error);
  }
  syncFolder(path);
  removeStaleTemporaries(path);
  return absl::OkStatus();
}

bool processGone(int64_t pid) {
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

absl::StatusOr<std::string> readFile(const std::string &path) {
  FILE *file = std::fopen(path.c_str(), "rb");
  if (!file)
    return absl::NotFoundError(
        absl::StrCat("cannot read '", path, "': ", strerror(errno)));
  std::string content;
  char buffer[1 << 16];
  size_t read;
  while ((read = std::fread(buffer, 1, sizeof(buffer), file)) > 0)
    content.append(buffer, read);
  bool error = std::ferror(file);
  std::fclose(file);
  if (error)
    return absl::DataLossError(absl::StrCat("error reading '", path, "'"));
  return content;
}

} // namespace triad::rt
