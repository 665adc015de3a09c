//===- Passes.h - lowering to per-rank runtime programs ----------*- C++
//-*-===//

#ifndef TRIAD_PASSES_LOWERING_PASSES_H
#define TRIAD_PASSES_LOWERING_PASSES_H

#include "dialects/Dist/DistDialect.h"
#include "dialects/Rt/RtDialect.h"
#include "dialects/Triad/TriadDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace triad {

#define GEN_PASS_DECL
#include "passes/Lowering/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Lowering/Passes.h.inc"

} // namespace triad

#endif // TRIAD_PASSES_LOWERING_PASSES_H
