//===- Registration.h - registers Triad's dialects and passes ----*- C++
//-*-===//
//
// One place that knows every dialect and pass of the project, for the tools.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_REGISTRATION_H
#define TRIAD_REGISTRATION_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace triad {

/// Adds the project's dialects and the upstream ones it uses (func, arith,
/// tensor) to `registry`.
void registerAllDialects(mlir::DialectRegistry &registry);

/// Registers the project's passes and pass pipelines with the global
/// registry, so that triad-opt accepts their flags.
void registerAllPasses();

} // namespace triad

#endif // TRIAD_REGISTRATION_H
