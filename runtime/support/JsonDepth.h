//===- JsonDepth.h - how deeply JSON text nests, without parsing it -*- C++
//-*-===//
//
// JSON parsers recurse once per nesting level, so 50,000 nested `[` in a
// config file overflow the stack. Callers measure the nesting first, in one
// pass that skips strings, and refuse text deeper than kMaxJsonDepth with
// an error. Header-only: the compiler's config reader and the runtime's
// checkpoint reader both use it.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_SUPPORT_JSONDEPTH_H
#define TRIAD_RUNTIME_SUPPORT_JSONDEPTH_H

#include <cstddef>
#include <string_view>

namespace triad {

/// Deeper than any config or checkpoint index Triad reads.
inline constexpr size_t kMaxJsonDepth = 256;

/// The deepest nesting of `[` and `{` in `text`, outside strings.
inline size_t jsonDepth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool inString = false, escaped = false;
  for (char c : text) {
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest)
        deepest = depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

} // namespace triad

#endif // TRIAD_RUNTIME_SUPPORT_JSONDEPTH_H
