//===- ScheduleReport.cpp - a pipeline schedule, checked and measured -----===//
//
// Implements --triad-schedule-report: builds a pipeline schedule with the
// runtime's schedule library (the same code that checks a loaded plan),
// verifies it and prints its per-rank actions, its unit-cost bubble next
// to the closed form and the microbatches each rank holds at once.
//
//===----------------------------------------------------------------------===//

#include "passes/Reports/Passes.h"

#include "dialects/Rt/RtDialect.h"

#include "runtime/schedule/Schedule.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>

namespace triad {
#define GEN_PASS_DEF_SCHEDULEREPORT
#include "passes/Reports/Passes.h.inc"
} // namespace triad

using namespace mlir;

namespace {

/// The closed form of a schedule's bubble, as text.
const char *closedFormText(llvm::StringRef name) {
  if (name == "interleaved")
    return "(p-1)/(v*m)";
  if (name == "zb-h1")
    return "(p-1)/(3*m)";
  return "(p-1)/m";
}

struct ScheduleReportPass
    : public triad::impl::ScheduleReportBase<ScheduleReportPass> {
  using ScheduleReportBase::ScheduleReportBase;

  void runOnOperation() override {
    auto fail = [&](absl::string_view message) {
      emitError(getOperation().getLoc(), "--triad-schedule-report: ")
          << llvm::StringRef(message.data(), message.size());
      signalPassFailure();
    };
    // After --triad-train-pipeline the module's plan names the schedule it
    // was compiled for: that is the one to report. An option given as well
    // must agree with it.
    for (auto plan : getOperation().getOps<triad::rt::PlanOp>()) {
      if (!plan.getSchedule())
        continue;
      int64_t compiledPp = 1;
      for (auto [axis, size] : llvm::zip(plan.getAxes(), plan.getAxisSizes()))
        if (cast<StringAttr>(axis).getValue() == "pp")
          compiledPp = size;
      std::string compiled = plan.getSchedule()->str();
      auto differs = [](const auto &option, auto value) {
        return option.hasValue() &&
               option.getValue() != static_cast<int64_t>(value);
      };
      std::string asked =
          schedule == "zero-bubble" ? "zb-h1" : schedule.getValue();
      if ((schedule.hasValue() && asked != compiled) ||
          differs(pp, compiledPp) ||
          differs(microbatches, plan.getMicrobatches()) ||
          differs(virtualStages, *plan.getVirtualStages()))
        return fail(
            ("the module is compiled for schedule=" + compiled +
             " pp=" + std::to_string(compiledPp) +
             " microbatches=" + std::to_string(plan.getMicrobatches()) +
             " virtual-stages=" + std::to_string(*plan.getVirtualStages()) +
             "; give the report no options, or these")
                .c_str());
      schedule = compiled;
      pp = compiledPp;
      microbatches = plan.getMicrobatches();
      virtualStages = *plan.getVirtualStages();
    }
    std::string name =
        schedule == "zero-bubble" ? "zb-h1" : schedule.getValue();
    constexpr int64_t limit = std::numeric_limits<int>::max();
    if (pp > limit || microbatches > limit || virtualStages > limit)
      return fail("pp, microbatches and virtual-stages must fit in an int");
    absl::StatusOr<triad::schedule::Schedule> built = triad::schedule::build(
        name, static_cast<int>(pp), static_cast<int>(microbatches),
        static_cast<int>(virtualStages));
    if (!built.ok())
      return fail(built.status().message());
    if (absl::Status status = triad::schedule::verify(*built); !status.ok())
      return fail(status.message());
    absl::StatusOr<triad::schedule::Timeline> timeline =
        triad::schedule::simulate(*built);
    if (!timeline.ok())
      return fail(timeline.status().message());

    llvm::raw_ostream &os = llvm::outs();
    auto count = [](int64_t n, llvm::StringRef one, llvm::StringRef many) {
      return std::to_string(n) + " " + (n == 1 ? one : many).str();
    };
    os << "triad schedule report: " << name << ", "
       << count(pp, "pipeline rank", "pipeline ranks") << ", "
       << count(microbatches, "microbatch", "microbatches") << ", "
       << count(virtualStages, "stage", "stages") << " per rank\n";
    for (auto [rank, actions] : llvm::enumerate(built->actions)) {
      os << "  rank " << rank << ":";
      for (const triad::schedule::Action &action : actions)
        os << " " << triad::schedule::format(action);
      os << "\n";
    }
    os << "  check: every transfer matched, inputs before passes, no "
          "deadlock\n";
    os << "  bubble (F=1, B=2): "
       << llvm::format("%.4f", timeline->bubbleFraction)
       << " of compute time (closed form " << closedFormText(name) << ": "
       << llvm::format("%.4f", triad::schedule::closedFormBubble(
                                   name, static_cast<int>(pp),
                                   static_cast<int>(microbatches),
                                   static_cast<int>(virtualStages)))
       << ")\n";
    os << "  peak microbatches in flight per rank:";
    for (int peak : triad::schedule::peakInFlight(*built))
      os << " " << peak;
    os << "\n";
    markAllAnalysesPreserved();
  }
};

} // namespace
