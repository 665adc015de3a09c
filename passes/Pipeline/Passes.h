//===- Passes.h - pipeline-parallel passes ----------------------*- C++ -*-===//

#ifndef TRIAD_PASSES_PIPELINE_PASSES_H
#define TRIAD_PASSES_PIPELINE_PASSES_H

#include "dialects/Dist/DistDialect.h"
#include "dialects/Triad/TriadDialect.h"
#include "runtime/schedule/Schedule.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace triad {

#define GEN_PASS_DECL
#include "passes/Pipeline/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Pipeline/Passes.h.inc"

namespace pipeline {

/// Attribute names of the pipeline passes.
inline constexpr llvm::StringLiteral kStageAttr = "pipe.stage";
inline constexpr llvm::StringLiteral kTiedAttr = "pipe.tied";
inline constexpr llvm::StringLiteral kStagesAttr = "pipe.stages";
inline constexpr llvm::StringLiteral kCostsAttr = "pipe.costs";
inline constexpr llvm::StringLiteral kScheduleAttr = "pipe.schedule";

/// The schedule recorded on `module` (`pipe.schedule`), read back and
/// verified; errors at the module say what is wrong.
mlir::FailureOr<schedule::Schedule> readSchedule(mlir::ModuleOp module);

} // namespace pipeline
} // namespace triad

#endif // TRIAD_PASSES_PIPELINE_PASSES_H
