//===- CollectiveChecks.h - every collective on a 2 x 2 mesh ----*- C++ -*-===//
//
// A plan for the mesh dp=2 x tp=2 whose function "collectives" runs every
// collective of the plan format (and AllSlice, which takes this member's
// piece without communicating) over the groups [tp], [dp], [dp, tp] and
// [tp, dp], along leading and non-leading dimensions, and a reference that
// computes each result element by element from every rank's input (rank r
// passes x[i] = 1000 r + i). The thread tests and the MPI test (under
// mpirun) run it through the executor and compare.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_TESTS_COLLECTIVECHECKS_H
#define TRIAD_RUNTIME_TESTS_COLLECTIVECHECKS_H

#include "runtime/executor/CpuExecutor.h"
#include "runtime/tests/PlanBuilder.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <string>
#include <vector>

namespace triad::rt::tests {

using Shape = std::vector<int64_t>;

/// The groups of the plan, by index.
inline const std::vector<std::vector<std::string>> &checkedGroups() {
  static const std::vector<std::vector<std::string>> groups = {
      {"tp"}, {"dp"}, {"dp", "tp"}, {"tp", "dp"}};
  return groups;
}

/// One collective of the plan: op, group, dims, result shape.
struct CheckedCollective {
  plan::OpCode op;
  int64_t group, dim = 0, concatDim = 0;
  Shape result;
};

/// x is [2, 4, 3] on every rank.
inline const Shape &checkedInputShape() {
  static const Shape shape = {2, 4, 3};
  return shape;
}

inline const std::vector<CheckedCollective> &checkedCollectives() {
  using plan::OpCode;
  static const std::vector<CheckedCollective> collectives = {
      {OpCode::AllReduce, 0, 0, 0, {2, 4, 3}},
      {OpCode::AllReduce, 2, 0, 0, {2, 4, 3}}, // in place, see below
      {OpCode::AllGather, 0, 1, 0, {2, 8, 3}},
      {OpCode::AllGather, 3, 2, 0, {2, 4, 12}},
      {OpCode::AllGather, 1, 0, 0, {4, 4, 3}},
      {OpCode::ReduceScatter, 0, 1, 0, {2, 2, 3}},
      {OpCode::ReduceScatter, 2, 1, 0, {2, 1, 3}},
      {OpCode::ReduceScatter, 1, 0, 0, {1, 4, 3}},
      {OpCode::AllToAll, 0, 1, 2, {2, 2, 6}},
      {OpCode::AllToAll, 2, 1, 0, {8, 1, 3}},
      {OpCode::AllToAll, 3, 1, 1, {2, 4, 3}},
      {OpCode::AllToAll, 1, 0, 2, {1, 4, 6}},
      {OpCode::AllSlice, 0, 1, 0, {2, 2, 3}},
      {OpCode::AllSlice, 3, 1, 0, {2, 1, 3}},
      {OpCode::AllSlice, 1, 0, 0, {1, 4, 3}},
  };
  return collectives;
}

/// The plan: function "collectives" takes x and returns one result per
/// checked collective. The second all-reduce runs in place on a copy of x.
inline std::string buildCollectivesPlan() {
  PlanBuilder b;
  b.mesh = {{"dp", 2}, {"tp", 2}};
  b.batch = 2;
  b.groups = checkedGroups();
  uint32_t x = b.value(plan::DType::F32, checkedInputShape());
  b.function("collectives", {x});
  std::vector<uint32_t> results;
  for (const CheckedCollective &c : checkedCollectives()) {
    uint32_t out = b.value(plan::DType::F32, c.result);
    std::vector<int64_t> ints = {c.group};
    if (c.op != plan::OpCode::AllReduce)
      ints.push_back(c.dim);
    if (c.op == plan::OpCode::AllToAll)
      ints.push_back(c.concatDim);
    if (c.op == plan::OpCode::AllReduce && c.group == 2) {
      b.instr(plan::OpCode::Copy, {x}, {out});
      b.instr(c.op, {out}, {out}, ints);
    } else {
      b.instr(c.op, {x}, {out}, ints);
    }
    results.push_back(out);
  }
  b.results(results, {});
  return b.build();
}

inline std::vector<float> checkedInput(int64_t rank) {
  std::vector<float> x(24);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(1000 * rank + static_cast<int64_t>(i));
  return x;
}

/// The world ranks of the members of `rank`'s instance of group `group`
/// (dp slowest: rank = 2 dp + tp), in member order.
inline std::vector<int64_t> checkedMembers(int64_t group, int64_t rank) {
  int64_t dp = rank / 2, tp = rank % 2;
  switch (group) {
  case 0:
    return {2 * dp, 2 * dp + 1};
  case 1:
    return {tp, 2 + tp};
  case 2:
    return {0, 1, 2, 3};
  default:
    return {0, 2, 1, 3}; // [tp, dp]: member = 2 tp + dp
  }
}

/// The expected result of collective `c` on `rank`, element by element.
inline std::vector<float> expectedCollective(const CheckedCollective &c,
                                             int64_t rank) {
  const Shape &xShape = checkedInputShape();
  std::vector<int64_t> members = checkedMembers(c.group, rank);
  int64_t n = static_cast<int64_t>(members.size()), me = 0;
  for (int64_t m = 0; m < n; ++m)
    if (members[m] == rank)
      me = m;
  auto xAt = [&](int64_t owner, const Shape &index) {
    return checkedInput(
        owner)[(index[0] * xShape[1] + index[1]) * xShape[2] + index[2]];
  };
  std::vector<float> result;
  Shape index(3);
  for (index[0] = 0; index[0] < c.result[0]; ++index[0])
    for (index[1] = 0; index[1] < c.result[1]; ++index[1])
      for (index[2] = 0; index[2] < c.result[2]; ++index[2]) {
        float value = 0;
        switch (c.op) {
        case plan::OpCode::AllReduce:
          for (int64_t m : members)
            value += xAt(m, index);
          break;
        case plan::OpCode::AllGather: {
          Shape from = index;
          from[c.dim] = index[c.dim] % xShape[c.dim];
          value = xAt(members[index[c.dim] / xShape[c.dim]], from);
          break;
        }
        case plan::OpCode::AllSlice: {
          Shape from = index;
          from[c.dim] += me * c.result[c.dim];
          value = xAt(rank, from);
          break;
        }
        case plan::OpCode::ReduceScatter: {
          Shape from = index;
          from[c.dim] += me * c.result[c.dim];
          for (int64_t m : members)
            value += xAt(m, from);
          break;
        }
        default: { // AllToAll
          Shape piece = xShape;
          piece[c.dim] /= n;
          int64_t sender = index[c.concatDim] / piece[c.concatDim];
          Shape from = index;
          from[c.concatDim] -= sender * piece[c.concatDim];
          from[c.dim] += me * piece[c.dim];
          value = xAt(members[sender], from);
          break;
        }
        }
        result.push_back(value);
      }
  return result;
}

/// Runs "collectives" on this rank's executor and compares every result;
/// returns the differences ("" when all match).
inline std::string checkCollectives(CpuExecutor &executor, int64_t rank) {
  HostTensor x;
  x.shape = checkedInputShape();
  x.floats = checkedInput(rank);
  auto results = executor.run("collectives", {x});
  if (!results.ok())
    return std::string(results.status().message());
  std::vector<std::string> errors;
  for (size_t i = 0; i < checkedCollectives().size(); ++i) {
    const CheckedCollective &c = checkedCollectives()[i];
    std::vector<float> expected = expectedCollective(c, rank);
    const HostTensor &got = (*results)[i];
    if (got.shape != c.result || got.floats != expected)
      errors.push_back(absl::StrCat(
          "rank ", rank, ": collective ", i, " (", plan::EnumNameOpCode(c.op),
          " over group ", c.group, "): expected ", absl::StrJoin(expected, " "),
          ", got ", absl::StrJoin(got.floats, " ")));
  }
  return absl::StrJoin(errors, "\n");
}

} // namespace triad::rt::tests

#endif // TRIAD_RUNTIME_TESTS_COLLECTIVECHECKS_H
