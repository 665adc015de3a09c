//===- Registration.cpp - registers Triad's dialects and passes -----------===//

#include "triad/Registration.h"

#include "runtime/support/JsonDepth.h"

#include "dialects/Dist/DistDialect.h"
#include "dialects/Pipe/PipeDialect.h"
#include "dialects/Rt/RtDialect.h"
#include "dialects/Triad/TriadDialect.h"
#include "passes/Autodiff/Passes.h"
#include "passes/Lowering/Passes.h"
#include "passes/Pipeline/Passes.h"
#include "passes/Reports/Passes.h"
#include "passes/Sharding/Passes.h"
#include "triad/Pipelines/TrainPipeline.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

void triad::registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<triad::TriadDialect, triad::dist::DistDialect,
                  triad::pipe::PipeDialect, triad::rt::RtDialect,
                  mlir::func::FuncDialect, mlir::arith::ArithDialect,
                  mlir::tensor::TensorDialect>();
}

void triad::registerAllPasses() {
  triad::registerAutodiffPasses();
  triad::registerReportsPasses();
  triad::registerShardingPasses();
  triad::registerPipelinePasses();
  triad::registerLoweringPasses();
  triad::registerTrainPipeline();
}

std::vector<char *> triad::withToolDefaults(int argc, char **argv) {
  static char quietDiagnostics[] = "--mlir-print-op-on-diagnostic=false";
  std::vector<char *> args(argv, argv + argc);
  args.insert(args.begin() + (argc > 0 ? 1 : 0), quietDiagnostics);
  args.push_back(nullptr);
  return args;
}

bool triad::checkIrNesting(const llvm::MemoryBuffer &input,
                           llvm::StringRef tool) {
  size_t depth = irNestingDepth(input.getBuffer());
  if (depth <= kMaxIrNesting)
    return true;
  llvm::errs() << tool << ": error: " << input.getBufferIdentifier()
               << " nests brackets " << depth << " levels deep, more than the "
               << kMaxIrNesting << " the parser takes\n";
  return false;
}

size_t triad::irNestingDepth(llvm::StringRef text) {
  return nestingDepth(std::string_view(text.data(), text.size()), "([{", ")]}",
                      /*slashComments=*/true);
}
