//===- CommReport.cpp - the collectives of one optimizer step -------------===//
//
// Reads the compiled rt programs and lists every collective one optimizer
// step runs: in which function, how often (a microbatch function runs once
// per microbatch), over which communicator group, how many bytes, and why
// the sharding passes put it there. Totals per group close the report.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/ToolOutputFile.h"

#include <map>

namespace triad {
#define GEN_PASS_DEF_COMMREPORT
#include "passes/Lowering/Passes.h.inc"
} // namespace triad

using namespace mlir;
using namespace triad;

namespace {

/// The bytes a collective or transfer moves, counted on the full tensor:
/// the reduced buffer, the gathered result, the input that is reduced and
/// scattered, the message sent or received.
int64_t movedBytes(rt::KernelOp kernel) {
  rt::OpCode opcode = kernel.getOpcode();
  // A bucket moves all its tensors.
  int64_t bytes = 0;
  for (Value tensor :
       opcode == rt::OpCode::AllGather || opcode == rt::OpCode::Recv
           ? kernel.getOutputs()
           : kernel.getInputs()) {
    auto type = cast<MemRefType>(tensor.getType());
    bytes += type.getNumElements() * rt::elementBytes(type.getElementType());
  }
  return bytes;
}

/// The bytes each member of a group of `ranks` sends for a collective over
/// `bytes` (as movedBytes counts them) with the ring algorithms NCCL
/// and MPI use for large messages: an all_reduce is a reduce_scatter and an
/// all_gather, each sending (ranks - 1) / ranks of the tensor.
double wireBytes(rt::OpCode opcode, int64_t bytes, int64_t ranks) {
  if (ranks <= 1)
    return 0;
  double share = double(ranks - 1) / double(ranks) * double(bytes);
  return opcode == rt::OpCode::AllReduce ? 2 * share : share;
}

bool isCollective(rt::OpCode opcode) {
  return opcode == rt::OpCode::AllReduce || opcode == rt::OpCode::AllGather ||
         opcode == rt::OpCode::ReduceScatter || opcode == rt::OpCode::AllToAll;
}

struct CommReportPass : triad::impl::CommReportBase<CommReportPass> {
  using CommReportBase::CommReportBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto plans = module.getOps<rt::PlanOp>();
    auto programs = module.getOps<rt::ProgramOp>();
    if (plans.empty() || programs.empty()) {
      emitError(module.getLoc(),
                "holds no rt.plan and rt.program to report on; run "
                "--triad-lower-to-rt or --triad-train-pipeline first");
      return signalPassFailure();
    }
    rt::PlanOp plan = *plans.begin();
    auto groupText = [&](int64_t index) -> std::string {
      if (index < 0 || index >= (int64_t)plan.getGroups().size())
        return "?";
      auto axes = cast<ArrayAttr>(plan.getGroups()[index]);
      return llvm::join(axes.getAsValueRange<StringAttr>(), ",");
    };
    auto groupRanks = [&](int64_t index) -> int64_t {
      int64_t ranks = 1;
      if (index < 0 || index >= (int64_t)plan.getGroups().size())
        return 0;
      for (StringRef axis : cast<ArrayAttr>(plan.getGroups()[index])
                                .getAsValueRange<StringAttr>())
        for (auto [name, size] :
             llvm::zip(plan.getAxes().getAsValueRange<StringAttr>(),
                       plan.getAxisSizes()))
          if (name == axis)
            ranks *= size;
      return ranks;
    };

    std::string message;
    auto output = openOutputFile(file, &message);
    if (!output) {
      emitError(module.getLoc(), "cannot write the comm report: ") << message;
      return signalPassFailure();
    }
    llvm::raw_ostream &os = output->os();
    for (rt::ProgramOp program : programs) {
      // How often one step calls each function.
      llvm::StringMap<int64_t> calls;
      for (auto step : program.getBody().getOps<rt::StepOp>())
        for (Attribute callee : step.getCallees())
          ++calls[cast<FlatSymbolRefAttr>(callee).getValue()];
      os << "triad comm report: program @" << program.getSymName()
         << " (pipeline rank " << program.getPipelineRank()
         << "), one optimizer step\n";
      os << llvm::format("  %-16s %5s  %-14s %-8s %5s %14s  %s\n", "function",
                         "calls", "collective", "group", "ranks", "bytes",
                         "why");
      std::map<std::string, int64_t> totals;
      std::map<std::string, double> sent;
      int64_t count = 0;
      // Point-to-point transfers per direction: count and bytes by peer.
      std::map<int64_t, std::pair<int64_t, int64_t>> sends, receives;
      for (auto func : program.getBody().getOps<rt::FuncOp>()) {
        int64_t n = calls.lookup(func.getSymName());
        // Functions the step does not call (evaluation's and sampling's
        // forward passes) move nothing in it.
        if (n == 0)
          continue;
        for (auto kernel : func.getBody().getOps<rt::KernelOp>()) {
          rt::OpCode opcode = kernel.getOpcode();
          if (opcode == rt::OpCode::Send || opcode == rt::OpCode::Recv) {
            bool send = opcode == rt::OpCode::Send;
            int64_t bytes = movedBytes(kernel);
            auto &entry = (send ? sends : receives)[kernel.getInts()[0]];
            entry.first += n;
            entry.second += n * bytes;
            if (auto reason = kernel->getAttrOfType<StringAttr>("reason"))
              os << llvm::format("  %-16s %5lld  %-14s %-8s %5lld %14s  %s\n",
                                 func.getSymName().str().c_str(), (long long)n,
                                 send ? "send" : "recv", "pp", 2LL,
                                 withCommas(bytes).c_str(),
                                 reason.str().c_str());
            continue;
          }
          if (!isCollective(kernel.getOpcode()))
            continue;
          int64_t group = kernel.getInts().empty() ? -1 : kernel.getInts()[0];
          int64_t bytes = movedBytes(kernel);
          auto reason = kernel->getAttrOfType<StringAttr>("reason");
          os << llvm::format(
              "  %-16s %5lld  %-14s %-8s %5lld %14s  %s\n",
              func.getSymName().str().c_str(), (long long)n,
              stringifyOpCode(kernel.getOpcode()).str().c_str(),
              groupText(group).c_str(), (long long)groupRanks(group),
              withCommas(bytes).c_str(), reason ? reason.str().c_str() : "");
          totals[groupText(group)] += n * bytes;
          sent[groupText(group)] +=
              n * wireBytes(kernel.getOpcode(), bytes, groupRanks(group));
          count += n;
        }
      }
      if (totals.empty())
        os << "  (no collectives: every rank computes alone)\n";
      for (auto &[group, bytes] : totals)
        os << llvm::format(
            "  total over %-8s %14s B per step, %s B sent by each rank (ring "
            "algorithms)\n",
            group.c_str(), withCommas(bytes).c_str(),
            withCommas(static_cast<int64_t>(sent[group] + 0.5)).c_str());
      os << "  collectives per step: " << count << "\n";
      for (auto [what, list] : {std::pair{"sends to", &sends},
                                std::pair{"receives from", &receives}})
        for (auto &[peer, entry] : *list)
          os << "  point-to-point " << what << " pipeline rank " << peer << ": "
             << entry.first << " per step, " << withCommas(entry.second)
             << " B\n";
    }
    output->keep();
    markAllAnalysesPreserved();
  }

  static std::string withCommas(int64_t value) {
    std::string digits = std::to_string(value), text;
    for (size_t i = 0; i < digits.size(); ++i) {
      if (i && (digits.size() - i) % 3 == 0)
        text += ',';
      text += digits[i];
    }
    return text;
  }
};

} // namespace
