//===- triad-translate.cpp - plan files in and out ------------------------===//
//
// `--export-plan` writes the plan file of an rt module (the output of
// --triad-train-pipeline); `--dump` reads a plan file, checks it like the
// runtime does and prints it as rt IR. IR given to --export-plan that is
// nested deeper than kMaxIrNesting is refused before it is parsed (the
// parser recurses per level), from a file or from stdin.
//
//===----------------------------------------------------------------------===//

#include "dialects/Rt/RtDialect.h"
#include "triad/Registration.h"
#include "triad/Target/Plan.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>

using namespace mlir;

namespace {

/// The input file of the command line (the first positional argument; "-",
/// stdin, when there is none), and where it is in `args`.
std::pair<std::string, std::optional<size_t>>
inputOf(const std::vector<char *> &args) {
  for (size_t i = 1; i < args.size() && args[i]; ++i) {
    llvm::StringRef arg = args[i];
    if (arg == "-o") {
      ++i;
      continue;
    }
    if (arg == "-" || !arg.starts_with("-"))
      return {arg.str(), i};
  }
  return {"-", std::nullopt};
}

/// Refuses IR nested deeper than the parser takes, before it is parsed.
/// Input from stdin is read here, so it is handed on in a temporary file
/// (`temporary`, removed by `remover`): `args` then names it.
bool checkNesting(std::vector<char *> &args, llvm::SmallString<128> &temporary,
                  std::optional<llvm::FileRemover> &remover) {
  auto [input, position] = inputOf(args);
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> file = mlir::openInputFile(input, &error);
  if (!file) {
    llvm::errs() << "triad-translate: error: " << error << "\n";
    return false;
  }
  if (!triad::checkIrNesting(*file, "triad-translate"))
    return false;
  if (input != "-")
    return true;
  int fd = -1;
  if (std::error_code code = llvm::sys::fs::createTemporaryFile(
          "triad-translate", "mlir", fd, temporary)) {
    llvm::errs() << "triad-translate: error: cannot keep stdin: "
                 << code.message() << "\n";
    return false;
  }
  remover.emplace(temporary);
  {
    llvm::raw_fd_ostream out(fd, /*shouldClose=*/true);
    out << file->getBuffer();
  }
  if (position)
    args[*position] = temporary.data();
  else
    args.insert(args.end() - 1, temporary.data());
  return true;
}

} // namespace

int main(int argc, char **argv) {
  triad::hideInheritedOptions();
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
  llvm::SmallString<128> temporary;
  std::optional<llvm::FileRemover> remover;
  bool exporting = false;
  for (char *arg : args)
    exporting |= arg && llvm::StringRef(arg) == "--export-plan";
  if (exporting && !checkNesting(args, temporary, remover))
    return 1;
  return failed(mlirTranslateMain(static_cast<int>(args.size()) - 1,
                                  args.data(), "Triad plan translator\n"));
}
