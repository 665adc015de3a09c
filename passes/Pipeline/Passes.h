//===- Passes.h - pipeline-parallel passes ----------------------*- C++ -*-===//

#ifndef TRIAD_PASSES_PIPELINE_PASSES_H
#define TRIAD_PASSES_PIPELINE_PASSES_H

#include "dialects/Dist/DistDialect.h"
#include "dialects/Pipe/PipeDialect.h"
#include "dialects/Triad/TriadDialect.h"
#include "runtime/schedule/Schedule.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace triad {

#define GEN_PASS_DECL
#include "passes/Pipeline/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Pipeline/Passes.h.inc"

} // namespace triad

#endif // TRIAD_PASSES_PIPELINE_PASSES_H
