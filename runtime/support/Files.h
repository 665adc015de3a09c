//===- Files.h - durable file writes for the runtime -------------*- C++
//-*-===//

#ifndef TRIAD_RUNTIME_SUPPORT_FILES_H
#define TRIAD_RUNTIME_SUPPORT_FILES_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <string>

namespace triad::rt {

/// Writes `bytes` to `path` through a temporary file in the same folder,
/// fsync and rename: afterwards `path` holds either its old content or all
/// of the new one, even if the process dies in between. It then removes
/// the temporaries of `path` that writers which died mid-write left (a
/// `path.tmp.<pid>` whose process no longer exists on this host).
absl::Status writeFileAtomically(const std::string &path,
                                 absl::string_view bytes);

/// Whether process `pid` no longer exists on this host.
bool processGone(int64_t pid);

/// Reads a whole file.
absl::StatusOr<std::string> readFile(const std::string &path);

} // namespace triad::rt

#endif // TRIAD_RUNTIME_SUPPORT_FILES_H
