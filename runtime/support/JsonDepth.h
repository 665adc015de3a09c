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

/// The deepest nesting of the brackets `opens` (closed by the same
/// positions of `closes`) in `text`, outside double-quoted strings and,
/// with `slashComments`, outside `//` comments.
inline size_t nestingDepth(std::string_view text, std::string_view opens,
                           std::string_view closes, bool slashComments) {
  size_t depth = 0, deepest = 0;
  bool inString = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
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
    } else if (slashComments && c == '/' && i + 1 < text.size() &&
               text[i + 1] == '/') {
      size_t end = text.find('\n', i);
      if (end == std::string_view::npos)
        break;
      i = end;
    } else if (opens.find(c) != std::string_view::npos) {
      if (++depth > deepest)
        deepest = depth;
    } else if (closes.find(c) != std::string_view::npos && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

/// The deepest nesting of `[` and `{` in JSON `text`, outside strings.
inline size_t jsonDepth(std::string_view text) {
  return nestingDepth(text, "[{", "]}", /*slashComments=*/false);
}

} // namespace triad

#endif // TRIAD_RUNTIME_SUPPORT_JSONDEPTH_H
