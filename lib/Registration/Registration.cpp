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
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <deque>
#include <string>

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

void triad::hideInheritedOptions() {
  for (auto &entry : llvm::cl::getRegisteredOptions()) {
    llvm::StringRef name = entry.first;
    if (name.starts_with("help") || name == "version" || name == "color")
      continue;
    if (entry.second->getOptionHiddenFlag() == llvm::cl::NotHidden)
      entry.second->setHiddenFlag(llvm::cl::Hidden);
  }
}

size_t triad::irNestingDepth(llvm::StringRef text) {
  return nestingDepth(std::string_view(text.data(), text.size()), "([{", ")]}",
                      /*slashComments=*/true);
}

namespace {

/// The option names of registered pass or pipeline `name`, from the
/// textual form of its default options; none when it has none or is not
/// registered.
std::vector<std::string> optionNames(llvm::StringRef name) {
  std::string text;
  llvm::raw_string_ostream os(text);
  if (name == "triad-train-pipeline") {
    triad::TrainPipelineOptions().print(os);
  } else if (const mlir::PassInfo *info = mlir::PassInfo::lookup(name)) {
    mlir::OpPassManager pm;
    if (mlir::failed(info->addToPipeline(
            pm, "", [](const llvm::Twine &) { return mlir::failure(); })))
      return {};
    pm.printAsTextualPipeline(os);
  } else {
    return {};
  }
  // "...{a=1 b-c=x}": the keys inside the braces.
  std::vector<std::string> names;
  size_t open = text.find('{'), close = text.rfind('}');
  if (open == std::string::npos || close == std::string::npos || close < open)
    return names;
  llvm::SmallVector<llvm::StringRef> items;
  llvm::StringRef(text).slice(open + 1, close).split(items, ' ', -1, false);
  for (llvm::StringRef item : items)
    if (size_t equals = item.find('='); equals != llvm::StringRef::npos)
      names.push_back(item.take_front(equals).str());
  return names;
}

} // namespace

bool triad::checkPassOptions(std::vector<char *> &args, llvm::StringRef tool) {
  static std::deque<std::string> rewritten;
  for (char *&arg : args) {
    if (!arg)
      continue;
    llvm::StringRef text = arg;
    if (!text.consume_front("--triad-"))
      continue;
    auto [bare, options] = text.split('=');
    std::string name = ("triad-" + bare).str();
    if (options.empty())
      continue;
    std::vector<std::string> known = optionNames(name);
    if (known.empty())
      continue;
    std::string normalized = "--" + name + "=";
    llvm::SmallVector<llvm::StringRef> items;
    options.split(items, ' ', -1, /*KeepEmpty=*/false);
    for (auto [index, item] : llvm::enumerate(items)) {
      if (!item.contains('=')) {
        // A bare flag, or part of a value with spaces: left as it is.
        normalized += ((index ? " " : "") + item).str();
        continue;
      }
      auto [key, value] = item.split('=');
      std::string spelled = key.str();
      std::replace(spelled.begin(), spelled.end(), '_', '-');
      // Separators aside, a key names the option it spells
      // (micro_batches: microbatches).
      auto squeezed = [](llvm::StringRef word) {
        std::string letters;
        for (char c : word)
          if (c != '-' && c != '_')
            letters.push_back(c);
        return letters;
      };
      if (!llvm::is_contained(known, spelled))
        for (const std::string &option : known)
          if (squeezed(option) == squeezed(spelled))
            spelled = option;
      if (!llvm::is_contained(known, spelled)) {
        // The nearest options, within an edit per three letters (at least
        // one).
        std::vector<std::string> nearest;
        unsigned best = std::max<unsigned>(1, spelled.size() / 3) + 1;
        for (const std::string &option : known) {
          unsigned distance = llvm::StringRef(option).edit_distance(spelled);
          if (distance < best)
            nearest.clear(), best = distance;
          if (distance == best)
            nearest.push_back("'" + option + "'");
        }
        llvm::errs() << tool << ": error: --" << name << " has no option '"
                     << key << "'"
                     << (nearest.empty()
                             ? std::string(".")
                             : "; did you mean " + llvm::join(nearest, " or ") +
                                   "?")
                     << " Its options: " << llvm::join(known, ", ") << "\n";
        return false;
      }
      normalized += (index ? " " : "") + spelled + "=" + value.str();
    }
    rewritten.push_back(std::move(normalized));
    arg = rewritten.back().data();
  }
  return true;
}
