//===- Passes.h - automatic differentiation ----------------------*- C++
//-*-===//

#ifndef TRIAD_PASSES_AUTODIFF_PASSES_H
#define TRIAD_PASSES_AUTODIFF_PASSES_H

#include "dialects/Triad/TriadDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace triad {

#define GEN_PASS_DECL
#include "passes/Autodiff/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Autodiff/Passes.h.inc"

} // namespace triad

#endif // TRIAD_PASSES_AUTODIFF_PASSES_H
