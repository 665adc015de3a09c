//===- MemoryReport.cpp - bytes per rank from the compiled plan -----------===//
//
// Reads the memory a compiled rt program needs off the program itself:
// persistent bytes by role, under a pipeline the bytes its stages keep
// between calls (a copy per microbatch live in them at once), and for each
// function the most temporary bytes live at once. Live bytes are the union
// of the live buffers' byte ranges, so a reshaped view and its source count
// once.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "runtime/schedule/Schedule.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <map>
#include <vector>

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

/// Calls `visit(buffer, time, write)` for each access of `func` to a buffer
/// outside `kept` (persistent tensors, a pipeline stage's slotted values):
/// its arguments written at time 0, kernel k's inputs read and then its
/// outputs written at time k + 1, its results read after the last kernel.
/// Returns that last time.
template <typename Visit>
int64_t visitTemporaries(rt::FuncOp func, const llvm::DenseSet<Value> &kept,
                         Visit visit) {
  auto access = [&](Value buffer, int64_t time, bool write) {
    if (kept.contains(buffer))
      return;
    if (auto op = buffer.getDefiningOp<rt::BufferOp>())
      visit(op, time, write);
  };
  int64_t time = 0;
  for (Value arg : func.getArgs())
    access(arg, time, true);
  for (auto kernel : func.getBody().getOps<rt::KernelOp>()) {
    ++time;
    for (Value v : kernel.getInputs())
      access(v, time, false);
    for (Value v : kernel.getOutputs())
      access(v, time, true);
  }
  ++time;
  for (Value result : func.getResults())
    access(result, time, false);
  return time;
}

/// The most temporary bytes live at once while `func` runs. A byte is live
/// from an instruction that writes it to the last instruction that reads
/// what was written (arguments are written before the first instruction,
/// results read after the last). Liveness is followed per byte range, not
/// per buffer, so a reshaped view reading what its source wrote keeps
/// those bytes live, and two buffers reusing the same bytes at different
/// times do not. Buffers in `kept` (persistent tensors, a pipeline stage's
/// slotted values) are counted elsewhere.
int64_t peakTemporaryBytes(rt::FuncOp func, const llvm::DenseSet<Value> &kept) {
  struct Access {
    int64_t time;
    bool write;
    int64_t begin, end;
  };
  std::vector<Access> accesses;
  int64_t time = visitTemporaries(
      func, kept, [&](rt::BufferOp op, int64_t at, bool write) {
        accesses.push_back(
            {at, write, static_cast<int64_t>(op.getOffset()),
             static_cast<int64_t>(op.getOffset() + op.getBytes())});
      });

  // Segments between consecutive buffer boundaries are covered whole by
  // every buffer that touches them.
  std::vector<int64_t> bounds;
  for (const Access &a : accesses) {
    bounds.push_back(a.begin);
    bounds.push_back(a.end);
  }
  llvm::sort(bounds);
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  std::vector<int64_t> liveBytes(time + 2, 0);
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    int64_t begin = bounds[s], end = bounds[s + 1];
    // Writes and reads of this segment in time order (reads of an
    // instruction before its writes).
    std::vector<std::pair<int64_t, bool>> events;
    for (const Access &a : accesses)
      if (a.begin <= begin && end <= a.end)
        events.emplace_back(a.time, a.write);
    llvm::sort(events);
    for (size_t i = 0; i < events.size(); ++i) {
      if (!events[i].second)
        continue;
      int64_t from = events[i].first, to = from;
      for (size_t j = i + 1; j < events.size() && !events[j].second; ++j)
        to = events[j].first;
      for (int64_t t = from; t <= to; ++t)
        liveBytes[t] += end - begin;
    }
  }
  return *std::max_element(liveBytes.begin(), liveBytes.end());
}

/// Where `func`'s temporaries end in the arena: the end of the highest
/// buffer it touches outside `kept` (0 for none). The lowering places each
/// function's temporaries from the end of the kept values by their
/// lifetimes; the span can exceed the peak of live bytes where the
/// placement leaves gaps.
int64_t placedTemporaryEnd(rt::FuncOp func, const llvm::DenseSet<Value> &kept) {
  int64_t end = 0;
  visitTemporaries(func, kept, [&](rt::BufferOp op, int64_t, bool) {
    end = std::max<int64_t>(end, op.getOffset() + op.getBytes());
  });
  return end;
}

/// Bytes of the union of the byte ranges [begin, end).
int64_t unionBytes(std::vector<std::pair<int64_t, int64_t>> ranges) {
  llvm::sort(ranges);
  int64_t total = 0, reached = 0;
  for (auto [begin, end] : ranges) {
    begin = std::max(begin, reached);
    if (end > begin) {
      total += end - begin;
      reached = end;
    }
  }
  return total;
}

/// Under a pipeline (the plan names a schedule): per pipeline rank, the
/// most microbatches whose forward has run and whose backward (its input
/// part, under zero-bubble) has not, from the schedule the programs' steps
/// list. Empty without a pipeline; an error for a schedule that does not
/// parse or run.
FailureOr<std::vector<int>> peakInFlight(ModuleOp module) {
  auto programs = module.getOps<rt::ProgramOp>();
  auto plans = module.getOps<rt::PlanOp>();
  if (plans.empty() || !(*plans.begin()).getSchedule())
    return std::vector<int>();
  rt::PlanOp plan = *plans.begin();
  schedule::Schedule schedule;
  schedule.name = plan.getSchedule()->str();
  schedule.microbatches = plan.getMicrobatches();
  schedule.virtualStages = *plan.getVirtualStages();
  for (rt::ProgramOp program : programs) {
    auto steps = program.getBody().getOps<rt::StepOp>();
    if (steps.empty() || !(*steps.begin()).getActions())
      return program.emitOpError("lists no schedule actions, but the plan "
                                 "names the pipeline schedule ")
             << schedule.name;
    size_t rank = program.getPipelineRank();
    if (schedule.actions.size() <= rank)
      schedule.actions.resize(rank + 1);
    for (StringRef token :
         (*steps.begin()).getActions()->getAsValueRange<StringAttr>()) {
      absl::StatusOr<schedule::Action> action =
          schedule::parseAction(token.str());
      if (!action.ok())
        return program.emitOpError() << std::string(action.status().message());
      schedule.actions[rank].push_back(*action);
    }
  }
  schedule.ranks = schedule.actions.size();
  if (absl::Status status = schedule::verify(schedule); !status.ok())
    return emitError(module.getLoc()) << std::string(status.message());
  return schedule::peakInFlight(schedule);
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
    // Under a pipeline a rank's calls pass activations from one to
    // another; the schedule (the plan's, every program's actions) says how
    // many microbatches each rank keeps in flight.
    FailureOr<std::vector<int>> inFlight = peakInFlight(module);
    if (failed(inFlight))
      return signalPassFailure();
    for (rt::ProgramOp program : programs) {
      std::map<rt::Role, std::pair<int64_t, int64_t>> byRole;
      llvm::DenseSet<Value> kept;
      // The end of the persistent and kept values: the temporaries are
      // placed above it.
      int64_t keptEnd = 0;
      for (auto p : program.getBody().getOps<rt::PersistentOp>()) {
        auto buffer = p.getBuffer().getDefiningOp<rt::BufferOp>();
        keptEnd =
            std::max<int64_t>(keptEnd, buffer.getOffset() + buffer.getBytes());
        byRole[p.getRole()].first += buffer.getBytes();
        ++byRole[p.getRole()].second;
        kept.insert(p.getBuffer());
      }
      // Every copy of the values a stage keeps between its calls.
      std::vector<std::pair<int64_t, int64_t>> slotted;
      int64_t mostSlots = 0;
      for (auto buffer : program.getBody().getOps<rt::BufferOp>())
        if (buffer.getSlots()) {
          int64_t begin = buffer.getOffset();
          slotted.push_back(
              {begin, begin + buffer.getBytes() +
                          (buffer.getSlotCount() - 1) * *buffer.getStride()});
          mostSlots = std::max(mostSlots, buffer.getSlotCount());
          keptEnd = std::max(keptEnd, slotted.back().second);
          kept.insert(buffer.getResult());
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
      // The bytes the lowering placed for the temporaries of the step's
      // calls and of the optimizer step, apart: the optimizer step's scale
      // with the parameters and the calls' with the microbatch (triad-plan
      // predicts each).
      int64_t callsPlaced = 0, applyPlaced = 0;
      StringRef callsWhere, applyWhere = "none";
      for (auto func : program.getBody().getOps<rt::FuncOp>()) {
        int64_t placed =
            std::max<int64_t>(placedTemporaryEnd(func, kept) - keptEnd, 0);
        if (func.getSymName() == "apply_step") {
          applyPlaced = placed;
          applyWhere = func.getSymName();
        } else if (placed > callsPlaced || callsWhere.empty()) {
          callsPlaced = placed;
          callsWhere = func.getSymName();
        }
      }
      auto placedLines = [&] {
        line("  placed for the step's calls", callsPlaced,
             ("(in " + callsWhere + ")").str());
        line("  placed for the optimizer step", applyPlaced,
             ("(in " + applyWhere + ")").str());
      };
      if (inFlight->empty()) {
        for (auto func : program.getBody().getOps<rt::FuncOp>()) {
          std::string what =
              (func.getSymName() == "microbatch_step" ||
                       func.getSymName() == "last_microbatch_step"
                   ? "activations at peak"
                   : "temporaries at peak") +
              std::string(" (") + func.getSymName().str() + ")";
          line(what, peakTemporaryBytes(func, kept));
        }
        placedLines();
      } else {
        // A pipeline rank's stages keep activations from a microbatch's
        // forward to its backward, one slot per microbatch in flight; each
        // call's own temporaries share the bytes above them.
        line("activations kept between calls", unionBytes(slotted),
             "(" + std::to_string(mostSlots) + " slots; at most " +
                 std::to_string((*inFlight)[program.getPipelineRank()]) +
                 " microbatches in flight)");
        int64_t peak = 0;
        StringRef where;
        for (auto func : program.getBody().getOps<rt::FuncOp>())
          if (int64_t bytes = peakTemporaryBytes(func, kept); bytes > peak) {
            peak = bytes;
            where = func.getSymName();
          }
        line("temporaries at peak", peak, ("(in " + where + ")").str());
        placedLines();
      }
      line("kernel workspace", 0,
           "(in the arena; CPU kernels keep small scratch of their own)");
      line("arena", program.getArenaBytes(),
           inFlight->empty()
               ? "(persistent tensors + the largest function's temporaries, "
                 "aligned)"
               : "(persistent tensors + activations kept between calls + the "
                 "largest function's temporaries, aligned)");
    }
    output->keep();
    markAllAnalysesPreserved();
  }
};

} // namespace
