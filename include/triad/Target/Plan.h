//===- Plan.h - rt programs to plan files and back ----------------*- C++
//-*-===//
//
// The plan file is the rt dialect in FlatBuffers form (runtime/plan/
// plan.fbs). Export writes it and runs the runtime's own loader checks on
// the result, so a plan the compiler emits is one the runtime accepts;
// import reads a plan back into rt IR (triad-translate --dump).
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_TARGET_PLAN_H
#define TRIAD_TARGET_PLAN_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LLVM.h"

#include <string>

namespace triad {

/// Serializes the rt.plan and rt.program ops of `module`; errors are
/// emitted on the module.
mlir::FailureOr<std::string> exportPlan(mlir::ModuleOp module);

/// Verifies plan bytes and builds the equivalent rt module; errors are
/// emitted at `loc`.
mlir::OwningOpRef<mlir::ModuleOp> importPlan(llvm::StringRef bytes,
                                             llvm::StringRef name,
                                             mlir::MLIRContext *context);

} // namespace triad

#endif // TRIAD_TARGET_PLAN_H
