//===- KernelBytes.h - what rt kernels read and write, in arena bytes -*-===//
//
// The legality checks of the passes that rewrite lowered kernels after the
// memory plan (--triad-fuse-products, --triad-fuse-optimizer): which arena
// bytes a buffer may touch, whether a kernel writes over a value, whether
// bytes a rewrite stops writing are read through another buffer; and the
// functions' layer spans, which index their kernels, kept up to date as
// kernels go.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_PASSES_LOWERING_KERNELBYTES_H
#define TRIAD_PASSES_LOWERING_KERNELBYTES_H

#include "dialects/Rt/RtDialect.h"

#include "mlir/IR/Value.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <map>

namespace triad::rtbytes {

/// The arena bytes a buffer may touch: all of its copies where it is
/// slotted; everything where it is not an rt.buffer (no such IR passes
/// the verifier, but nothing is assumed of it).
struct Range {
  int64_t begin, end;
};

/// Disjoint byte ranges, merged as they are added, asked about in
/// logarithmic time.
class ByteSet {
public:
  /// Whether any byte of `r` is in the set.
  bool overlaps(Range r) const;
  /// Whether every byte of `r` is.
  bool covers(Range r) const;
  void add(Range r);

private:
  std::map<int64_t, int64_t> ranges;
};

/// While one lives, rangeOf remembers the ranges it computes on this
/// thread (buffers do not move; the checks ask about each many times), and
/// bytesUnreadElsewhere each program's exposed reads, computed on its
/// first question about the program: a pass's run holds one, and its
/// rewrites must not change which bytes a function reads before it writes
/// them (the fusions do not: they drop only writes that nothing reads).
class RangeCache {
public:
  RangeCache();
  ~RangeCache();
  RangeCache(const RangeCache &) = delete;
  RangeCache &operator=(const RangeCache &) = delete;

  struct Cached {
    llvm::DenseMap<mlir::Value, Range> ranges;
    llvm::DenseMap<mlir::Operation *, ByteSet> exposed;
  };

private:
  Cached cached;
  Cached *outer;
};

Range rangeOf(mlir::Value value);
/// Whether two values' bytes may meet (a value meets itself).
bool overlaps(mlir::Value a, mlir::Value b);
/// Whether `kernel` writes bytes `value` may hold.
bool writesOver(rt::KernelOp kernel, mlir::Value value);
/// Whether `kernel` reads or writes bytes `value` may hold.
bool touches(rt::KernelOp kernel, mlir::Value value);
/// The kernels strictly between `first` and `last` (one function body,
/// `first` before `last`).
llvm::SmallVector<rt::KernelOp> between(rt::KernelOp first, rt::KernelOp last);
/// Whether `value` is used exactly by `writer` (its only output) and
/// `reader`, nowhere else in the program (not a function's result, not
/// another function's kernel).
bool onlyPassesBetween(mlir::Value value, rt::KernelOp writer,
                       rt::KernelOp reader);
/// Whether nothing reads the bytes `writer` writes as `dropped` other than
/// through `dropped` itself (whose uses the caller knows): no later kernel
/// of the function reads another buffer over those of them that no kernel
/// has written since, nor does the function return one, and no function
/// of the program (the next call of any, its own included) reads any of
/// them before it writes them. A rewrite that no longer writes `dropped`
/// needs it.
bool bytesUnreadElsewhere(mlir::Value dropped, rt::KernelOp writer);
/// The kernel besides `reader` that names `value` as an output (null:
/// none).
rt::KernelOp writerOf(mlir::Value value, rt::KernelOp reader);
/// Erases the buffers of `values` that nothing uses any more (those whose
/// kernels a rewrite removed).
void eraseUnused(llvm::ArrayRef<mlir::Value> values);

/// The layer each kernel of `func` comes from (its index among the
/// function's layer names), for kernels in a layer span.
llvm::DenseMap<mlir::Operation *, int64_t> layersOf(rt::FuncOp func);
/// Sets `func`'s layer spans to the runs of its kernels in each layer of
/// `layers` (layersOf's, kept up to date through the rewrites: a new
/// kernel takes the layer of the one whose place it takes).
void setLayerSpans(rt::FuncOp func,
                   const llvm::DenseMap<mlir::Operation *, int64_t> &layers);

} // namespace triad::rtbytes

#endif // TRIAD_PASSES_LOWERING_KERNELBYTES_H
