//===- triad-opt.cpp - the Triad optimizer driver -------------------------===//
//
// The opt-style driver: parses IR with every Triad dialect and the upstream
// dialects the project uses, runs the requested passes, prints the result.
//
//===----------------------------------------------------------------------===//

#include "triad/Registration.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  triad::registerAllDialects(registry);
  triad::registerAllPasses();
  std::vector<char *> args = triad::withToolDefaults(argc, argv);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(static_cast<int>(args.size()) - 1, args.data(),
                        "Triad optimizer driver\n", registry));
}
