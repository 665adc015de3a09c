//===- FuseOptimizer.cpp - the optimizer step in few kernels --------------===//
//
// Rewrites the kernels of the lowered optimizer step so that the runtime
// launches few of them, with the same arithmetic: a gradient norm's sums
// of squares and the adds that total them become one `sum_squares` over
// every gradient; an `adamw` writes its parameter's 16-bit copy where a
// `cast` of its result did; and runs of `adamw` kernels over independent
// tensors become one kernel over all of them. The memory plan is kept: no
// buffer moves, and every rewrite is checked against the buffers' bytes
// (a value's arena range) of the kernels it crosses.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "passes/Lowering/KernelBytes.h"
#include "runtime/plan/KernelContract.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

namespace triad {
#define GEN_PASS_DEF_FUSEOPTIMIZER
#include "passes/Lowering/Passes.h.inc"
} // namespace triad

using namespace mlir;
using namespace triad;

namespace {

using rt::KernelOp;
using rt::OpCode;
using namespace rtbytes;

//===----------------------------------------------------------------------===//
// The gradient norm: sums of squares and the adds that total them
//===----------------------------------------------------------------------===//

/// One sum_squares kernel over the leaves of a tree of adds.
struct SquaresTree {
  /// The summed tensors, in the order the adds total them.
  SmallVector<Value> tensors;
  /// Every kernel of the tree, the root last.
  SmallVector<KernelOp> kernels;
  /// The leaves' floats (the overflow limit, or none), all alike.
  ArrayRef<double> floats;
};

/// `value`'s part of a tree whose add reads it: a sum_squares of its own,
/// or a smaller tree. False where it is neither.
bool collectSquares(Value value, KernelOp reader, SquaresTree &tree) {
  KernelOp writer = writerOf(value, reader);
  if (!writer || !onlyPassesBetween(value, writer, reader) ||
      writer->getBlock() != reader->getBlock() ||
      !writer->isBeforeInBlock(reader) || !bytesUnreadElsewhere(value, writer))
    return false;
  if (writer.getOpcode() == OpCode::SumSquares) {
    if (!tree.tensors.empty() && writer.getFloats() != tree.floats)
      return false;
    tree.floats = writer.getFloats();
    llvm::append_range(tree.tensors, writer.getInputs());
    tree.kernels.push_back(writer);
    return true;
  }
  if (writer.getOpcode() != OpCode::Add || writer.getInputs().size() != 2)
    return false;
  if (!collectSquares(writer.getInputs()[0], writer, tree) ||
      !collectSquares(writer.getInputs()[1], writer, tree))
    return false;
  tree.kernels.push_back(writer);
  return true;
}

/// Whether an add of two scalars totals sums of squares.
std::optional<SquaresTree> squaresTreeAt(KernelOp add) {
  if (add.getOpcode() != OpCode::Add || add.getInputs().size() != 2 ||
      add.getOutputs().size() != 1 ||
      cast<MemRefType>(add.getOutputs()[0].getType()).getRank() != 0)
    return std::nullopt;
  SquaresTree tree;
  if (!collectSquares(add.getInputs()[0], add, tree) ||
      !collectSquares(add.getInputs()[1], add, tree))
    return std::nullopt;
  tree.kernels.push_back(add);
  // The tensors are read at the root now: no kernel from their sum to the
  // root (the tree's own adds included) may write over them.
  for (KernelOp kernel : tree.kernels)
    if (kernel.getOpcode() == OpCode::SumSquares) {
      SmallVector<KernelOp> crossed = between(kernel, add);
      crossed.push_back(add);
      for (Value tensor : kernel.getInputs())
        for (KernelOp other : crossed)
          if (writesOver(other, tensor))
            return std::nullopt;
    }
  return tree;
}

unsigned fuseSquares(rt::FuncOp func, SmallVectorImpl<Value> &freed) {
  unsigned fused = 0;
  SmallVector<KernelOp> adds;
  for (auto kernel : func.getBody().getOps<KernelOp>())
    if (kernel.getOpcode() == OpCode::Add)
      adds.push_back(kernel);
  llvm::DenseSet<Operation *> erased;
  // Roots first: the last add of a chain sees the whole tree.
  for (KernelOp add : llvm::reverse(adds)) {
    if (erased.contains(add.getOperation()))
      continue;
    std::optional<SquaresTree> tree = squaresTreeAt(add);
    if (!tree)
      continue;
    OpBuilder b(add);
    KernelOp::create(b, add.getLoc(), OpCode::SumSquares, tree->tensors,
                     add.getOutputs(), b.getDenseI64ArrayAttr({}),
                     b.getDenseF64ArrayAttr(tree->floats));
    for (KernelOp kernel : tree->kernels) {
      if (kernel != add)
        freed.push_back(kernel.getOutputs()[0]);
      erased.insert(kernel.getOperation());
      kernel.erase();
    }
    ++fused;
  }
  return fused;
}

//===----------------------------------------------------------------------===//
// AdamW: the rounded parameter, and many tensors in one kernel
//===----------------------------------------------------------------------===//

bool isSixteenBit(Value value) {
  Type element = cast<MemRefType>(value.getType()).getElementType();
  return element.isBF16() || element.isF16();
}

/// The scalars an adamw reads after its tensors: lr, step, coefficient
/// and, where it has one (4 N + 4 inputs), the skip flag.
size_t sharedCount(KernelOp adamw) {
  return adamw.getInputs().size() % 4 == 0 ? 4 : 3;
}

/// One tensor's adamw (param, grad, m, v, lr, step, coefficient[, skip]
/// -> param', m', v').
bool isSingleAdamW(KernelOp kernel) {
  return kernel.getOpcode() == OpCode::AdamW &&
         (kernel.getInputs().size() == 7 || kernel.getInputs().size() == 8) &&
         kernel.getOutputs().size() == 3;
}

/// The function's adamw kernels of one tensor and no skip flag, in order.
SmallVector<KernelOp> flaglessUpdates(rt::FuncOp func) {
  SmallVector<KernelOp> updates;
  for (auto kernel : func.getBody().getOps<KernelOp>())
    if (isSingleAdamW(kernel) && kernel.getInputs().size() == 7)
      updates.push_back(kernel);
  return updates;
}

/// The kernel of `block` after `from` that reads `value` with `match`,
/// where `value` is used by `from` and that kernel only (and by `cast`
/// too where it is given).
KernelOp onlyReader(Value value, KernelOp from, KernelOp cast,
                    llvm::function_ref<bool(KernelOp)> match) {
  KernelOp found;
  for (OpOperand &use : value.getUses()) {
    auto kernel = dyn_cast<KernelOp>(use.getOwner());
    if (!kernel)
      return nullptr;
    if (kernel == from || (cast && kernel == cast))
      continue;
    if (found || !match(kernel) || kernel->getBlock() != from->getBlock() ||
        !from->isBeforeInBlock(kernel))
      return nullptr;
    found = kernel;
  }
  return found;
}

/// f16's loss scaling: an adamw into temporaries that selects keep or not
/// (select(skip, old, new) -> old, for the parameter, its moments and its
/// 16-bit copy, which a cast rounds from the new parameter). It becomes
/// one adamw in place with the skip flag, which writes nothing on a
/// skipped step, and the rounded copy: no temporaries, no selects.
unsigned fuseSkips(rt::FuncOp func, SmallVectorImpl<Value> &freed) {
  unsigned fused = 0;
  for (KernelOp adamw : flaglessUpdates(func)) {
    ValueRange in = adamw.getInputs(), out = adamw.getOutputs();
    Value param = in[0], m = in[2], v = in[3];
    if (llvm::is_contained(in, out[0]) || llvm::is_contained(in, out[1]) ||
        llvm::is_contained(in, out[2]))
      continue;
    // The select that keeps `old` or takes `updated` into `old`.
    Value skip;
    auto keeps = [&](Value old, Value updated) {
      return [&, old, updated](KernelOp k) {
        if (k.getOpcode() != OpCode::Select || k.getInputs().size() != 3 ||
            k.getOutputs().size() != 1 || k.getInputs()[1] != old ||
            k.getInputs()[2] != updated || k.getOutputs()[0] != old)
          return false;
        if (skip && k.getInputs()[0] != skip)
          return false;
        skip = k.getInputs()[0];
        return true;
      };
    };
    // The rounding of the new parameter, if a cast reads it.
    KernelOp cast;
    for (OpOperand &use : out[0].getUses())
      if (auto k = dyn_cast<KernelOp>(use.getOwner());
          k && k.getOpcode() == OpCode::Cast && k.getInputs().size() == 1 &&
          k.getOutputs().size() == 1 && isSixteenBit(k.getOutputs()[0]))
        cast = k;
    KernelOp keepParam = onlyReader(out[0], adamw, cast, keeps(param, out[0]));
    KernelOp keepM = keepParam
                         ? onlyReader(out[1], adamw, nullptr, keeps(m, out[1]))
                         : nullptr;
    KernelOp keepV =
        keepM ? onlyReader(out[2], adamw, nullptr, keeps(v, out[2])) : nullptr;
    if (!keepV)
      continue;
    SmallVector<KernelOp> pattern = {keepParam, keepM, keepV};
    Value copy;
    // Where the 16-bit copy is not selected in place (ZeRO selects it into
    // a piece that is gathered), the cast stays and reads the parameter
    // updated in place: on a skipped step it rounds the old one, which
    // every reader of it, a select on the same flag, drops.
    KernelOp keptCast;
    if (cast) {
      if (cast->getBlock() != adamw->getBlock() ||
          !adamw->isBeforeInBlock(cast))
        continue;
      Value rounded = cast.getOutputs()[0];
      KernelOp keepCopy;
      for (OpOperand &use : rounded.getUses())
        if (auto k = dyn_cast<KernelOp>(use.getOwner());
            k && k != cast && k.getOpcode() == OpCode::Select &&
            k.getInputs().size() == 3 && k.getInputs()[0] == skip &&
            k.getInputs()[2] == rounded && k.getOutputs().size() == 1 &&
            k.getOutputs()[0] == k.getInputs()[1])
          keepCopy = k;
      if (keepCopy && keepCopy->getBlock() == cast->getBlock() &&
          onlyPassesBetween(rounded, cast, keepCopy) &&
          cast->isBeforeInBlock(keepCopy)) {
        copy = keepCopy.getOutputs()[0];
        pattern.append({cast, keepCopy});
      } else {
        bool dropsOnSkip = llvm::all_of(rounded.getUses(), [&](OpOperand &use) {
          auto k = dyn_cast<KernelOp>(use.getOwner());
          if (k == cast)
            return true;
          // A select after the cast, on the flag as the adamw reads it.
          return k && k.getOpcode() == OpCode::Select &&
                 k.getInputs().size() == 3 && k.getInputs()[0] == skip &&
                 k.getInputs()[1] != rounded && k.getInputs()[2] == rounded &&
                 k->getBlock() == cast->getBlock() &&
                 cast->isBeforeInBlock(k) &&
                 llvm::none_of(between(adamw, k), [&](KernelOp crossed) {
                   return writesOver(crossed, skip);
                 });
        });
        bool paramKept = llvm::none_of(between(adamw, cast), [&](KernelOp k) {
          return !llvm::is_contained(pattern, k) && writesOver(k, param);
        });
        // (On a skipped step the cast now writes other bytes: nothing may
        // read them through another buffer.)
        if (!dropsOnSkip || !paramKept || !bytesUnreadElsewhere(rounded, cast))
          continue;
        keptCast = cast;
      }
    }
    // The updates move to the adamw: nothing else from there to the last
    // select touches what they write, or writes the flag.
    KernelOp last = adamw;
    for (KernelOp k : pattern)
      if (last->isBeforeInBlock(k))
        last = k;
    SmallVector<Value> written = {param, m, v};
    if (copy)
      written.push_back(copy);
    bool clear = true;
    for (KernelOp crossed : between(adamw, last)) {
      if (llvm::is_contained(pattern, crossed))
        continue;
      if (writesOver(crossed, skip) || llvm::any_of(written, [&](Value value) {
            return touches(crossed, value);
          }))
        clear = false;
    }
    if (copy)
      for (Value operand : in)
        if (overlaps(operand, copy))
          clear = false;
    // The temporaries are no longer written.
    SmallVector<Value> dropped(out);
    if (cast && !keptCast)
      dropped.push_back(cast.getOutputs()[0]);
    if (!clear || llvm::is_contained(written, skip) ||
        !llvm::all_of(dropped, [&](Value value) {
          bool rounded = cast && !keptCast && value == dropped.back();
          return bytesUnreadElsewhere(value, rounded ? cast : adamw);
        }))
      continue;
    SmallVector<Value> inputs(in);
    inputs.push_back(skip);
    OpBuilder b(adamw);
    KernelOp::create(b, adamw.getLoc(), OpCode::AdamW, inputs, written,
                     adamw.getIntsAttr(), adamw.getFloatsAttr());
    llvm::append_range(freed, dropped);
    if (keptCast)
      keptCast.getInputsMutable()[0].set(param);
    for (KernelOp k : pattern)
      k.erase();
    adamw.erase();
    ++fused;
  }
  return fused;
}

/// The cast that rounds `adamw`'s new parameter to 16 bits, where adamw
/// can write it instead: nothing between them writes over the parameter
/// or touches the rounded copy, which shares no bytes with adamw's
/// operands.
KernelOp roundingCastOf(KernelOp adamw) {
  Value param = adamw.getOutputs()[0];
  for (Operation *op = adamw->getNextNode(); op; op = op->getNextNode()) {
    auto kernel = dyn_cast<KernelOp>(op);
    if (!kernel)
      continue;
    if (kernel.getOpcode() == OpCode::Cast && kernel.getInputs().size() == 1 &&
        kernel.getInputs()[0] == param && kernel.getOutputs().size() == 1 &&
        isSixteenBit(kernel.getOutputs()[0])) {
      Value rounded = kernel.getOutputs()[0];
      for (Value operand : adamw->getOperands())
        if (overlaps(operand, rounded))
          return nullptr;
      for (KernelOp crossed : between(adamw, kernel))
        if (touches(crossed, rounded))
          return nullptr;
      return kernel;
    }
    if (writesOver(kernel, param))
      return nullptr;
  }
  return nullptr;
}

unsigned fuseRounding(rt::FuncOp func) {
  unsigned fused = 0;
  // (Not one with a skip flag: its rounded copy would go unwritten on a
  // skipped step, where the cast ran on every step.)
  for (KernelOp adamw : flaglessUpdates(func)) {
    KernelOp cast = roundingCastOf(adamw);
    if (!cast)
      continue;
    SmallVector<Value> outputs(adamw.getOutputs());
    outputs.push_back(cast.getOutputs()[0]);
    OpBuilder b(adamw);
    KernelOp::create(b, adamw.getLoc(), OpCode::AdamW, adamw.getInputs(),
                     outputs, adamw.getIntsAttr(), adamw.getFloatsAttr());
    adamw.erase();
    cast.erase();
    ++fused;
  }
  return fused;
}

/// One tensor of an adamw kernel over many.
struct AdamWTensor {
  SmallVector<Value> inputs;  // param, grad, m, v
  SmallVector<Value> outputs; // param', m', v'[, rounded]
  double weightDecay;
};

/// Whether an adamw kernel writes over the lr, step or coefficient it
/// reads (no compiled plan does; one that did could not share them).
bool writesShared(KernelOp kernel) {
  for (Value shared : kernel.getInputs().take_back(sharedCount(kernel)))
    if (writesOver(kernel, shared))
      return true;
  return false;
}

/// What adamw kernels must share to run as one: lr, step and coefficient,
/// the betas and epsilon, whether they round their parameters.
bool sameStep(KernelOp a, KernelOp b) {
  auto shared = [](KernelOp k) {
    return k.getInputs().take_back(sharedCount(k));
  };
  ArrayRef<double> fa = a.getFloats(), fb = b.getFloats();
  return llvm::equal(shared(a), shared(b)) &&
         fa.take_front(3) == fb.take_front(3) &&
         a.getOutputs().size() == b.getOutputs().size();
}

unsigned groupUpdates(rt::FuncOp func, unsigned &tensorsGrouped) {
  unsigned groups = 0;
  SmallVector<SmallVector<KernelOp>> runs;
  for (auto kernel : func.getBody().getOps<KernelOp>()) {
    bool single = kernel.getOpcode() == OpCode::AdamW &&
                  kernel.getInputs().size() <= 8 && !writesShared(kernel);
    auto *previous = kernel->getPrevNode();
    bool follows = !runs.empty() && previous &&
                   previous == runs.back().back().getOperation();
    if (!single)
      continue;
    if (follows && sameStep(runs.back().front(), kernel)) {
      runs.back().push_back(kernel);
      continue;
    }
    runs.push_back({kernel});
  }
  for (ArrayRef<KernelOp> run : runs) {
    // Split where a tensor is not independent of the group before it (a
    // GPU updates a group's tensors side by side): where its results share
    // bytes with anything the group reads or writes, or the group's
    // results with anything it reads or writes.
    SmallVector<SmallVector<std::pair<KernelOp, AdamWTensor>>> parts(1);
    ByteSet touched, written;
    for (KernelOp kernel : run) {
      AdamWTensor tensor{SmallVector<Value>(kernel.getInputs().take_front(4)),
                         SmallVector<Value>(kernel.getOutputs()),
                         kernel.getFloats()[3]};
      SmallVector<Range> reads, writes;
      for (Value in : tensor.inputs)
        reads.push_back(rangeOf(in));
      for (Value out : tensor.outputs)
        writes.push_back(rangeOf(out));
      auto any = [](ArrayRef<Range> of, const ByteSet &set) {
        return llvm::any_of(of, [&](Range r) { return set.overlaps(r); });
      };
      if (any(writes, touched) || any(reads, written) || any(writes, written)) {
        parts.emplace_back();
        touched = ByteSet();
        written = ByteSet();
      }
      for (Range r : reads)
        touched.add(r);
      for (Range r : writes) {
        touched.add(r);
        written.add(r);
      }
      parts.back().push_back({kernel, std::move(tensor)});
    }
    for (auto &part : parts) {
      if (part.size() < 2)
        continue;
      KernelOp first = part.front().first;
      SmallVector<Value> inputs, outputs;
      SmallVector<double> floats(first.getFloats().take_front(3));
      for (auto &[kernel, tensor] : part) {
        llvm::append_range(inputs, tensor.inputs);
        llvm::append_range(outputs, tensor.outputs);
        floats.push_back(tensor.weightDecay);
      }
      llvm::append_range(inputs,
                         first.getInputs().take_back(sharedCount(first)));
      OpBuilder b(first);
      KernelOp::create(b, first.getLoc(), OpCode::AdamW, inputs, outputs,
                       b.getDenseI64ArrayAttr({}),
                       b.getDenseF64ArrayAttr(floats));
      for (auto &member : part)
        member.first.erase();
      ++groups;
      tensorsGrouped += part.size();
    }
  }
  return groups;
}

struct FuseOptimizerPass
    : public triad::impl::FuseOptimizerBase<FuseOptimizerPass> {
  using FuseOptimizerBase::FuseOptimizerBase;

  void runOnOperation() override {
    SmallVector<rt::FuncOp> funcs;
    getOperation().walk([&](rt::FuncOp func) {
      // The forward and backward (functions with layer spans, which index
      // their kernels) are left as they are.
      if (!func.getLayerSpans())
        funcs.push_back(func);
    });
    RangeCache cache;
    SmallVector<Value> freed;
    for (rt::FuncOp func : funcs) {
      numSquaresFused += fuseSquares(func, freed);
      numSkipsFused += fuseSkips(func, freed);
      numRoundingFused += fuseRounding(func);
      unsigned tensors = 0;
      numUpdateGroups += groupUpdates(func, tensors);
      numTensorsGrouped += tensors;
    }
    // The partial sums' buffers, which nothing uses any more.
    eraseUnused(freed);
  }
};

} // namespace
