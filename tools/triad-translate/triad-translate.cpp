//===- triad-translate.cpp - plan files in and out ------------------------===//
//
// `--export-plan` writes the plan file of an rt module (the output of
// --triad-train-pipeline); `--dump` reads a plan file, checks it like the
// runtime does and prints it as rt IR.
//
//===----------------------------------------------------------------------===//

#include "dialects/Rt/RtDialect.h"
#include "triad/Registration.h"
#include "triad/Target/Plan.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;

int main(int argc, char **argv) {
  TranslateFromMLIRRegistration exportPlan(
      "export-plan", "Write the plan file of an rt module",
      [](Operation *op, raw_ostream &os) -> LogicalResult {
        auto module = dyn_cast<ModuleOp>(op);
        if (!module)
          return op->emitError("expected a module");
        FailureOr<std::string> bytes = triad::exportPlan(module);
        if (failed(bytes))
          return failure();
        os << *bytes;
        return success();
      },
      [](DialectRegistry &registry) { triad::registerAllDialects(registry); });

  TranslateToMLIRRegistration dumpPlan(
      "dump", "Check a plan file and print it as rt IR",
      [](llvm::SourceMgr &sources,
         MLIRContext *context) -> OwningOpRef<Operation *> {
        const llvm::MemoryBuffer *buffer =
            sources.getMemoryBuffer(sources.getMainFileID());
        OwningOpRef<ModuleOp> module = triad::importPlan(
            buffer->getBuffer(), buffer->getBufferIdentifier(), context);
        if (!module)
          return nullptr;
        return module.release().getOperation();
      },
      [](DialectRegistry &registry) { triad::registerAllDialects(registry); });

  std::vector<char *> args = triad::withToolDefaults(argc, argv);
  return failed(mlirTranslateMain(static_cast<int>(args.size()) - 1,
                                  args.data(), "Triad plan translator\n"));
}
