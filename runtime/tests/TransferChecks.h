//===- TransferChecks.h - Send and Recv between pipeline ranks --*- C++ -*-===//
//
// A plan of two pipeline ranks whose function "f" moves data both ways:
// pipeline rank 0 sends its x and -x (both with tag 0, so they match in
// order) to pipeline rank 1, which returns them as received along with
// 2 * (the first) + its own x, which it sends back (tag 1) for pipeline
// rank 0 to return. Rank r passes x[i] = 100 r + i + 1, so every result
// names the rank it came from. The thread tests and the MPI test (under
// mpirun) run it on any mesh with a "pp" axis of 2 and compare.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_TESTS_TRANSFERCHECKS_H
#define TRIAD_RUNTIME_TESTS_TRANSFERCHECKS_H

#include "runtime/executor/CpuExecutor.h"
#include "runtime/tests/PlanBuilder.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <string>
#include <utility>
#include <vector>

namespace triad::rt::tests {

/// The transfer plan on `mesh` (which has the axis "pp" of size 2).
inline std::string
buildTransferPlan(std::vector<std::pair<std::string, uint32_t>> mesh) {
  using plan::DType;
  using plan::OpCode;
  PlanBuilder b;
  b.mesh = std::move(mesh);
  b.batch = 4;
  enum { kForward = 0, kBack = 1 };

  uint32_t x = b.value(DType::F32, {2, 3}),
           negated = b.value(DType::F32, {2, 3}),
           back = b.value(DType::F32, {2, 3});
  b.function("f", {x});
  b.instr(OpCode::Send, {x}, {}, {1, kForward});
  b.instr(OpCode::Scale, {x}, {negated}, {}, {-1.0});
  b.instr(OpCode::Send, {negated}, {}, {1, kForward});
  b.instr(OpCode::Recv, {}, {back}, {1, kBack});
  b.results({back}, {});

  b.program(1);
  x = b.value(DType::F32, {2, 3});
  uint32_t first = b.value(DType::F32, {2, 3}),
           second = b.value(DType::F32, {2, 3}),
           doubled = b.value(DType::F32, {2, 3}),
           reply = b.value(DType::F32, {2, 3});
  b.function("f", {x});
  b.instr(OpCode::Recv, {}, {first}, {0, kForward});
  b.instr(OpCode::Recv, {}, {second}, {0, kForward});
  b.instr(OpCode::Scale, {first}, {doubled}, {}, {2.0});
  b.instr(OpCode::Add, {doubled, x}, {reply});
  b.instr(OpCode::Send, {reply}, {}, {0, kBack});
  b.results({first, second, reply}, {});
  return b.build();
}

inline std::vector<float> transferInput(int64_t rank) {
  std::vector<float> x(6);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(100 * rank + static_cast<int64_t>(i) + 1);
  return x;
}

/// Runs "f" on this rank's executor (of pipeline rank `pipelineRank`,
/// whose peer is world rank `peer`) and compares its results; returns the
/// differences ("" when all match).
inline std::string checkTransfers(CpuExecutor &executor, int64_t rank,
                                  uint32_t pipelineRank, int64_t peer) {
  HostTensor x;
  x.shape = {2, 3};
  x.floats = transferInput(rank);
  auto results = executor.run("f", {x});
  if (!results.ok())
    return std::string(results.status().message());
  // Pipeline rank 0 is the sender of x, pipeline rank 1 the replier.
  std::vector<float> sent = transferInput(pipelineRank == 0 ? rank : peer),
                     own = transferInput(pipelineRank == 0 ? peer : rank),
                     negated, reply;
  for (size_t i = 0; i < sent.size(); ++i) {
    negated.push_back(-sent[i]);
    reply.push_back(2 * sent[i] + own[i]);
  }
  std::vector<std::vector<float>> expected =
      pipelineRank == 0 ? std::vector<std::vector<float>>{reply}
                        : std::vector<std::vector<float>>{sent, negated, reply};
  if (results->size() != expected.size())
    return absl::StrCat("rank ", rank, ": ", results->size(), " results");
  std::vector<std::string> errors;
  for (size_t i = 0; i < expected.size(); ++i)
    if ((*results)[i].floats != expected[i])
      errors.push_back(absl::StrCat(
          "rank ", rank, " (pipeline rank ", pipelineRank, "): result ", i,
          ": expected ", absl::StrJoin(expected[i], " "), ", got ",
          absl::StrJoin((*results)[i].floats, " ")));
  return absl::StrJoin(errors, "\n");
}

} // namespace triad::rt::tests

#endif // TRIAD_RUNTIME_TESTS_TRANSFERCHECKS_H
