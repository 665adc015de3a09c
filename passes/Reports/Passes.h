//===- Passes.h - passes that report on the IR -------------------*- C++
//-*-===//

#ifndef TRIAD_PASSES_REPORTS_PASSES_H
#define TRIAD_PASSES_REPORTS_PASSES_H

#include "dialects/Triad/TriadDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace triad {

#define GEN_PASS_DECL
#include "passes/Reports/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Reports/Passes.h.inc"

} // namespace triad

#endif // TRIAD_PASSES_REPORTS_PASSES_H
