//===- RtDialect.h - the rt per-rank program dialect --------------*- C++
//-*-===//
//
// Declares the `rt` dialect (L3): per-rank programs that map 1:1 onto the
// plan file.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_DIALECTS_RT_RTDIALECT_H
#define TRIAD_DIALECTS_RT_RTDIALECT_H

#include "dialects/Triad/TriadDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/Rt/RtDialect.h.inc"
#include "dialects/Rt/RtEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Rt/RtAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/Rt/RtOps.h.inc"

namespace triad::rt {

/// Bytes per element of a buffer element type (f32, bf16, f16, i32).
int64_t elementBytes(mlir::Type type);

/// The alignment of every buffer offset in the arena.
constexpr int64_t kBufferAlignment = 64;

/// The most slots of a slotted buffer: the plan loader's limit
/// (runtime/plan/Plan.h; the exporter checks that the two agree).
constexpr int64_t kMaxBufferSlots = 1 << 16;

/// The most slots of `func`'s slotted buffers, 0 when it has none. A call
/// of a function with slotted buffers picks any slot below
/// kMaxBufferSlots (its stage's microbatch in flight), each buffer serving
/// it with its copy slot mod its slots; a call of one without picks 0.
int64_t slotsOf(FuncOp func);

} // namespace triad::rt

#endif // TRIAD_DIALECTS_RT_RTDIALECT_H
