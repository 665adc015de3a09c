//===- triad-interp.cpp - runs triad IR in the reference interpreter ------===//
//
// triad-interp FILE [--function NAME] [--seed N] [--step N]
//              [--native-precision] [--args FILE.json | --random-args]
//              [--json]
//
// Parses and verifies the module, initializes its parameters from their init
// specs, runs one function on the given (or generated) arguments and prints
// the results. Every bad input is one "triad-interp: error: ..." line (or an
// MLIR diagnostic at the offending op) and exit status 1.
//
//===----------------------------------------------------------------------===//

#include "runtime/support/JsonDepth.h"
#include "triad/Interpreter/Interpreter.h"
#include "triad/Registration.h"

#include "dialects/Triad/TriadOps.h"
#include "runtime/init/Init.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cstdio>

using namespace triad;
using namespace triad::interp;
namespace cl = llvm::cl;

namespace {

cl::OptionCategory category("triad-interp options");
cl::opt<std::string> inputPath(cl::Positional, cl::desc("<input .mlir>"),
                               cl::Required, cl::cat(category));
cl::opt<std::string> functionName("function",
                                  cl::desc("Function to run (default forward)"),
                                  cl::init("forward"), cl::cat(category));
cl::opt<uint64_t> seed("seed", cl::desc("Seed of parameter init and dropout"),
                       cl::init(0), cl::cat(category));
cl::opt<int64_t> runSteps(
    "run-steps",
    cl::desc("The run's last optimizer step: where a learning-rate schedule "
             "that decays over the run (decay = -1) ends"),
    cl::init(0));
cl::opt<uint64_t> step("step", cl::desc("Training step (for dropout)"),
                       cl::init(0), cl::cat(category));
cl::opt<bool> nativePrecision(
    "native-precision",
    cl::desc("Round every op result to its element type instead of float64"),
    cl::cat(category));
cl::opt<std::string> argsPath(
    "args",
    cl::desc("JSON file with the arguments: {\"args\": [{\"shape\": [..], "
             "\"data\": [..]}, ..]}"),
    cl::value_desc("file"), cl::cat(category));
cl::opt<bool> randomArgs(
    "random-args",
    cl::desc("Generate the arguments: floats N(0, 1); token ids and labels "
             "uniform in the vocabulary; prefix lengths uniform in [0, seq]"),
    cl::cat(category));
cl::opt<uint64_t> argsSeed("args-seed",
                           cl::desc("Seed of --random-args (default 1)"),
                           cl::init(1), cl::cat(category));
cl::opt<int64_t> intBound(
    "int-bound",
    cl::desc("Exclusive bound of generated integers without a known role"),
    cl::init(2), cl::cat(category));
cl::opt<bool> printJson("json", cl::desc("Print every result in full as JSON"),
                        cl::cat(category));

[[noreturn]] void fail(const llvm::Twine &message) {
  llvm::errs() << "triad-interp: error: " << message << "\n";
  std::exit(1);
}

std::string formatDouble(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  return buffer;
}

std::vector<Tensor> readArgs(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFileOrSTDIN(path);
  if (!buffer)
    fail(llvm::formatv("cannot read '{0}': {1}", path,
                       buffer.getError().message()));
  llvm::StringRef text = (*buffer)->getBuffer();
  if (size_t depth =
          triad::jsonDepth(std::string_view(text.data(), text.size()));
      depth > triad::kMaxJsonDepth)
    fail(llvm::formatv("{0}: the JSON nests {1} levels deep, more than {2}",
                       path, depth, triad::kMaxJsonDepth));
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    fail(path + ": invalid JSON: " + llvm::toString(parsed.takeError()));
  const llvm::json::Object *root = parsed->getAsObject();
  const llvm::json::Array *args = root ? root->getArray("args") : nullptr;
  if (!args)
    fail(path + ": expected an object with an \"args\" array");
  std::vector<Tensor> result;
  for (auto [i, entry] : llvm::enumerate(*args)) {
    const llvm::json::Object *object = entry.getAsObject();
    const llvm::json::Array *shape =
        object ? object->getArray("shape") : nullptr;
    const llvm::json::Array *data = object ? object->getArray("data") : nullptr;
    if (!shape || !data)
      fail(llvm::formatv(
          "{0}: argument {1} needs \"shape\" and \"data\" arrays", path, i));
    std::vector<int64_t> dims;
    for (const llvm::json::Value &dim : *shape) {
      std::optional<int64_t> size = dim.getAsInteger();
      if (!size || *size < 0)
        fail(llvm::formatv("{0}: argument {1}: shape entries must be "
                           "non-negative integers",
                           path, i));
      dims.push_back(*size);
    }
    std::vector<double> values;
    for (const llvm::json::Value &value : *data) {
      std::optional<double> number = value.getAsNumber();
      if (!number)
        fail(llvm::formatv("{0}: argument {1}: data entries must be numbers",
                           path, i));
      values.push_back(*number);
    }
    if (static_cast<int64_t>(values.size()) != numElements(dims))
      fail(llvm::formatv("{0}: argument {1}: {2} data values for a shape of "
                         "{3} elements",
                         path, i, values.size(), numElements(dims)));
    result.emplace_back(dims, std::move(values));
  }
  return result;
}

/// Exclusive bound of the token ids the module's embeddings accept (and
/// its losses' classes, where a padded vocabulary has them).
std::optional<int64_t> vocabularyOf(mlir::ModuleOp module) {
  std::optional<int64_t> vocab;
  auto bound = [&](int64_t size) {
    vocab = vocab ? std::min(*vocab, size) : size;
  };
  module.walk(
      [&](EmbeddingOp op) { bound(op.getTable().getType().getDimSize(0)); });
  module.walk([&](CrossEntropyOp op) {
    if (std::optional<int64_t> classes = op.getClasses())
      bound(*classes);
  });
  return vocab;
}

std::vector<Tensor> randomArguments(mlir::ModuleOp module,
                                    mlir::func::FuncOp func) {
  std::optional<int64_t> vocab = vocabularyOf(module);
  std::vector<Tensor> result;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto type =
        llvm::dyn_cast<mlir::RankedTensorType>(func.getArgumentTypes()[i]);
    if (!type || !type.hasStaticShape())
      fail(llvm::formatv("argument {0} of @{1} is not a statically shaped "
                         "tensor",
                         i, func.getSymName()));
    Tensor value(type.getShape());
    std::string name = "arg" + std::to_string(i);
    rt::PhiloxKey key = rt::parameterKey(argsSeed, name);
    if (type.getElementType().isInteger()) {
      auto role = func.getArgAttrOfType<mlir::StringAttr>(i, "triad.input");
      int64_t bound = intBound;
      if (role && role.getValue() == "prefix_lengths" && func.getNumArguments())
        bound = llvm::cast<mlir::RankedTensorType>(func.getArgumentTypes()[0])
                    .getDimSize(1) +
                1;
      else if (role && vocab)
        bound = *vocab;
      if (bound <= 0)
        fail("--int-bound must be positive");
      for (int64_t e = 0; e < value.numElements(); ++e) {
        double u = rt::dropoutUniform(argsSeed, i, 0, e);
        value.data[e] = std::min<double>(std::floor(u * bound), bound - 1);
      }
    } else {
      for (int64_t e = 0; e < value.numElements(); ++e)
        value.data[e] = rt::standardNormal(key, e);
    }
    result.push_back(std::move(value));
  }
  return result;
}

void printResult(size_t index, mlir::Type type, const Tensor &value) {
  llvm::raw_ostream &os = llvm::outs();
  if (printJson) {
    llvm::json::Array data;
    for (double v : value.data)
      data.push_back(v);
    llvm::json::Array shape;
    for (int64_t d : value.shape)
      shape.push_back(d);
    os << llvm::json::Value(llvm::json::Object{{"result", int64_t(index)},
                                               {"shape", std::move(shape)},
                                               {"data", std::move(data)}})
       << "\n";
    return;
  }
  os << "result " << index << ": " << type << " = ";
  if (value.rank() == 0) {
    os << formatDouble(value.data[0]) << "\n";
    return;
  }
  double sum = 0.0;
  for (double v : value.data)
    sum += v;
  os << "[";
  size_t shown = std::min<size_t>(value.data.size(), 8);
  for (size_t i = 0; i < shown; ++i)
    os << (i ? ", " : "") << formatDouble(value.data[i]);
  if (shown < value.data.size())
    os << ", ...";
  os << "] sum " << formatDouble(sum) << "\n";
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "triad-interp: runs a function of triad IR in the float64 reference "
      "interpreter\n\n"
      "  triad-gen --preset tiny | triad-interp - --random-args\n");
  if (argsPath.getNumOccurrences() && randomArgs)
    fail("give either --args or --random-args, not both");

  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  // Diagnostics point at the source line; the op in generic form would
  // only repeat it less readably.
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  std::string error;
  auto buffer = mlir::openInputFile(inputPath, &error);
  if (!buffer)
    fail(error);
  sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &context);
  if (!module)
    return 1; // The parser or verifier reported why.

  auto func = module->lookupSymbol<mlir::func::FuncOp>(functionName);
  if (!func)
    fail(llvm::formatv("no function @{0} in '{1}'", functionName.getValue(),
                       inputPath.getValue()));
  std::vector<Tensor> args;
  if (argsPath.getNumOccurrences())
    args = readArgs(argsPath);
  else if (randomArgs)
    args = randomArguments(*module, func);
  else if (func.getNumArguments() != 0)
    fail(llvm::formatv("@{0} takes {1} arguments: give --args FILE or "
                       "--random-args",
                       functionName.getValue(), func.getNumArguments()));

  InterpreterOptions options;
  options.seed = seed;
  options.step = step;
  if (runSteps > 0)
    options.runSteps = runSteps;
  options.nativePrecision = nativePrecision;
  Interpreter interpreter(*module, options);
  interpreter.initializeParameters();
  mlir::FailureOr<std::vector<Tensor>> results =
      interpreter.call(functionName, args);
  if (mlir::failed(results))
    return 1;
  for (auto [i, pair] :
       llvm::enumerate(llvm::zip(func.getResultTypes(), *results))) {
    auto [type, value] = pair;
    printResult(i, type, value);
  }
  return 0;
}
