//===- CommandLine.h - flags spelled as the usage spells them ----*- C++ -*-===//
//
// The runtime's tools document their flags with dashes (--log-every),
// while Abseil's flag names have underscores: both spellings work.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_SUPPORT_COMMANDLINE_H
#define TRIAD_RUNTIME_SUPPORT_COMMANDLINE_H

#include <string_view>

namespace triad::rt {

/// Rewrites the dashes in the names of `argv`'s --flags (not in their
/// values, nor after a lone "--") to underscores, in place.
inline void underscoreFlagNames(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--")
      break;
    if (arg.size() < 3 || arg.substr(0, 2) != "--")
      continue;
    for (char *c = argv[i] + 2; *c && *c != '='; ++c)
      if (*c == '-')
        *c = '_';
  }
}

} // namespace triad::rt

#endif // TRIAD_RUNTIME_SUPPORT_COMMANDLINE_H
