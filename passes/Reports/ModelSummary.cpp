//===- ModelSummary.cpp - prints a model's parameters and layers ----------===//
//
// Implements --triad-model-summary: a read-only report of the layer parts of
// every model function and of the parameters they read.
//
//===----------------------------------------------------------------------===//

#include "passes/Reports/Passes.h"

#include "dialects/Triad/TriadOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/FormatVariadic.h"

namespace triad {
#define GEN_PASS_DEF_MODELSUMMARY
#include "passes/Reports/Passes.h.inc"
} // namespace triad

using namespace mlir;
using namespace triad;

namespace {

int64_t elementBytes(Type type) {
  return static_cast<int64_t>((type.getIntOrFloatBitWidth() + 7) / 8);
}

struct ModelSummaryPass
    : public triad::impl::ModelSummaryBase<ModelSummaryPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    llvm::StringMap<ParamOp> params;
    int64_t totalElements = 0;
    for (auto param : module.getOps<ParamOp>()) {
      params[param.getSymName()] = param;
      totalElements += param.getNumElements();
    }

    // Parameters read by any function, for the unused count.
    llvm::DenseSet<StringRef> readAnywhere;
    llvm::raw_ostream &os = llvm::outs();
    for (auto func : module.getOps<func::FuncOp>()) {
      auto layers = llvm::to_vector(func.getBody().getOps<LayerOp>());
      if (layers.empty())
        continue;
      // Within one function a parameter counts once, in its first part.
      llvm::DenseSet<StringRef> counted;
      int64_t transformerLayers = llvm::count_if(layers, [](LayerOp layer) {
        return layer.getKind() == LayerKind::transformer;
      });
      os << "model summary: @" << func.getSymName() << " (" << layers.size()
         << " parts, " << transformerLayers << " transformer layers)\n";
      os << llvm::formatv("  {0,-20} {1,12} {2,6}\n", "part", "params", "ops");
      int64_t funcParams = 0, funcOps = 0;
      for (LayerOp layer : layers) {
        int64_t layerParams = 0, layerOps = 0;
        layer.getBody().walk([&](Operation *op) {
          if (isa<YieldOp>(op))
            return;
          ++layerOps;
          auto get = dyn_cast<GetParamOp>(op);
          if (!get)
            return;
          auto it = params.find(get.getName());
          if (it == params.end())
            return;
          readAnywhere.insert(it->first());
          if (counted.insert(it->first()).second)
            layerParams += it->second.getNumElements();
        });
        std::string part = llvm::formatv(
            "{0} {1}", stringifyLayerKind(layer.getKind()), layer.getIndex());
        os << llvm::formatv("  {0,-20} {1,12} {2,6}\n", part, layerParams,
                            layerOps);
        funcParams += layerParams;
        funcOps += layerOps;
      }
      os << llvm::formatv("  {0,-20} {1,12} {2,6}\n", "total", funcParams,
                          funcOps);
    }

    int64_t totalBytes = 0;
    llvm::MapVector<Type, int64_t> byElementType;
    for (auto param : module.getOps<ParamOp>()) {
      Type elementType = param.getTensorType().getElementType();
      byElementType[elementType] += param.getNumElements();
      totalBytes += param.getNumElements() * elementBytes(elementType);
    }
    os << "  parameters: " << totalElements << " elements, " << totalBytes
       << " bytes (";
    llvm::interleaveComma(byElementType, os, [&](auto &entry) {
      os << entry.first << ": " << entry.second;
    });
    os << ")\n";
    int64_t unused = llvm::count_if(module.getOps<ParamOp>(), [&](ParamOp p) {
      return !readAnywhere.contains(p.getSymName());
    });
    if (unused)
      os << "  unused parameters: " << unused << "\n";
  }
};

} // namespace
