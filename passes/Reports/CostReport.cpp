//===- CostReport.cpp - each part's FLOPs, bytes and products -------------===//
//
// Implements --triad-cost-report: a read-only report of the ops' cost model
// (CostOpInterface) part by part, with the shapes of the products that set
// their efficiency and the collectives between them; the planner's time
// model reads it.
//
//===----------------------------------------------------------------------===//

#include "passes/Reports/Passes.h"

#include "passes/Lowering/EpilogueFusion.h"

#include "dialects/Dist/DistDialect.h"
#include "dialects/Triad/TriadOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ToolOutputFile.h"

#include <map>

namespace triad {
#define GEN_PASS_DEF_COSTREPORT
#include "passes/Reports/Passes.h.inc"
} // namespace triad

using namespace mlir;
using namespace triad;

namespace {

StringRef kindName(Contraction::Kind kind) {
  switch (kind) {
  case Contraction::Kind::Product:
    return "product";
  case Contraction::Kind::Attention:
    return "attention";
  case Contraction::Kind::AttentionGrad:
    return "attention_grad";
  }
  llvm_unreachable("a contraction kind");
}

/// One part of a function: a layer, or the ops outside every layer.
struct Part {
  double flops = 0, bytes = 0, collectiveBytes = 0;
  int64_t ops = 0, collectives = 0;
  std::string lines;
};

/// The part an op belongs to: its layer's name, the name a stage function
/// keeps on it (--triad-pipeline-materialize), or "outside layers".
std::string partOf(Operation *op) {
  if (auto layer = op->getParentOfType<LayerOp>())
    return layerName(layer);
  if (auto name = op->getAttrOfType<StringAttr>(kLayerNameAttr))
    return name.str();
  return "outside layers";
}

struct CostReportPass : triad::impl::CostReportBase<CostReportPass> {
  using CostReportBase::CostReportBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::string message;
    auto output = openOutputFile(file, &message);
    if (!output) {
      emitError(module.getLoc(), "cannot write the cost report: ") << message;
      return signalPassFailure();
    }
    llvm::raw_ostream &os = output->os();
    for (auto func : module.getOps<func::FuncOp>()) {
      // The bytes of the ops the lowering fuses into a product's epilogue
      // (the product's bytes count the result it writes): the add reads its
      // bias, the activation writes the sum where the kernel keeps it; the
      // activation's gradient reads the activation's input, the bias
      // gradient's sum writes its result.
      llvm::DenseMap<Operation *, double> fusedBytes;
      if (fusedEpilogues) {
        // As the lowering's test, without its in-place updates: an
        // assignment or an op of another dialect stops a group.
        auto writesInPlace = [](Operation *op) {
          return isa<AssignOp>(op) || !isa<TriadDialect>(op->getDialect());
        };
        for (const FusedEpilogue &group :
             findFusedEpilogues(func, writesInPlace)) {
          if (group.isGradient()) {
            fusedBytes[group.activationGrad] =
                tensorBytes(TypeRange(group.thirdOperand().getType()));
            if (group.biasGrad)
              fusedBytes[group.biasGrad] =
                  tensorBytes(group.biasGrad->getResultTypes());
            continue;
          }
          Type bias = group.bias().getType(),
               sum = group.preActivation().getType();
          fusedBytes[group.biasAdd] = tensorBytes(TypeRange(bias));
          if (group.activation)
            fusedBytes[group.activation] =
                group.keepsPreActivation ? tensorBytes(TypeRange(sum)) : 0.0;
        }
      }
      // The parts in the order of their first op.
      llvm::MapVector<std::string, Part, std::map<std::string, unsigned>> parts;
      func.walk([&](Operation *op) {
        if (auto costed = dyn_cast<CostOpInterface>(op)) {
          Part &part = parts[partOf(op)];
          auto fused = fusedBytes.find(op);
          double flops = costed.getFlops(), bytes = fused != fusedBytes.end()
                                                        ? fused->second
                                                        : costed.getBytes();
          part.flops += flops;
          part.bytes += bytes;
          ++part.ops;
          if (!ops)
            return;
          llvm::raw_string_ostream line(part.lines);
          line << llvm::formatv("    {0} flops={1:F0} bytes={2:F0}",
                                op->getName(), flops, bytes);
          if (std::optional<Contraction> c = costed.getContraction())
            line << llvm::formatv(" {0} batch={1} m={2} n={3} k={4}",
                                  kindName(c->kind), c->batch, c->m, c->n,
                                  c->k);
          if (fused != fusedBytes.end())
            line << " fused";
          line << "\n";
          return;
        }
        // A collective over mesh axes (an all_slice takes its piece and
        // moves nothing).
        auto axes = op->getAttrOfType<ArrayAttr>("axes");
        if (!axes || !isa<dist::DistDialect>(op->getDialect()) ||
            isa<dist::AllSliceOp>(op))
          return;
        Part &part = parts[partOf(op)];
        double bytes = std::max(tensorBytes(op->getOperandTypes()),
                                tensorBytes(op->getResultTypes()));
        part.collectiveBytes += bytes;
        ++part.collectives;
        if (!ops)
          return;
        SmallVector<StringRef> names;
        for (Attribute axis : axes)
          names.push_back(cast<StringAttr>(axis).getValue());
        dist::MeshOp mesh = dist::MeshOp::lookup(op);
        llvm::raw_string_ostream line(part.lines);
        line << llvm::formatv("    {0} bytes={1:F0} over [{2}] ranks={3}\n",
                              op->getName(), bytes, llvm::join(names, ","),
                              mesh ? mesh.getGroupSize(names) : 1);
      });
      if (parts.empty())
        continue;
      os << "triad cost report: @" << func.getSymName() << "\n";
      for (auto &[name, part] : parts) {
        os << llvm::formatv("  {0}: {1} op{2}, {3:F0} flops, {4:F0} bytes",
                            name, part.ops, part.ops == 1 ? "" : "s",
                            part.flops, part.bytes);
        if (part.collectives)
          os << llvm::formatv(
              ", {0} collective{1} of {2:F0} bytes", part.collectives,
              part.collectives == 1 ? "" : "s", part.collectiveBytes);
        os << "\n" << part.lines;
      }
    }
    output->keep();
  }
};

} // namespace
