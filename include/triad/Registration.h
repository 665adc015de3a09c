//===- Registration.h - registers Triad's dialects and passes ----*- C++
//-*-===//
//
// One place that knows every dialect and pass of the project, for the tools.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_REGISTRATION_H
#define TRIAD_REGISTRATION_H

#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <vector>

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace llvm {
class MemoryBuffer;
} // namespace llvm

namespace triad {

/// Adds the project's dialects and the upstream ones it uses (func, arith,
/// tensor) to `registry`.
void registerAllDialects(mlir::DialectRegistry &registry);

/// Registers the project's passes and pass pipelines with the global
/// registry, so that triad-opt accepts their flags.
void registerAllPasses();

/// The command line `argv` with the tools' defaults in front of the user's
/// flags (a flag the user gives wins): diagnostics name the op and its
/// location but do not print the op itself, which for a whole training step
/// is megabytes of generic IR (`--mlir-print-op-on-diagnostic` turns it back
/// on).
std::vector<char *> withToolDefaults(int argc, char **argv);

/// Hides from --help the command-line options registered so far (LLVM's
/// code generators' and analyses' hundreds, which Triad's tools never use),
/// except help, version and colour: call it before the tool registers its
/// own (MLIR's and Triad's), which stay listed. --help-hidden lists all.
void hideInheritedOptions();

/// Checks and normalizes the options of Triad's passes and pipelines given
/// on a command line (`--triad-NAME=key=value ...`): `_` in a key is read as
/// `-` (as triad-run reads flags), and a key the pass does not have is an
/// error that lists the ones it has and suggests the nearest, printed as
/// "<tool>: error: ..." (false). Rewritten arguments live as long as the
/// process.
bool checkPassOptions(std::vector<char *> &args, llvm::StringRef tool);

/// The deepest nesting of `(`, `[` and `{` in IR text, outside string
/// literals and `//` comments. MLIR's parser recurses per level, so the
/// tools refuse text deeper than kMaxIrNesting before parsing it, with an
/// error instead of a stack overflow.
inline constexpr size_t kMaxIrNesting = 1000;
size_t irNestingDepth(llvm::StringRef text);
/// Whether `input` nests at most kMaxIrNesting deep; otherwise prints
/// "<tool>: error: <input> nests brackets N levels deep, ..." and returns
/// false.
bool checkIrNesting(const llvm::MemoryBuffer &input, llvm::StringRef tool);

} // namespace triad

#endif // TRIAD_REGISTRATION_H
