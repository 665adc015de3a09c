//===- Interpreter.h - reference interpreter of the triad dialect -*- C++
//-*-===//
//
// Evaluates functions of `triad` IR on float64 tensors (or, when asked, with
// every result rounded to its op's element type). It defines what the IR
// means: the runtime's kernels and every pass are checked against it.
// Parameters are initialized from their init specs by the runtime's
// counter-based generator, so the interpreter and the runtime start from
// identical weights.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_INTERPRETER_INTERPRETER_H
#define TRIAD_INTERPRETER_INTERPRETER_H

#include "triad/Interpreter/Tensor.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"

namespace triad::interp {

struct InterpreterOptions {
  /// Seed of parameter initialization and dropout.
  uint64_t seed = 0;
  /// Training step, for dropout masks.
  uint64_t step = 0;
  /// Round every op result to its element type (f32, bf16, f16) instead of
  /// keeping float64.
  bool nativePrecision = false;
};

/// The value of global element `index` of a parameter declared with `init`,
/// as the runtime initializes it (an f32 value).
double initialValue(mlir::Attribute init, uint64_t seed,
                    llvm::StringRef parameter, uint64_t index);

/// Rounds `value` to the float type `type` (f32, bf16 or f16; others pass).
double roundTo(mlir::Type type, double value);

class Interpreter {
public:
  explicit Interpreter(mlir::ModuleOp module, InterpreterOptions options = {});

  /// Sets every declared parameter to its initial value.
  void initializeParameters();
  /// Parameter values by name; tests may read and replace them.
  llvm::StringMap<Tensor> &parameters() { return params; }

  /// Runs the function `name` on `args`. Errors (unknown function, argument
  /// shapes, unsupported ops, ids outside the vocabulary) are emitted as
  /// MLIR diagnostics at the offending op and return failure.
  mlir::FailureOr<std::vector<Tensor>> call(llvm::StringRef name,
                                            llvm::ArrayRef<Tensor> args);

private:
  mlir::FailureOr<std::vector<Tensor>> runRegion(mlir::Region &region,
                                                 llvm::ArrayRef<Tensor> args);
  mlir::FailureOr<std::vector<Tensor>>
  evaluate(mlir::Operation *op, llvm::ArrayRef<const Tensor *> operands);

  mlir::ModuleOp module;
  InterpreterOptions options;
  llvm::StringMap<Tensor> params;
};

} // namespace triad::interp

#endif // TRIAD_INTERPRETER_INTERPRETER_H
