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

#include <functional>
#include <optional>

namespace triad::interp {

struct InterpreterOptions {
  /// Seed of parameter initialization and dropout.
  uint64_t seed = 0;
  /// Training step, for dropout masks.
  uint64_t step = 0;
  /// Round every op result to its element type (f32, bf16, f16) instead of
  /// keeping float64.
  bool nativePrecision = false;
  /// The rank this interpreter is, on the module's dist.mesh: parameters
  /// with a split layout hold this rank's piece.
  int64_t rank = 0;
  /// Evaluates the dist collectives (set by MeshInterpreter, which runs one
  /// interpreter per rank); without it a collective is an error.
  std::function<mlir::FailureOr<std::vector<Tensor>>(
      mlir::Operation *, llvm::ArrayRef<const Tensor *>)>
      collectives;
  /// The run's last optimizer step: the decay of a learning-rate schedule
  /// that decays over the run (decay -1); without it such a schedule is an
  /// error.
  std::optional<int64_t> runSteps;
  /// The microbatch a function split by --triad-split-microbatches runs
  /// (its dropout masks continue the batch's from that microbatch on).
  int64_t microbatch = 0;
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

  /// The training step and the microbatch of the next calls (dropout).
  void setStep(uint64_t step, int64_t microbatch = 0) {
    options.step = step;
    options.microbatch = microbatch;
  }

private:
  mlir::FailureOr<std::vector<Tensor>> runRegion(mlir::Region &region,
                                                 llvm::ArrayRef<Tensor> args);
  mlir::FailureOr<std::vector<Tensor>>
  evaluate(mlir::Operation *op, llvm::ArrayRef<const Tensor *> operands);

  mlir::ModuleOp module;
  InterpreterOptions options;
  llvm::StringMap<Tensor> params;
};

/// A partitioned module run on every rank of its dist.mesh in one process:
/// one interpreter per rank, each on its own thread, exchanging the
/// collectives' data in memory. It checks a partition against the
/// unpartitioned function without MPI.
class MeshInterpreter {
public:
  MeshInterpreter(mlir::ModuleOp module, InterpreterOptions options = {});
  ~MeshInterpreter();

  int64_t numRanks() const { return ranks.size(); }
  /// Every rank's pieces of the parameters, as Interpreter does.
  void initializeParameters();
  Interpreter &rank(int64_t index) { return *ranks[index]; }
  /// Every rank's Interpreter::setStep.
  void setStep(uint64_t step, int64_t microbatch = 0) {
    for (auto &interpreter : ranks)
      interpreter->setStep(step, microbatch);
  }

  /// Calls `name` on every rank at once, rank r on `args[r]`; the results
  /// per rank. Fails when any rank fails.
  mlir::FailureOr<std::vector<std::vector<Tensor>>>
  call(llvm::StringRef name, llvm::ArrayRef<std::vector<Tensor>> args);

private:
  struct Exchange;
  std::vector<std::unique_ptr<Interpreter>> ranks;
  std::unique_ptr<Exchange> exchange;
};

} // namespace triad::interp

#endif // TRIAD_INTERPRETER_INTERPRETER_H
