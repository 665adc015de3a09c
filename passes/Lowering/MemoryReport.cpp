//===- MemoryReport.cpp - bytes per rank from the compiled plan -----------===//
//
// Reads the memory a compiled rt program needs off the program itself:
// persistent bytes by role, and for each function the most temporary bytes
// live at once. Live bytes are the union of the live buffers' byte ranges,
// so a reshaped view and its source count once.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

namespace triad {
#define GEN_PASS_DEF_MEMORYREPORT
#include "passes/Lowering/Passes.h.inc"
} // namespace triad

using namespace mlir;
using namespace triad;

namespace {

std::string withCommas(int64_t bytes) {
  std::string digits = std::to_string(bytes), result;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0)
      result += ',';
    result += digits[i];
  }
  return result;
}

std::string human(int64_t bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  if (unit == 0)
    os << bytes << " B";
  else
    os << llvm::format("%.1f %s", value, units[unit]);
  return text;
}

/// Bytes in the union of [offset, offset + bytes) ranges.
int64_t unionBytes(std::vector<std::pair<int64_t, int64_t>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  int64_t total = 0, end = -1;
  for (auto [begin, stop] : ranges) {
    if (begin >= end) {
      total += stop - begin;
      end = stop;
    } else if (stop > end) {
      total += stop - end;
      end = stop;
    }
  }
  return total;
}

/// The most temporary bytes live at once while `func` runs.
int64_t peakTemporaryBytes(rt::FuncOp func,
                           const llvm::DenseSet<Value> &persistent) {
  // Lifetimes: arguments from 0, kernel k at k + 1, results to the end.
  llvm::MapVector<Value, std::pair<int64_t, int64_t>> lifetimes;
  auto touch = [&](Value buffer, int64_t time) {
    if (persistent.contains(buffer))
      return;
    auto [it, inserted] = lifetimes.try_emplace(buffer, time, time);
    it->second.first = std::min(it->second.first, time);
    it->second.second = std::max(it->second.second, time);
  };
  for (Value arg : func.getArgs())
    touch(arg, 0);
  int64_t time = 0;
  for (auto kernel : func.getBody().getOps<rt::KernelOp>()) {
    ++time;
    for (Value v : kernel.getInputs())
      touch(v, time);
    for (Value v : kernel.getOutputs())
      touch(v, time);
  }
  for (Value result : func.getResults())
    touch(result, time + 1);
  int64_t peak = 0;
  for (int64_t t = 0; t <= time + 1; ++t) {
    std::vector<std::pair<int64_t, int64_t>> live;
    for (auto &[buffer, life] : lifetimes)
      if (life.first <= t && t <= life.second) {
        auto op = buffer.getDefiningOp<rt::BufferOp>();
        live.emplace_back(op.getOffset(), op.getOffset() + op.getBytes());
      }
    peak = std::max(peak, unionBytes(std::move(live)));
  }
  return peak;
}

struct MemoryReportPass : triad::impl::MemoryReportBase<MemoryReportPass> {
  using MemoryReportBase::MemoryReportBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto programs = module.getOps<rt::ProgramOp>();
    if (programs.empty()) {
      emitError(module.getLoc(),
                "holds no rt.program to report on; run "
                "--triad-lower-to-rt or --triad-train-pipeline first");
      return signalPassFailure();
    }
    std::string message;
    auto output = openOutputFile(file, &message);
    if (!output) {
      emitError(module.getLoc(), "cannot write the memory report: ") << message;
      return signalPassFailure();
    }
    llvm::raw_ostream &os = output->os();
    for (rt::ProgramOp program : programs) {
      std::map<rt::Role, std::pair<int64_t, int64_t>> byRole;
      llvm::DenseSet<Value> persistent;
      for (auto p : program.getBody().getOps<rt::PersistentOp>()) {
        auto buffer = p.getBuffer().getDefiningOp<rt::BufferOp>();
        byRole[p.getRole()].first += buffer.getBytes();
        ++byRole[p.getRole()].second;
        persistent.insert(p.getBuffer());
      }
      auto line = [&](StringRef what, int64_t bytes, StringRef note = "") {
        os << llvm::format("  %-40s %14s B  %10s", what.str().c_str(),
                           withCommas(bytes).c_str(), human(bytes).c_str());
        if (!note.empty())
          os << "  " << note;
        os << "\n";
      };
      auto count = [&](rt::Role role) {
        return std::to_string(byRole[role].second) + " tensors";
      };
      os << "triad memory report: program @" << program.getSymName()
         << " (pipeline rank " << program.getPipelineRank() << ")\n";
      line("parameters", byRole[rt::Role::Parameter].first,
           count(rt::Role::Parameter));
      line("optimizer state", byRole[rt::Role::State].first,
           count(rt::Role::State));
      line("gradient accumulators", byRole[rt::Role::Accumulator].first,
           count(rt::Role::Accumulator));
      for (auto func : program.getBody().getOps<rt::FuncOp>()) {
        std::string what =
            (func.getSymName() == "microbatch_step" ? "activations at peak"
                                                    : "temporaries at peak") +
            std::string(" (") + func.getSymName().str() + ")";
        line(what, peakTemporaryBytes(func, persistent));
      }
      line("kernel workspace", 0, "(no kernel of the plan takes any)");
      line("arena", program.getArenaBytes(),
           "(persistent tensors + the largest function's temporaries, "
           "aligned)");
    }
    output->keep();
    markAllAnalysesPreserved();
  }
};

} // namespace
