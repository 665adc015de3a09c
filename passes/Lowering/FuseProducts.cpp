//===- FuseProducts.cpp - adds to a product's result in its matmul --------===//
//
// Rewrites lowered kernels so that a product's result is not stored only
// for the next kernel to add it to something: a weight gradient's product
// is added to its gradient accumulator, and a product to its addend (a
// residual, or the gradient of the same input from another product), by
// the matmul's epilogue. The memory plan is kept: every rewrite is checked
// against the arena bytes of the kernels it crosses (KernelBytes.h).
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "passes/Lowering/KernelBytes.h"
#include "runtime/plan/KernelCodes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

namespace triad {
#define GEN_PASS_DEF_FUSEPRODUCTS
#include "passes/Lowering/Passes.h.inc"
} // namespace triad

using namespace mlir;
using namespace triad;

namespace {

using rt::KernelOp;
using rt::OpCode;
using namespace rtbytes;

/// The matmul that writes `product` for `user` alone to read, earlier in
/// its block, with no epilogue or the bias alone; null where there is none.
KernelOp productOnlyFor(Value product, KernelOp user) {
  KernelOp matmul = writerOf(product, user);
  if (!matmul || matmul.getOpcode() != OpCode::Matmul ||
      matmul.getOutputs().size() != 1 ||
      !onlyPassesBetween(product, matmul, user) ||
      matmul->getBlock() != user->getBlock() || !matmul->isBeforeInBlock(user))
    return nullptr;
  ArrayRef<int64_t> ints = matmul.getInts();
  bool plain = ints.size() == 2 && matmul.getInputs().size() == 2;
  bool biased = ints.size() == 3 &&
                ints[2] == static_cast<int64_t>(plan::EpilogueCode::Bias) &&
                matmul.getInputs().size() == 3;
  return plain || biased ? matmul : nullptr;
}

/// Whether `matmul` can run at `user`'s place instead, without writing
/// `product`: nothing between them writes over its inputs, and nothing
/// reads the product's bytes through another buffer.
bool movable(KernelOp matmul, KernelOp user, Value product) {
  for (KernelOp crossed : between(matmul, user))
    for (Value input : matmul.getInputs())
      if (writesOver(crossed, input))
        return false;
  return bytesUnreadElsewhere(product, matmul);
}

/// One matmul at `user`'s place reading `inputs` into `output`, with
/// `matmul`'s transposes and `epilogue`, in place of both; the product's
/// buffer goes to `freed`.
void replace(KernelOp matmul, KernelOp user, ArrayRef<Value> inputs,
             Value output, plan::EpilogueCode epilogue,
             llvm::DenseMap<Operation *, int64_t> &layers,
             SmallVectorImpl<Value> &freed) {
  OpBuilder builder(user);
  SmallVector<int64_t> ints(matmul.getInts().take_front(2));
  ints.push_back(static_cast<int64_t>(epilogue));
  auto fused = KernelOp::create(
      builder, user.getLoc(), OpCode::Matmul, inputs, ValueRange{output},
      builder.getDenseI64ArrayAttr(ints), builder.getDenseF64ArrayAttr({}));
  if (auto it = layers.find(user.getOperation()); it != layers.end())
    layers[fused.getOperation()] = it->second;
  layers.erase(user.getOperation());
  layers.erase(matmul.getOperation());
  freed.push_back(matmul.getOutputs()[0]);
  user.erase();
  matmul.erase();
}

/// A product (a matmul without an epilogue) that only `accumulate` reads,
/// adding it to its accumulator: one matmul with the accumulating
/// epilogue at the accumulate's place, where the product can move there
/// (movable) and the accumulator shares no bytes with its operands.
unsigned fuseAccumulates(rt::FuncOp func, SmallVectorImpl<Value> &freed) {
  SmallVector<KernelOp> accumulates;
  for (auto kernel : func.getBody().getOps<KernelOp>())
    if (kernel.getOpcode() == OpCode::Accumulate &&
        kernel.getInputs().size() == 3 && kernel.getOutputs().size() == 1 &&
        kernel.getInputs()[0] == kernel.getOutputs()[0])
      accumulates.push_back(kernel);
  if (accumulates.empty())
    return 0;
  llvm::DenseMap<Operation *, int64_t> layers = layersOf(func);
  unsigned fused = 0;
  for (KernelOp accumulate : accumulates) {
    Value acc = accumulate.getInputs()[0], product = accumulate.getInputs()[1],
          weight = accumulate.getInputs()[2];
    KernelOp matmul = productOnlyFor(product, accumulate);
    if (!matmul || matmul.getInts().size() != 2)
      continue;
    Value a = matmul.getInputs()[0], b = matmul.getInputs()[1];
    auto accType = cast<MemRefType>(acc.getType()),
         productType = cast<MemRefType>(product.getType()),
         weightType = cast<MemRefType>(weight.getType());
    Type element = cast<MemRefType>(a.getType()).getElementType();
    if (accType.getShape() != productType.getShape() ||
        cast<MemRefType>(b.getType()).getElementType() != element ||
        (!accType.getElementType().isF32() &&
         accType.getElementType() != element) ||
        weightType.getRank() != 0 || !weightType.getElementType().isF32() ||
        overlaps(acc, a) || overlaps(acc, b) || overlaps(acc, weight))
      continue;
    if (!movable(matmul, accumulate, product))
      continue;
    replace(matmul, accumulate, {a, b, acc, weight}, acc,
            plan::EpilogueCode::Accumulate, layers, freed);
    ++fused;
  }
  if (fused)
    setLayerSpans(func, layers);
  return fused;
}

/// Whether two values are the same bytes: single-copy buffers at one
/// offset, of one size.
bool sameBytes(Value a, Value b) {
  auto x = a.getDefiningOp<rt::BufferOp>(), y = b.getDefiningOp<rt::BufferOp>();
  return x && y && x.getSlotCount() == 1 && y.getSlotCount() == 1 &&
         x.getOffset() == y.getOffset() && x.getBytes() == y.getBytes();
}

/// A product (with its bias or none) that only an `add` adds to a tensor
/// of its shape and type: one matmul with an adding epilogue at the add's
/// place, reading that tensor, where the product can move there (movable),
/// the add's result shares no bytes with the product's operands, and its
/// bytes are the addend's or apart from them. Of an add of two such
/// products, the later one takes the other as its addend.
unsigned fuseAdds(rt::FuncOp func, SmallVectorImpl<Value> &freed) {
  SmallVector<KernelOp> adds;
  for (auto kernel : func.getBody().getOps<KernelOp>())
    if (kernel.getOpcode() == OpCode::Add && kernel.getInputs().size() == 2 &&
        kernel.getOutputs().size() == 1 &&
        kernel.getInputs()[0].getType() == kernel.getOutputs()[0].getType() &&
        kernel.getInputs()[1].getType() == kernel.getOutputs()[0].getType() &&
        kernel.getInputs()[0] != kernel.getInputs()[1])
      adds.push_back(kernel);
  if (adds.empty())
    return 0;
  llvm::DenseMap<Operation *, int64_t> layers = layersOf(func);
  unsigned fused = 0;
  for (KernelOp add : adds) {
    Value sum = add.getOutputs()[0];
    // Each side whose writer is a product, the one that runs last first.
    SmallVector<std::pair<KernelOp, unsigned>, 2> sides;
    for (unsigned side : {0u, 1u})
      if (KernelOp writer = productOnlyFor(add.getInputs()[side], add))
        sides.push_back({writer, side});
    if (sides.size() == 2 && sides[1].first->isBeforeInBlock(sides[0].first))
      std::swap(sides[0], sides[1]);
    auto fusable = [&](KernelOp matmul, Value product, Value addend) {
      // (An addend that is an operand too would read as one value twice:
      // the contract keeps an addend a buffer of its own.)
      return !llvm::is_contained(matmul.getInputs(), addend) &&
             !llvm::any_of(matmul.getInputs(),
                           [&](Value input) { return overlaps(sum, input); }) &&
             (!overlaps(sum, addend) || sameBytes(sum, addend)) &&
             movable(matmul, add, product);
    };
    for (auto [matmul, side] : llvm::reverse(sides)) {
      Value product = add.getInputs()[side], addend = add.getInputs()[1 - side];
      if (!fusable(matmul, product, addend))
        continue;
      bool biased = matmul.getInts().size() == 3;
      SmallVector<Value> inputs(matmul.getInputs());
      inputs.push_back(addend);
      replace(matmul, add, inputs, sum,
              biased ? plan::EpilogueCode::BiasAddend
                     : plan::EpilogueCode::Addend,
              layers, freed);
      ++fused;
      break;
    }
  }
  if (fused)
    setLayerSpans(func, layers);
  return fused;
}

struct FuseProductsPass
    : public triad::impl::FuseProductsBase<FuseProductsPass> {
  using FuseProductsBase::FuseProductsBase;

  void runOnOperation() override {
    SmallVector<rt::FuncOp> funcs;
    getOperation().walk([&](rt::FuncOp func) { funcs.push_back(func); });
    RangeCache cache;
    SmallVector<Value> freed;
    for (rt::FuncOp func : funcs) {
      if (adds)
        numAddsFused += fuseAdds(func, freed);
      if (accumulate)
        numAccumulatesFused += fuseAccumulates(func, freed);
    }
    // The products' buffers, which nothing uses any more.
    eraseUnused(freed);
  }
};

} // namespace
