//===- triad-opt.cpp - the Triad optimizer driver -------------------------===//
//
// The opt-style driver: parses IR with every Triad dialect and the upstream
// dialects the project uses, runs the requested passes, prints the result.
// Input nested deeper than kMaxIrNesting is refused before it is parsed (the
// parser recurses per level: 10,000 nested modules overflowed the stack).
//
//===----------------------------------------------------------------------===//

#include "triad/Registration.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

int main(int argc, char **argv) {
  triad::hideInheritedOptions();
  mlir::DialectRegistry registry;
  triad::registerAllDialects(registry);
  triad::registerAllPasses();
  std::vector<char *> args = triad::withToolDefaults(argc, argv);
  if (!triad::checkPassOptions(args, "triad-opt"))
    return 1;
  int count = static_cast<int>(args.size()) - 1;
  auto [input, output] = mlir::registerAndParseCLIOptions(
      count, args.data(), "Triad optimizer driver\n", registry);
  mlir::MlirOptMainConfig config =
      mlir::MlirOptMainConfig::createFromCLOptions();
  // Listing dialects or passes reads no input.
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(count, args.data(), input, output, registry));

  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> file = mlir::openInputFile(input, &error);
  if (!file) {
    llvm::errs() << "triad-opt: error: " << error << "\n";
    return 1;
  }
  if (!triad::checkIrNesting(*file, "triad-opt"))
    return 1;
  std::unique_ptr<llvm::ToolOutputFile> out =
      mlir::openOutputFile(output, &error);
  if (!out) {
    llvm::errs() << "triad-opt: error: " << error << "\n";
    return 1;
  }
  if (mlir::failed(
          mlir::MlirOptMain(out->os(), std::move(file), registry, config)))
    return 1;
  out->keep();
  return 0;
}
