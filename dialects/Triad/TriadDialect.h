//===- TriadDialect.h - the triad model dialect -------------------*- C++
//-*-===//
//
// Declares the `triad` dialect, its enums and attributes.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_DIALECTS_TRIAD_TRIADDIALECT_H
#define TRIAD_DIALECTS_TRIAD_TRIADDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "dialects/Triad/TriadDialect.h.inc"
#include "dialects/Triad/TriadEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Triad/TriadAttrs.h.inc"

#endif // TRIAD_DIALECTS_TRIAD_TRIADDIALECT_H
