//===- PadVocab.cpp - the vocabulary padded to a multiple of tp -----------===//
//
// Where tp (times `multiple`) does not divide the vocabulary of a cross
// entropy, the parameters that give the logits their vocabulary dimension
// (and the embedding tables of that vocabulary) grow to the next multiple
// of it, the ops between them and the loss take the padded shapes, and the
// loss gets `classes`: the padded columns never reach it. Runs on the
// forward model, before autodiff, so that the gradients and the optimizer
// state are padded alike.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"

#include "dialects/Triad/TriadOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/MathExtras.h"

namespace triad {
#define GEN_PASS_DEF_PADVOCAB
#include "passes/Sharding/Passes.h.inc"
} // namespace triad

using namespace mlir;
using namespace triad;

namespace {

/// What padding one vocabulary changes: the parameters (each with the
/// dimension that is the vocabulary) and the ops from their reads to the
/// loss, whose result types follow.
struct VocabPadding {
  llvm::MapVector<StringRef, int64_t> params;
  llvm::SetVector<Operation *> chain;
};

/// The dimension of `get`'s parameter that a use of the read takes as the
/// vocabulary: the rows of an embedding table.
std::optional<int64_t> tableDimension(OpOperand &use) {
  auto embedding = dyn_cast<EmbeddingOp>(use.getOwner());
  if (embedding && use.get() == embedding.getTable())
    return 0;
  return std::nullopt;
}

class VocabTracer {
public:
  explicit VocabTracer(ModuleOp module) : module(module) {
    module.walk([&](GetParamOp get) { reads[get.getName()].push_back(get); });
  }

  /// Whether parameter `name` is read, and every read outside `chain` is
  /// used only as an embedding table whose rows are dimension `dim`.
  bool readAsTables(StringRef name, int64_t dim,
                    const llvm::SetVector<Operation *> &chain) const {
    auto it = reads.find(name);
    if (it == reads.end())
      return false;
    for (GetParamOp get : it->second)
      if (!chain.contains(get))
        for (OpOperand &use : get.getResult().getUses())
          if (tableDimension(use) != dim)
            return false;
    return true;
  }

  /// Finds, from `value` back to the parameters, what gives dimension
  /// `dim` of `value` its size; failure when anything but a parameter read,
  /// a matmul, a bias_add or an op whose operands and result share a type
  /// lies on the way.
  LogicalResult trace(Value value, int64_t dim, VocabPadding &padding) {
    Operation *def = value.getDefiningOp();
    if (!def)
      return failure();
    if (auto get = dyn_cast<GetParamOp>(def)) {
      if (!module.lookupSymbol<ParamOp>(get.getNameAttr()))
        return failure();
      auto [it, inserted] = padding.params.insert({get.getName(), dim});
      if (!inserted && it->second != dim)
        return failure();
      padding.chain.insert(get);
      return success();
    }
    padding.chain.insert(def);
    if (auto matmul = dyn_cast<MatmulOp>(def)) {
      int64_t rank = matmul.getType().getRank();
      auto lhs = cast<RankedTensorType>(matmul.getLhs().getType());
      auto rhs = cast<RankedTensorType>(matmul.getRhs().getType());
      if (dim == rank - 1)
        return trace(matmul.getRhs(),
                     rhs.getRank() - (matmul.getTransposeRhs() ? 2 : 1),
                     padding);
      if (dim == rank - 2)
        return trace(matmul.getLhs(),
                     lhs.getRank() - (matmul.getTransposeLhs() ? 1 : 2),
                     padding);
      return failure();
    }
    if (auto bias = dyn_cast<BiasAddOp>(def)) {
      if (dim != bias.getType().getRank() - 1)
        return failure();
      return success(succeeded(trace(bias.getX(), dim, padding)) &&
                     succeeded(trace(bias.getBias(), 0, padding)));
    }
    if (def->hasTrait<OpTrait::SameOperandsAndResultType>()) {
      for (Value operand : def->getOperands())
        if (failed(trace(operand, dim, padding)))
          return failure();
      return success();
    }
    return failure();
  }

  /// Whether every read of the padded parameters and every value on the
  /// way to `loss` is used only on that way, or (a parameter read) as an
  /// embedding table padded along its rows.
  bool onlyUsedOnTheWay(const VocabPadding &padding, Operation *loss) {
    auto allowed = [&](OpOperand &use, Operation *from) {
      Operation *user = use.getOwner();
      if (user == loss || padding.chain.contains(user))
        return true;
      auto get = dyn_cast<GetParamOp>(from);
      return get && tableDimension(use) == padding.params.lookup(get.getName());
    };
    for (Operation *op : padding.chain)
      for (Value result : op->getResults())
        for (OpOperand &use : result.getUses())
          if (!allowed(use, op))
            return false;
    // Reads of the parameters elsewhere (the embedding layer's).
    return llvm::all_of(padding.params, [&](auto &entry) {
      return readAsTables(entry.first, entry.second, padding.chain);
    });
  }

private:
  ModuleOp module;
  /// Every parameter's reads.
  llvm::StringMap<SmallVector<GetParamOp>> reads;
};

struct PadVocabPass : public triad::impl::PadVocabBase<PadVocabPass> {
  using PadVocabBase::PadVocabBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (tp < 1) {
      emitError(module.getLoc(), "tp=") << tp.getValue() << " must be >= 1";
      return signalPassFailure();
    }
    if (multiple < 1 || multiple > 65536) {
      emitError(module.getLoc(), "multiple=")
          << multiple.getValue() << " must be between 1 and 65536";
      return signalPassFailure();
    }
    if (!module.getOps<StateOp>().empty()) {
      emitError(module.getLoc(),
                "the vocabulary is padded on the forward model, before "
                "--triad-autodiff declares the training state");
      return signalPassFailure();
    }
    // A loss's vocabulary grows to a multiple of `lossMultiple`, a table
    // only looked up to a multiple of tp.
    int64_t lossMultiple = tp * multiple;
    if (lossMultiple == 1)
      return;

    // Every loss whose vocabulary lossMultiple does not divide, and what
    // padding it changes (found on the unpadded types, before anything
    // changes).
    VocabTracer tracer(module);
    // Each padded parameter's dimension, and the multiple it grows to.
    llvm::MapVector<StringRef, std::pair<int64_t, int64_t>> dims;
    llvm::SetVector<Operation *> chain;
    SmallVector<std::pair<CrossEntropyOp, int64_t>> losses;
    module.walk([&](CrossEntropyOp loss) {
      auto logits = cast<RankedTensorType>(loss.getLogits().getType());
      int64_t vocab = logits.getShape().back();
      if (loss.getClasses() || loss.getVocabAxes() || vocab % lossMultiple == 0)
        return;
      VocabPadding padding;
      if (failed(
              tracer.trace(loss.getLogits(), logits.getRank() - 1, padding)) ||
          !tracer.onlyUsedOnTheWay(padding, loss))
        return;
      for (auto [name, dim] : padding.params)
        if (dims.count(name) && dims.lookup(name).first != dim)
          return;
      for (auto [name, dim] : padding.params)
        dims.insert({name, {dim, lossMultiple}});
      chain.insert(padding.chain.begin(), padding.chain.end());
      losses.push_back({loss, vocab});
    });
    // Tables only looked up: their rows.
    for (ParamOp param : module.getOps<ParamOp>()) {
      if (dims.count(param.getSymName()) ||
          param.getTensorType().getRank() != 2 ||
          param.getTensorType().getDimSize(0) % tp == 0)
        continue;
      if (tracer.readAsTables(param.getSymName(), 0, /*chain=*/{}))
        dims.insert({param.getSymName(), {0, tp}});
    }

    // The parameters and their reads take the padded types, then the ops
    // on the way to the losses, in program order.
    llvm::StringMap<RankedTensorType> padded;
    for (auto [name, padding] : dims) {
      auto [dim, to] = padding;
      auto param = module.lookupSymbol<ParamOp>(name);
      RankedTensorType type = param.getTensorType();
      SmallVector<int64_t> shape(type.getShape());
      shape[dim] = llvm::alignTo(shape[dim], to);
      padded[name] = type.clone(shape);
      param.setUnpaddedAttr(
          DenseI64ArrayAttr::get(&getContext(), type.getShape()));
      param.setTypeAttr(TypeAttr::get(padded[name]));
      ++numPadded;
    }
    module.walk([&](Operation *op) {
      if (auto get = dyn_cast<GetParamOp>(op)) {
        if (RankedTensorType type = padded.lookup(get.getName()))
          get.getResult().setType(type);
        return;
      }
      if (!chain.contains(op))
        return;
      if (auto matmul = dyn_cast<MatmulOp>(op)) {
        FailureOr<RankedTensorType> type = inferMatmulType(
            matmul.getLhs().getType(), matmul.getRhs().getType(),
            matmul.getTransposeLhs(), matmul.getTransposeRhs(),
            /*emitError=*/{});
        if (succeeded(type))
          matmul.getResult().setType(*type);
        return;
      }
      // A bias_add or an op whose operands and result share a type.
      op->getResult(0).setType(op->getOperand(0).getType());
    });
    for (auto [loss, vocab] : losses)
      loss.setClassesAttr(
          IntegerAttr::get(IntegerType::get(&getContext(), 64), vocab));
  }
};

} // namespace
