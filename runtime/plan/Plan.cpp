//===- Plan.cpp - loading and verifying plan files ------------------------===//
//
// The semantic checks of a plan: see Plan.h. Every message says where the
// problem is (program, function, instruction) and what is wrong.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Plan.h"

#include "runtime/comm/Collectives.h"
#include "runtime/plan/Mesh.h"
#include "runtime/schedule/Schedule.h"
#include "runtime/support/Files.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <vector>

namespace triad::rt {

int64_t dtypeSize(plan::DType dtype) {
  switch (dtype) {
  case plan::DType::F32:
  case plan::DType::I32:
    return 4;
  case plan::DType::BF16:
  case plan::DType::F16:
    return 2;
  }
  return 0;
}

int64_t elementCount(const flatbuffers::Vector<int64_t> *shape) {
  int64_t count = 1;
  if (!shape)
    return 1;
  for (int64_t size : *shape) {
    if (size < 0 || (size != 0 && count > (int64_t(1) << 48) / size))
      return -1;
    count *= size;
  }
  return count;
}

int64_t meshSize(const plan::Plan &plan) {
  int64_t size = 1;
  if (plan.mesh())
    for (const plan::MeshAxis *axis : *plan.mesh())
      size *= axis->size();
  return size;
}

int64_t meshAxisSize(const plan::Plan &plan, const std::string &name) {
  if (plan.mesh())
    for (const plan::MeshAxis *axis : *plan.mesh())
      if (axis->name()->str() == name)
        return axis->size();
  return 1;
}

int64_t microbatchSamples(const plan::Plan &plan) {
  int64_t dp = meshAxisSize(plan, "dp");
  if (plan.microbatches() <= 0 || dp <= 0)
    return 0;
  return plan.batch() / plan.microbatches() / dp;
}

namespace {

using Shape = std::vector<int64_t>;

Shape shapeOf(const plan::Value *value) {
  Shape shape;
  if (value->shape())
    shape.assign(value->shape()->begin(), value->shape()->end());
  return shape;
}

std::string text(const Shape &shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

bool isFloat(plan::DType dtype) { return dtype != plan::DType::I32; }

/// Whether two values may share bytes within one call. A call picks the
/// same slot of both, so slotted values with one stride keep their
/// distance; otherwise each copy's bytes count.
bool mayOverlap(const plan::Value &a, const plan::Value &b) {
  auto span = [](const plan::Value &v, bool allSlots) {
    uint64_t begin = v.region()->offset(), end = begin + v.region()->bytes();
    if (allSlots && v.slots() > 1)
      end += (v.slots() - 1) * v.slot_stride();
    return std::make_pair(begin, end);
  };
  if (a.region()->bytes() == 0 || b.region()->bytes() == 0)
    return false;
  bool sameCopies =
      a.slots() == b.slots() && a.slot_stride() == b.slot_stride();
  auto [aBegin, aEnd] = span(a, !sameCopies);
  auto [bBegin, bEnd] = span(b, !sameCopies);
  return aBegin < bEnd && bBegin < aEnd;
}

/// Checks one program; errors carry the location prefix.
class ProgramChecker {
public:
  ProgramChecker(const plan::Plan &planRoot, const plan::Program &program,
                 size_t index)
      : planRoot(planRoot), program(program),
        where(absl::StrCat("program ", index)) {}

  absl::Status check();

private:
  absl::Status fail(const std::string &what) const {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
  }
  absl::Status checkValues();
  absl::Status checkPersistent();
  absl::Status checkSplit(const plan::Persistent &p, const Shape &local);
  absl::Status checkSignature(const plan::Function &function);
  absl::Status checkStep();
  absl::Status checkInstr(const plan::Instr &instr);
  absl::Status checkCollective(plan::OpCode op, const std::vector<uint32_t> &in,
                               const std::vector<uint32_t> &out,
                               const std::vector<int64_t> &ints);
  absl::Status checkTransfer(plan::OpCode op, const std::vector<uint32_t> &in,
                             const std::vector<uint32_t> &out,
                             const std::vector<int64_t> &ints);

  const plan::Value *value(uint32_t index) const {
    return program.values()->Get(index);
  }

  const plan::Plan &planRoot;
  const plan::Program &program;
  std::string where;
};

absl::Status ProgramChecker::check() {
  if (!program.values() || !program.functions())
    return fail("has no values or no functions");
  if (program.arena_bytes() > (uint64_t(1) << 44))
    return fail(absl::StrCat("arena of ", program.arena_bytes(),
                             " bytes exceeds the limit of 2^44"));
  if (absl::Status status = checkValues(); !status.ok())
    return status;
  if (absl::Status status = checkPersistent(); !status.ok())
    return status;
  std::set<std::string> names;
  for (const plan::Function *function : *program.functions()) {
    std::string name = function->name()->str();
    if (!names.insert(name).second)
      return fail(absl::StrCat("function '", name, "' appears twice"));
    std::string outer = where;
    where = absl::StrCat(outer, ", function '", name, "'");
    if (absl::Status status = checkSignature(*function); !status.ok())
      return status;
    if (function->body()) {
      for (size_t i = 0; i < function->body()->size(); ++i) {
        const plan::Instr *instr = function->body()->Get(i);
        std::string inner = where;
        where = absl::StrCat(inner, ", instruction ", i, " (",
                             plan::EnumNameOpCode(instr->op()), ")");
        if (absl::Status status = checkInstr(*instr); !status.ok())
          return status;
        where = inner;
      }
    }
    where = outer;
  }
  return checkStep();
}

absl::Status ProgramChecker::checkSignature(const plan::Function &function) {
  for (const auto *list : {function.args(), function.results()})
    if (list)
      for (uint32_t index : *list)
        if (index >= program.values()->size())
          return fail(
              absl::StrCat("argument or result ", index, " is not a value"));
  size_t args = function.args() ? function.args()->size() : 0;
  // Without kinds, the arguments are the caller's to give (a function the
  // step does not call); with them, the runtime fills each one.
  if (function.arg_kinds() && function.arg_kinds()->size() > 0) {
    if (function.arg_kinds()->size() != args)
      return fail(absl::StrCat("has ", args, " arguments but ",
                               function.arg_kinds()->size(),
                               " argument kinds"));
    for (size_t i = 0; i < args; ++i) {
      plan::ArgKind kind = function.arg_kinds()->Get(i);
      if (kind != plan::ArgKind::Tokens && kind != plan::ArgKind::Labels &&
          kind != plan::ArgKind::PrefixLengths)
        return fail(absl::StrCat("argument ", i, " has an unknown kind ",
                                 static_cast<int>(kind)));
      bool perSample = kind == plan::ArgKind::PrefixLengths;
      Shape expected = {microbatchSamples(planRoot)};
      if (!perSample)
        expected.push_back(planRoot.seq());
      const plan::Value *arg = value(function.args()->Get(i));
      if (arg->dtype() != plan::DType::I32 || shapeOf(arg) != expected)
        return fail(absl::StrCat(
            "argument ", i, " (", plan::EnumNameArgKind(kind),
            ") must be i32 of shape ", text(expected),
            perSample ? " (microbatch samples)" : " (microbatch samples, seq)",
            " but is ", plan::EnumNameDType(arg->dtype()), " ",
            text(shapeOf(arg))));
    }
  }
  size_t results = function.results() ? function.results()->size() : 0;
  if (function.result_names() && function.result_names()->size() > 0) {
    if (function.result_names()->size() != results)
      return fail(absl::StrCat("has ", results, " results but ",
                               function.result_names()->size(),
                               " result names"));
    std::set<std::string> names;
    for (size_t i = 0; i < results; ++i) {
      std::string name = function.result_names()->Get(i)->str();
      if (name.empty() || !names.insert(name).second)
        return fail(absl::StrCat("result ", i, " is unnamed or its name '",
                                 name, "' appears twice"));
      const plan::Value *result = value(function.results()->Get(i));
      if (result->dtype() != plan::DType::F32 || !shapeOf(result).empty())
        return fail(absl::StrCat("result '", name,
                                 "' must be an f32 scalar (the runtime logs "
                                 "it) but is ",
                                 plan::EnumNameDType(result->dtype()), " ",
                                 text(shapeOf(result))));
    }
  }
  return absl::OkStatus();
}

absl::Status ProgramChecker::checkStep() {
  if (!program.step())
    return absl::OkStatus();
  for (size_t i = 0; i < program.step()->size(); ++i) {
    const plan::Call *call = program.step()->Get(i);
    if (call->function() >= program.functions()->size())
      return fail(absl::StrCat("step call ", i, " names function ",
                               call->function(), " of ",
                               program.functions()->size()));
    const plan::Function *function = program.functions()->Get(call->function());
    if (call->microbatch() >= static_cast<uint64_t>(planRoot.microbatches()))
      return fail(absl::StrCat("step call ", i, " of '",
                               function->name()->str(), "' reads microbatch ",
                               call->microbatch(), " of ",
                               planRoot.microbatches()));
    uint32_t slots = slotsOf(program, *function) > 0 ? kMaxSlots : 1;
    if (call->slot() >= slots)
      return fail(absl::StrCat("step call ", i, " of '",
                               function->name()->str(), "' works on slot ",
                               call->slot(), ", outside [0, ", slots, ")"));
    size_t args = function->args() ? function->args()->size() : 0;
    size_t kinds = function->arg_kinds() ? function->arg_kinds()->size() : 0;
    if (args != kinds)
      return fail(absl::StrCat("step call ", i, " of '",
                               function->name()->str(),
                               "': the runtime cannot fill its arguments, "
                               "which have no kinds"));
  }
  return absl::OkStatus();
}

absl::Status ProgramChecker::checkValues() {
  for (size_t i = 0; i < program.values()->size(); ++i) {
    const plan::Value *v = program.values()->Get(i);
    int64_t size = dtypeSize(v->dtype());
    if (size == 0)
      return fail(absl::StrCat("value ", i, " has an unknown element type"));
    int64_t count = elementCount(v->shape());
    if (count < 0)
      return fail(absl::StrCat("value ", i, " has an invalid shape"));
    const plan::Region *region = v->region();
    if (region->offset() > program.arena_bytes() ||
        region->bytes() > program.arena_bytes() - region->offset())
      return fail(absl::StrCat("value ", i, " (bytes ", region->offset(), "..",
                               region->offset() + region->bytes(),
                               ") lies outside the arena of ",
                               program.arena_bytes(), " bytes"));
    if (region->bytes() < static_cast<uint64_t>(count * size))
      return fail(absl::StrCat("value ", i, " needs ", count * size,
                               " bytes but its region has ", region->bytes()));
    if (region->offset() % static_cast<uint64_t>(size) != 0)
      return fail(absl::StrCat("value ", i, " is not aligned to its ", size,
                               "-byte elements"));
    if (v->slots() == 0) {
      if (v->slot_stride() != 0)
        return fail(absl::StrCat("value ", i, " has a slot stride of ",
                                 v->slot_stride(), " but no slots"));
      continue;
    }
    // Copy k of a slotted value lies at offset + k * stride: the copies
    // stay apart, aligned and inside the arena.
    uint64_t stride = v->slot_stride(), last = v->slots() - 1;
    if (v->slots() > kMaxSlots || stride < region->bytes() ||
        stride % static_cast<uint64_t>(size) != 0)
      return fail(absl::StrCat(
          "value ", i, " has ", v->slots(), " slots ", stride,
          " bytes apart; slots are at most ", kMaxSlots,
          ", at least the value's ", region->bytes(),
          " bytes apart and a multiple of its ", size, "-byte elements"));
    uint64_t room = program.arena_bytes() - region->offset() - region->bytes();
    if (last > 0 && stride > room / last)
      return fail(absl::StrCat("value ", i, " (bytes ", region->offset(), "..",
                               region->offset() + region->bytes(), " in ",
                               v->slots(), " slots ", stride,
                               " bytes apart) lies outside the arena of ",
                               program.arena_bytes(), " bytes"));
  }
  return absl::OkStatus();
}

absl::Status ProgramChecker::checkPersistent() {
  if (!program.persistent())
    return absl::OkStatus();
  std::set<std::string> names;
  for (const plan::Persistent *p : *program.persistent()) {
    std::string name = p->name()->str();
    if (name.empty() || !names.insert(name).second)
      return fail(absl::StrCat("persistent tensor '", name,
                               "' is unnamed or appears twice"));
    if (p->value() >= program.values()->size())
      return fail(
          absl::StrCat("persistent tensor '", name, "' names no value"));
    if (value(p->value())->slots() != 0)
      return fail(absl::StrCat("persistent tensor '", name,
                               "' has slots; one copy lives between steps"));
    if (p->role() != plan::Role::Parameter && p->role() != plan::Role::State &&
        p->role() != plan::Role::Accumulator)
      return fail(
          absl::StrCat("persistent tensor '", name, "' has an unknown role"));
    if (p->role() == plan::Role::Accumulator &&
        (value(p->value())->dtype() != plan::DType::F32 ||
         p->init()->kind() != plan::InitKind::Zeros))
      return fail(absl::StrCat("accumulator '", name,
                               "' must be f32 and start from zeros"));
    Shape local = shapeOf(value(p->value()));
    if (!p->global_shape() || !p->offsets() ||
        p->global_shape()->size() != local.size() ||
        p->offsets()->size() != local.size())
      return fail(absl::StrCat("persistent tensor '", name,
                               "' needs a global shape and offsets of rank ",
                               local.size()));
    if (absl::Status status = checkSplit(*p, local); !status.ok())
      return status;
    const plan::Init *init = p->init();
    switch (init->kind()) {
    case plan::InitKind::Normal:
    case plan::InitKind::ScaledNormal:
      if (!(init->std() > 0.0) || !std::isfinite(init->std()) ||
          !init->stream() ||
          (init->kind() == plan::InitKind::ScaledNormal && init->layers() <= 0))
        return fail(absl::StrCat("persistent tensor '", name,
                                 "' has an invalid normal init"));
      break;
    case plan::InitKind::Zeros:
    case plan::InitKind::Ones:
      break;
    case plan::InitKind::Constant:
      if (!std::isfinite(init->value()))
        return fail(absl::StrCat("persistent tensor '", name,
                                 "' has a non-finite constant init"));
      break;
    default:
      return fail(absl::StrCat("persistent tensor '", name,
                               "' has an unknown init kind"));
    }
  }
  return absl::OkStatus();
}

absl::Status ProgramChecker::checkSplit(const plan::Persistent &p,
                                        const Shape &local) {
  std::string name = p.name()->str();
  size_t dims = local.size();
  if (p.split() && p.split()->size() != 0 && p.split()->size() != dims)
    return fail(absl::StrCat("persistent tensor '", name, "' has ",
                             p.split()->size(), " split entries for ", dims,
                             " dimensions"));
  const flatbuffers::Vector<int64_t> *padded = p.padded_shape();
  if (padded && padded->size() != dims)
    return fail(absl::StrCat("persistent tensor '", name, "' has a padded ",
                             "shape of rank ", padded->size(), ", not ", dims));
  std::set<std::string> used;
  for (size_t d = 0; d < dims; ++d) {
    int64_t pieces = 1;
    if (p.split() && p.split()->size() == dims && p.split()->Get(d)->axes())
      for (const flatbuffers::String *axis : *p.split()->Get(d)->axes()) {
        if (meshAxisIndex(planRoot, axis->string_view()) < 0 ||
            !used.insert(axis->str()).second)
          return fail(absl::StrCat("persistent tensor '", name,
                                   "' is split over '", axis->str(),
                                   "', which is no mesh axis or is named "
                                   "twice"));
        pieces *= meshAxisSize(planRoot, axis->str());
      }
    // The slice of the last piece must lie inside the global shape too
    // (the padded shape, which the pieces tile, when there is one).
    int64_t offset = p.offsets()->Get(d), global = p.global_shape()->Get(d);
    int64_t extent = padded ? padded->Get(d) : global;
    if (padded && (global < 1 || extent < global))
      return fail(absl::StrCat("persistent tensor '", name, "': padded ",
                               "dimension ", d, " (", extent, ") is smaller ",
                               "than its global size ", global));
    if (offset < 0 || global < 0 || local[d] > (extent - offset) / pieces)
      return fail(absl::StrCat("persistent tensor '", name,
                               "': its slice lies outside its ",
                               padded ? "padded" : "global", " shape"));
  }
  return absl::OkStatus();
}

absl::Status ProgramChecker::checkInstr(const plan::Instr &instr) {
  auto list = [](const flatbuffers::Vector<uint32_t> *v) {
    return v ? std::vector<uint32_t>(v->begin(), v->end())
             : std::vector<uint32_t>{};
  };
  std::vector<uint32_t> in = list(instr.inputs()), out = list(instr.outputs());
  for (uint32_t index : in)
    if (index >= program.values()->size())
      return fail(absl::StrCat("input ", index, " is not a value"));
  for (uint32_t index : out)
    if (index >= program.values()->size())
      return fail(absl::StrCat("output ", index, " is not a value"));
  std::vector<int64_t> ints;
  if (instr.ints())
    ints.assign(instr.ints()->begin(), instr.ints()->end());
  std::vector<double> floats;
  if (instr.floats())
    floats.assign(instr.floats()->begin(), instr.floats()->end());
  for (double f : floats)
    if (!std::isfinite(f))
      return fail("a float attribute is not finite");

  auto arity = [&](size_t inputs, size_t outputs, size_t intCount,
                   size_t floatCount) -> absl::Status {
    if (in.size() != inputs || out.size() != outputs ||
        ints.size() != intCount || floats.size() != floatCount)
      return fail(absl::StrCat("expects ", inputs, " inputs, ", outputs,
                               " outputs, ", intCount, " ints and ", floatCount,
                               " floats; has ", in.size(), ", ", out.size(),
                               ", ", ints.size(), " and ", floats.size()));
    return absl::OkStatus();
  };
  auto shape = [&](uint32_t index) { return shapeOf(value(index)); };
  auto dtype = [&](uint32_t index) { return value(index)->dtype(); };
  auto sameShapes = [&](std::initializer_list<uint32_t> indices) {
    Shape first = shape(*indices.begin());
    for (uint32_t index : indices)
      if (shape(index) != first)
        return fail(absl::StrCat("operand shapes differ: ", text(first),
                                 " and ", text(shape(index))));
    return absl::OkStatus();
  };
  auto floatValues = [&](std::initializer_list<uint32_t> indices) {
    for (uint32_t index : indices)
      if (!isFloat(dtype(index)))
        return fail(absl::StrCat("value ", index, " must be a float tensor"));
    return absl::OkStatus();
  };
  auto scalarF32 = [&](std::initializer_list<uint32_t> indices) {
    for (uint32_t index : indices)
      if (dtype(index) != plan::DType::F32 || !shape(index).empty())
        return fail(absl::StrCat("value ", index, " must be an f32 scalar"));
    return absl::OkStatus();
  };
  auto elementwise = [&](size_t inputs, size_t intCount,
                         size_t floatCount) -> absl::Status {
    if (absl::Status s = arity(inputs, 1, intCount, floatCount); !s.ok())
      return s;
    std::vector<uint32_t> all = in;
    all.push_back(out[0]);
    for (uint32_t index : all)
      if (shape(index) != shape(out[0]) || !isFloat(dtype(index)))
        return fail(absl::StrCat("operands must be float tensors of shape ",
                                 text(shape(out[0]))));
    return absl::OkStatus();
  };
#define CHECK_OK(expr)                                                         \
  if (absl::Status _s = (expr); !_s.ok())                                      \
    return _s;

  // The size of the group a vocab-parallel local form (or a dropout on a
  // piece of the batch) names.
  auto vocabPieces = [&](int64_t group, int64_t *pieces) {
    size_t groups = planRoot.groups() ? planRoot.groups()->size() : 0;
    if (group < 0 || static_cast<size_t>(group) >= groups)
      return fail(absl::StrCat("group ", group, " is not one of the ", groups,
                               " communicator groups"));
    *pieces = groupSize(planRoot, static_cast<uint32_t>(group));
    return absl::OkStatus();
  };
  // The vocabulary, padded to a multiple of tp where the compiler padded
  // it (tables and logits may hold that many rows or columns).
  int64_t tp = meshAxisSize(planRoot, "tp");
  int64_t paddedVocab = (planRoot.vocab() + tp - 1) / tp * tp;
  // A cross entropy's or log-sum-exp's [group[, classes]] from ints[at]
  // on: a group (-1 for none) where the op holds a piece (`piece`), the
  // classes of a padded vocabulary, no more than the plan's vocabulary
  // nor the `columns` x pieces it holds.
  auto vocabInts = [&](size_t at, bool piece, int64_t columns,
                       int64_t *pieces) -> absl::Status {
    *pieces = 1;
    if (ints.size() > at && (piece || ints[at] != -1))
      CHECK_OK(vocabPieces(ints[at], pieces));
    if (ints.size() > at + 1) {
      int64_t classes = ints[at + 1];
      if (classes < 1 || classes > planRoot.vocab() ||
          classes > columns * *pieces)
        return fail(absl::StrCat("classes ", classes, " must lie in [1, ",
                                 std::min(planRoot.vocab(), columns * *pieces),
                                 "]"));
    }
    return absl::OkStatus();
  };

  // Integer attributes that are flags hold 0 or 1, nothing else: `names`
  // from ints[first] on.
  auto flags = [&](std::initializer_list<const char *> names,
                   size_t first) -> absl::Status {
    size_t at = first;
    for (const char *name : names) {
      if (at < ints.size() && ints[at] != 0 && ints[at] != 1)
        return fail(absl::StrCat("flag ", name, " is ", ints[at],
                                 "; flags are 0 or 1"));
      ++at;
    }
    return absl::OkStatus();
  };

  switch (instr.op()) {
  case plan::OpCode::Embedding: {
    CHECK_OK(arity(2, 1, ints.size() == 1 ? 1 : 0, 0));
    Shape ids = shape(in[0]), table = shape(in[1]), result = ids;
    if (dtype(in[0]) != plan::DType::I32 || table.size() != 2)
      return fail("expects i32 ids and a [vocab, hidden] table");
    int64_t pieces = 1;
    if (ints.size() == 1)
      CHECK_OK(vocabPieces(ints[0], &pieces));
    if (table[0] * pieces > paddedVocab)
      return fail("the table has more rows than the vocabulary");
    result.push_back(table[1]);
    if (shape(out[0]) != result || dtype(out[0]) != dtype(in[1]))
      return fail(absl::StrCat("result must have shape ", text(result)));
    return absl::OkStatus();
  }
  case plan::OpCode::EmbeddingGrad: {
    CHECK_OK(arity(2, 1, ints.size() == 1 ? 1 : 0, 0));
    Shape ids = shape(in[0]), dy = shape(in[1]), table = shape(out[0]);
    Shape expected = ids;
    if (table.size() != 2 || dtype(in[0]) != plan::DType::I32)
      return fail("expects i32 ids and a [vocab, hidden] result");
    int64_t pieces = 1;
    if (ints.size() == 1)
      CHECK_OK(vocabPieces(ints[0], &pieces));
    expected.push_back(table[1]);
    if (dy != expected)
      return fail("dy must have the ids' shape plus the hidden size");
    if (table[0] * pieces > paddedVocab)
      return fail("the result has more rows than the vocabulary");
    return floatValues({in[1], out[0]});
  }
  case plan::OpCode::Matmul: {
    CHECK_OK(arity(2, 1, 2, 0));
    CHECK_OK(flags({"transpose_a", "transpose_b"}, 0));
    Shape a = shape(in[0]), b = shape(in[1]), c = shape(out[0]);
    bool ta = ints[0] != 0, tb = ints[1] != 0;
    if (a.size() < 2 || (b.size() != 2 && b.size() != a.size()))
      return fail("operands must be matrices (rhs of rank 2 or of lhs)");
    size_t r = a.size(), rb = b.size();
    int64_t m = ta ? a[r - 1] : a[r - 2], k = ta ? a[r - 2] : a[r - 1];
    int64_t kb = tb ? b[rb - 1] : b[rb - 2], n = tb ? b[rb - 2] : b[rb - 1];
    if (k != kb)
      return fail(absl::StrCat("contracting sizes differ: ", k, " and ", kb));
    Shape expected(a.begin(), a.end() - 2);
    if (rb == r && !std::equal(expected.begin(), expected.end(), b.begin()))
      return fail("batch dimensions differ");
    expected.push_back(m);
    expected.push_back(n);
    if (c != expected)
      return fail(absl::StrCat("result must have shape ", text(expected)));
    return floatValues({in[0], in[1], out[0]});
  }
  case plan::OpCode::Add: {
    CHECK_OK(arity(2, 1, 0, 0));
    Shape lhs = shape(in[0]), rhs = shape(in[1]);
    if (rhs.size() > lhs.size() ||
        !std::equal(rhs.begin(), rhs.end(), lhs.end() - rhs.size()))
      return fail("rhs must have the trailing shape of lhs");
    if (shape(out[0]) != lhs)
      return fail("the result must have the shape of lhs");
    return floatValues({in[0], in[1], out[0]});
  }
  case plan::OpCode::Mul:
    return elementwise(2, 0, 0);
  case plan::OpCode::Scale:
    return elementwise(1, 0, 1);
  case plan::OpCode::Activation:
  case plan::OpCode::ActivationGrad:
  case plan::OpCode::Gated: {
    size_t inputs = instr.op() == plan::OpCode::Activation ? 1 : 2;
    CHECK_OK(elementwise(inputs, 1, 0));
    if (ints[0] < 0 || ints[0] > 4)
      return fail("unknown activation");
    return absl::OkStatus();
  }
  case plan::OpCode::LayerNorm:
  case plan::OpCode::RmsNorm:
  case plan::OpCode::LayerNormGrad:
  case plan::OpCode::RmsNormGrad: {
    bool grad = instr.op() == plan::OpCode::LayerNormGrad ||
                instr.op() == plan::OpCode::RmsNormGrad;
    size_t inputs =
        grad
            ? 3
            : (instr.op() == plan::OpCode::LayerNorm && in.size() == 3 ? 3 : 2);
    CHECK_OK(arity(inputs, grad ? 2 : 1, 0, 1));
    Shape x = shape(in[0]);
    if (x.empty() || shape(in[1]) != Shape{x.back()})
      return fail("gamma must match the last dimension of x");
    if (!grad && inputs == 3 && shape(in[2]) != Shape{x.back()})
      return fail("beta must match the last dimension of x");
    if (shape(out[0]) != x ||
        (grad && (shape(in[2]) != x || shape(out[1]) != shape(in[1]))))
      return fail("results and dy must have the shapes of x and gamma");
    if (!(floats[0] > 0.0))
      return fail("epsilon must be positive");
    return floatValues({in[0], in[1], out[0]});
  }
  case plan::OpCode::Attention:
  case plan::OpCode::AttentionGrad: {
    bool grad = instr.op() == plan::OpCode::AttentionGrad;
    if (ints.size() != 5)
      return fail("expects heads, kv_heads, mask, has_prefix, has_slopes");
    CHECK_OK(flags({"has_prefix", "has_slopes"}, 3));
    int64_t heads = ints[0], kvHeads = ints[1], mask = ints[2];
    bool prefix = ints[3] != 0, slopes = ints[4] != 0;
    CHECK_OK(arity(3 + prefix + slopes + grad, grad ? 3 : 1, 5, 1));
    if (heads <= 0 || kvHeads <= 0 || heads % kvHeads != 0 || mask < 0 ||
        mask > 2 || prefix != (mask == 1))
      return fail("invalid heads, kv_heads or mask");
    Shape q = shape(in[0]), k = shape(in[1]), v = shape(in[2]);
    if (q.size() != 3 || k.size() != 3 || k != v || q[0] != k[0] ||
        q[2] % heads != 0 || k[2] != kvHeads * (q[2] / heads) ||
        (mask != 2 && q[1] != k[1]))
      return fail(absl::StrCat("q ", text(q), ", k ", text(k), " and v ",
                               text(v), " do not fit the heads"));
    size_t next = 3;
    if (prefix && (shape(in[next]) != Shape{q[0]} ||
                   dtype(in[next++]) != plan::DType::I32))
      return fail("prefix lengths must be i32 [batch]");
    if (slopes && (shape(in[next]) != Shape{heads} ||
                   dtype(in[next++]) != plan::DType::F32))
      return fail("ALiBi slopes must be f32 [heads]");
    if (grad && shape(in[next]) != q)
      return fail("dout must have the shape of q");
    if (shape(out[0]) != q ||
        (grad && (shape(out[1]) != k || shape(out[2]) != k)))
      return fail("results must have the shapes of q, k and v");
    if (!(floats[0] > 0.0))
      return fail("scale must be positive");
    return floatValues({in[0], in[1], in[2], out[0]});
  }
  case plan::OpCode::Rope: {
    CHECK_OK(elementwise(1, 2, 2));
    Shape x = shape(in[0]);
    int64_t heads = ints[0], rotary = ints[1];
    if (x.size() != 3 || heads <= 0 || x[2] % heads != 0 || rotary <= 0 ||
        rotary % 2 != 0 || rotary > x[2] / heads || !(floats[0] > 1.0) ||
        std::abs(floats[1]) != 1.0)
      return fail("invalid heads, rotary dims, base or direction");
    return absl::OkStatus();
  }
  case plan::OpCode::Copy:
  case plan::OpCode::Cast: {
    CHECK_OK(arity(1, 1, 0, 0));
    if (elementCount(value(in[0])->shape()) !=
        elementCount(value(out[0])->shape()))
      return fail("operand and result must have as many elements");
    if (instr.op() == plan::OpCode::Copy && dtype(in[0]) != dtype(out[0]))
      return fail("a copy keeps the element type");
    return absl::OkStatus();
  }
  case plan::OpCode::Transpose: {
    if (in.size() != 1 || out.size() != 1)
      return fail("expects one input and one output");
    Shape x = shape(in[0]);
    CHECK_OK(arity(1, 1, x.size(), 0));
    Shape expected;
    std::vector<bool> seen(x.size(), false);
    for (int64_t p : ints) {
      if (p < 0 || p >= static_cast<int64_t>(x.size()) || seen[p])
        return fail("invalid permutation");
      seen[p] = true;
      expected.push_back(x[p]);
    }
    if (shape(out[0]) != expected || dtype(out[0]) != dtype(in[0]))
      return fail(absl::StrCat("result must have shape ", text(expected)));
    return absl::OkStatus();
  }
  case plan::OpCode::Slice:
  case plan::OpCode::Pad: {
    if (in.size() != 1 || out.size() != 1)
      return fail("expects one input and one output");
    Shape x = shape(in[0]);
    CHECK_OK(arity(1, 1, 2 * x.size(), 0));
    Shape result = shape(out[0]);
    bool slice = instr.op() == plan::OpCode::Slice;
    Shape &small = slice ? result : x, &large = slice ? x : result;
    if (small.size() != large.size() || dtype(out[0]) != dtype(in[0]))
      return fail("operand and result must have one rank and element type");
    for (size_t d = 0; d < x.size(); ++d) {
      int64_t a = ints[d], b = ints[x.size() + d];
      bool ok = slice ? (a >= 0 && b == small[d] && a <= large[d] - b)
                      : (a >= 0 && b >= 0 && a + small[d] + b == large[d]);
      if (!ok)
        return fail(absl::StrCat("invalid bounds in dimension ", d));
    }
    return absl::OkStatus();
  }
  case plan::OpCode::Concat: {
    if (in.empty() || out.size() != 1 || ints.size() != 1 || !floats.empty())
      return fail("expects inputs, one output and the dimension");
    Shape result = shape(out[0]);
    int64_t dim = ints[0], total = 0;
    if (dim < 0 || dim >= static_cast<int64_t>(result.size()))
      return fail("invalid dimension");
    for (uint32_t index : in) {
      Shape part = shape(index);
      if (part.size() != result.size() || dtype(index) != dtype(out[0]))
        return fail("inputs must have the result's rank and element type");
      for (size_t d = 0; d < part.size(); ++d)
        if (static_cast<int64_t>(d) != dim && part[d] != result[d])
          return fail("inputs disagree off the joined dimension");
      total += part[dim];
    }
    if (total != result[dim])
      return fail("the joined sizes do not add up");
    return absl::OkStatus();
  }
  case plan::OpCode::Broadcast:
  case plan::OpCode::Sum: {
    bool sum = instr.op() == plan::OpCode::Sum;
    CHECK_OK(arity(1, 1, 0, sum ? 1 : 0));
    // Broadcast: out from in; Sum: in reduced to out (the reverse rule).
    Shape small = shape(sum ? out[0] : in[0]),
          large = shape(sum ? in[0] : out[0]);
    if (small.size() > large.size())
      return fail("the smaller shape has the larger rank");
    size_t offset = large.size() - small.size();
    for (size_t d = 0; d < small.size(); ++d)
      if (small[d] != 1 && small[d] != large[offset + d])
        return fail(
            absl::StrCat(text(small), " does not broadcast to ", text(large)));
    return floatValues({in[0], out[0]});
  }
  case plan::OpCode::Dropout: {
    CHECK_OK(elementwise(1, ints.size() == 4 ? 4 : 2, 1));
    if (!(floats[0] >= 0.0 && floats[0] < 1.0) || ints[0] < 0 || ints[1] < 0)
      return fail("invalid probability, stream or offset");
    // A piece of the batch: its group (-1: none) and the step's
    // microbatches it is one of.
    if (ints.size() == 4) {
      int64_t pieces = 1;
      if (ints[2] != -1)
        CHECK_OK(vocabPieces(ints[2], &pieces));
      if (ints[3] != 1 && ints[3] != planRoot.microbatches())
        return fail(absl::StrCat("a piece of one of ", ints[3],
                                 " microbatches, but the step has ",
                                 planRoot.microbatches()));
      if (shape(out[0]).empty())
        return fail("a piece of the batch needs a batch dimension");
    }
    return absl::OkStatus();
  }
  case plan::OpCode::CrossEntropy:
  case plan::OpCode::CrossEntropyGrad: {
    bool grad = instr.op() == plan::OpCode::CrossEntropyGrad;
    // A vocab-parallel local form also reads the log-sum-exp over the
    // whole vocabulary and names its group.
    // A padded vocabulary adds the group (-1: none) and its classes.
    size_t fixed = grad ? 3 : 2;
    bool piece = in.size() == fixed + 1;
    CHECK_OK(arity(fixed + piece, 1, ints.size() == 3 ? 3 : 1 + piece, 0));
    Shape logits = shape(in[0]), labels = shape(in[1]);
    if (logits.empty() || dtype(in[1]) != plan::DType::I32 ||
        labels != Shape(logits.begin(), logits.end() - 1))
      return fail("labels must be i32 with the logits' shape less the vocab");
    int64_t pieces = 1;
    if (ints.size() == 3 && piece != (ints[1] != -1))
      return fail("a group (the local form of a vocab-parallel loss) comes "
                  "with lse, and lse with a group");
    CHECK_OK(vocabInts(1, piece, logits.back(), &pieces));
    if (piece) {
      Shape lse = labels;
      lse.push_back(1);
      if (shape(in[fixed]) != lse || dtype(in[fixed]) != dtype(in[0]))
        return fail(absl::StrCat("lse must have shape ", text(lse),
                                 " and the logits' element type"));
    }
    if (logits.back() * pieces > paddedVocab)
      return fail("the logits have more columns than the vocabulary");
    if (grad) {
      CHECK_OK(scalarF32({in[2]}));
      if (shape(out[0]) != logits)
        return fail("the gradient has the logits' shape");
    } else {
      CHECK_OK(scalarF32({out[0]}));
    }
    return floatValues({in[0]});
  }
  case plan::OpCode::LogSumExp: {
    // A padded vocabulary's [group (-1: none), classes].
    CHECK_OK(arity(1, 1, ints.empty() ? 0 : 2, 0));
    Shape x = shape(in[0]);
    if (x.empty())
      return fail("x must have rank >= 1");
    int64_t pieces = 1;
    CHECK_OK(vocabInts(0, /*piece=*/false, x.back(), &pieces));
    Shape result = x;
    result.back() = 1;
    if (shape(out[0]) != result || dtype(out[0]) != dtype(in[0]))
      return fail(absl::StrCat("result must have shape ", text(result),
                               " and x's element type"));
    return floatValues({in[0]});
  }
  case plan::OpCode::Fill: {
    CHECK_OK(arity(0, 1, 0, 1));
    return absl::OkStatus();
  }
  case plan::OpCode::Values: {
    Shape result = shape(out.empty() ? 0 : out[0]);
    int64_t count = 1;
    for (int64_t size : result)
      count *= size;
    CHECK_OK(arity(0, 1, 0, static_cast<size_t>(count)));
    if (dtype(out[0]) != plan::DType::F32)
      return fail("writes an f32 tensor");
    return absl::OkStatus();
  }
  case plan::OpCode::SumSquares: {
    CHECK_OK(arity(1, 1, 0, 0));
    CHECK_OK(floatValues({in[0]}));
    return scalarF32({out[0]});
  }
  case plan::OpCode::ClipCoefficient: {
    CHECK_OK(arity(1, 2, 0, 1));
    if (floats[0] < 0.0)
      return fail("max_norm must not be negative");
    return scalarF32({in[0], out[0], out[1]});
  }
  case plan::OpCode::LrSchedule: {
    CHECK_OK(arity(1, 1, 2, 2));
    // decay 0: no decay; a decay step at or before the warmup's end goes
    // straight to the floor after warmup.
    if (!(floats[0] > 0.0) || floats[1] < 0.0 || floats[1] > floats[0] ||
        ints[0] < 0 || ints[1] < 0)
      return fail("invalid schedule: needs 0 <= floor <= peak, peak > 0 and "
                  "non-negative warmup and decay steps");
    return scalarF32({in[0], out[0]});
  }
  case plan::OpCode::AdamW: {
    CHECK_OK(arity(7, 3, 0, 4));
    CHECK_OK(sameShapes({in[0], in[1], in[2], in[3], out[0], out[1], out[2]}));
    for (uint32_t index : {in[0], in[1], in[2], in[3], out[0], out[1], out[2]})
      if (dtype(index) != plan::DType::F32)
        return fail("AdamW runs on f32 weights, gradients and moments");
    CHECK_OK(scalarF32({in[4], in[5], in[6]}));
    if (!(floats[0] >= 0.0 && floats[0] < 1.0) ||
        !(floats[1] >= 0.0 && floats[1] < 1.0) || !(floats[2] > 0.0) ||
        floats[3] < 0.0)
      return fail("invalid betas, epsilon or weight decay");
    return absl::OkStatus();
  }
  case plan::OpCode::Select: {
    CHECK_OK(arity(3, 1, 0, 0));
    CHECK_OK(scalarF32({in[0]}));
    if (shape(in[1]) != shape(out[0]) || shape(in[2]) != shape(out[0]) ||
        dtype(in[1]) != dtype(out[0]) || dtype(in[2]) != dtype(out[0]))
      return fail("both choices must have the result's type");
    return absl::OkStatus();
  }
  case plan::OpCode::LossScaleUpdate: {
    CHECK_OK(arity(3, 4, 1, 2));
    if (ints[0] <= 0 || floats[0] < 1.0 || !(floats[1] > 0.0) ||
        floats[1] > 1.0)
      return fail("invalid growth interval, growth or backoff");
    return scalarF32({in[0], in[1], in[2], out[0], out[1], out[2], out[3]});
  }
  case plan::OpCode::CountValid: {
    CHECK_OK(arity(1, 1, 1, 0));
    if (dtype(in[0]) != plan::DType::I32)
      return fail("labels must be i32");
    if (ints[0] < INT32_MIN || ints[0] > INT32_MAX)
      return fail("the ignore index does not fit in i32");
    return scalarF32({out[0]});
  }
  case plan::OpCode::Accumulate: {
    CHECK_OK(arity(3, 1, 0, 0));
    if (out[0] != in[0])
      return fail("the result must be the accumulator (input 0) itself");
    CHECK_OK(sameShapes({in[0], in[1]}));
    if (dtype(in[0]) != plan::DType::F32)
      return fail("the accumulator must be f32");
    CHECK_OK(floatValues({in[1]}));
    return scalarF32({in[2]});
  }
  case plan::OpCode::Reciprocal: {
    CHECK_OK(arity(1, 1, 0, 0));
    return scalarF32({in[0], out[0]});
  }
  case plan::OpCode::ScaleBy: {
    CHECK_OK(arity(2, 1, 0, 0));
    CHECK_OK(scalarF32({in[1]}));
    if (shape(out[0]) != shape(in[0]) || dtype(out[0]) != dtype(in[0]))
      return fail("the result must have the type of x");
    return floatValues({in[0]});
  }
  case plan::OpCode::AllReduce:
  case plan::OpCode::AllGather:
  case plan::OpCode::ReduceScatter:
  case plan::OpCode::AllToAll:
  case plan::OpCode::AllSlice:
    return checkCollective(instr.op(), in, out, ints);
  case plan::OpCode::Send:
  case plan::OpCode::Recv:
    CHECK_OK(arity(instr.op() == plan::OpCode::Send ? 1 : 0,
                   instr.op() == plan::OpCode::Send ? 0 : 1, 2, 0));
    return checkTransfer(instr.op(), in, out, ints);
  }
#undef CHECK_OK
  return fail(absl::StrCat("unknown op code ", static_cast<int>(instr.op())));
}

absl::Status ProgramChecker::checkCollective(plan::OpCode op,
                                             const std::vector<uint32_t> &in,
                                             const std::vector<uint32_t> &out,
                                             const std::vector<int64_t> &ints) {
  size_t intCount = op == plan::OpCode::AllReduce  ? 1
                    : op == plan::OpCode::AllToAll ? 3
                                                   : 2;
  if (in.size() != 1 || out.size() != 1 || ints.size() != intCount)
    return fail(absl::StrCat(
        "expects 1 input, 1 output and ", intCount,
        op == plan::OpCode::AllReduce  ? " int (group)"
        : op == plan::OpCode::AllToAll ? " ints (group, split_dim, concat_dim)"
                                       : " ints (group, dim)",
        "; has ", in.size(), ", ", out.size(), " and ", ints.size()));
  const plan::Value *x = value(in[0]), *result = value(out[0]);
  // Slicing moves no data between ranks and takes token ids too.
  bool sliceOfIds = op == plan::OpCode::AllSlice &&
                    x->dtype() == plan::DType::I32 &&
                    result->dtype() == plan::DType::I32;
  if (!sliceOfIds &&
      (x->dtype() != plan::DType::F32 || result->dtype() != plan::DType::F32))
    return fail("collectives run on f32 values (all_slice also on i32 ids)");
  size_t groups = planRoot.groups() ? planRoot.groups()->size() : 0;
  if (ints[0] < 0 || static_cast<uint64_t>(ints[0]) >= groups)
    return fail(absl::StrCat("group ", ints[0], " is not one of the plan's ",
                             groups, " groups"));
  int64_t members = groupSize(planRoot, static_cast<uint32_t>(ints[0]));
  Shape xShape = shapeOf(x), resultShape = shapeOf(result);
  for (size_t i = 1; i < ints.size(); ++i)
    if (ints[i] < 0 || ints[i] >= static_cast<int64_t>(xShape.size()))
      return fail(absl::StrCat("dimension ", ints[i], " is outside x's rank ",
                               xShape.size()));
  // The result's shape; a size that would exceed 2^48 elements is -1, which
  // no valid value has.
  Shape expected = xShape;
  auto times = [&](int64_t size) {
    return size > (int64_t(1) << 48) / members ? -1 : size * members;
  };
  auto split = [&](int64_t dim) -> absl::Status {
    if (expected[dim] % members != 0)
      return fail(absl::StrCat("x ", text(xShape), " does not split into ",
                               members, " pieces along dimension ", dim));
    expected[dim] /= members;
    return absl::OkStatus();
  };
  switch (op) {
  case plan::OpCode::AllGather: {
    // A padded split's pieces gather to any size they pad: more than
    // (members - 1) pieces, at most members.
    int64_t &gathered = expected[ints[1]];
    int64_t size = resultShape.size() == xShape.size() ? resultShape[ints[1]]
                                                       : int64_t(-1);
    gathered =
        size > 0 && gathered > 0 && paddedPiece(size, members) == gathered
            ? size
            : times(gathered);
    break;
  }
  case plan::OpCode::ReduceScatter:
  case plan::OpCode::AllSlice:
    // Pieces of ceil(size / members), the last ones zero-padded.
    expected[ints[1]] = paddedPiece(expected[ints[1]], members);
    break;
  case plan::OpCode::AllToAll:
    if (absl::Status status = split(ints[1]); !status.ok())
      return status;
    expected[ints[2]] = times(expected[ints[2]]);
    break;
  default:
    break;
  }
  if (resultShape != expected)
    return fail(absl::StrCat("the result must have shape ", text(expected),
                             " (x ", text(xShape), " over ", members,
                             " members), not ", text(resultShape)));
  // Only AllReduce works in place, and only on the same value: partly
  // overlapping buffers would make every backend read what it has written.
  if (mayOverlap(*x, *result) &&
      !(op == plan::OpCode::AllReduce && in[0] == out[0]))
    return fail(absl::StrCat(
        "the result's bytes overlap x's",
        op == plan::OpCode::AllReduce
            ? " (an in-place all-reduce names the same value twice)"
            : " (only AllReduce works in place)"));
  return absl::OkStatus();
}

absl::Status ProgramChecker::checkTransfer(plan::OpCode op,
                                           const std::vector<uint32_t> &in,
                                           const std::vector<uint32_t> &out,
                                           const std::vector<int64_t> &ints) {
  uint32_t data = op == plan::OpCode::Send ? in[0] : out[0];
  if (value(data)->dtype() != plan::DType::F32)
    return fail(absl::StrCat("transfers move f32 values; value ", data, " is ",
                             plan::EnumNameDType(value(data)->dtype())));
  int64_t peer = ints[0], tag = ints[1];
  if (meshAxisIndex(planRoot, "pp") < 0)
    return fail("transfers run between pipeline ranks, but the mesh has no "
                "axis 'pp'");
  int64_t pipelineRanks = meshAxisSize(planRoot, "pp");
  if (peer < 0 || peer >= pipelineRanks)
    return fail(absl::StrCat("peer pipeline rank ", peer, " is outside [0, ",
                             pipelineRanks, ") (the mesh axis 'pp')"));
  if (peer == program.pipeline_rank())
    return fail(
        absl::StrCat("peer pipeline rank ", peer, " is the program's own"));
  if (tag < 0 || tag > kMaxTransferTag)
    return fail(
        absl::StrCat("tag ", tag, " is outside [0, ", kMaxTransferTag, "]"));
  return absl::OkStatus();
}

/// FlatBuffers verifies the alignment of scalars and of vector lengths but
/// not of 8-byte vector elements: a corrupt file could place a shape at a
/// misaligned address. Every 8-byte vector is checked before it is read.
template <typename T> bool aligned(const flatbuffers::Vector<T> *vector) {
  return !vector || vector->size() == 0 ||
         reinterpret_cast<uintptr_t>(vector->Data()) % alignof(T) == 0;
}

bool vectorsAligned(const plan::Plan &plan) {
  if (!plan.programs())
    return true;
  for (const plan::Program *program : *plan.programs()) {
    if (program->values())
      for (const plan::Value *value : *program->values())
        if (!aligned(value->shape()))
          return false;
    if (program->persistent())
      for (const plan::Persistent *p : *program->persistent())
        if (!aligned(p->global_shape()) || !aligned(p->offsets()))
          return false;
    if (program->functions())
      for (const plan::Function *function : *program->functions())
        if (function->body())
          for (const plan::Instr *instr : *function->body())
            if (!aligned(instr->ints()) || !aligned(instr->floats()))
              return false;
  }
  return true;
}

/// Every group names mesh axes, each once, and no group is listed twice.
absl::Status checkGroups(const plan::Plan &plan) {
  if (!plan.groups())
    return absl::OkStatus();
  std::set<std::vector<std::string>> seen;
  for (size_t i = 0; i < plan.groups()->size(); ++i) {
    const plan::Group *group = plan.groups()->Get(i);
    std::vector<std::string> axes;
    if (group->axes())
      for (const flatbuffers::String *axis : *group->axes())
        axes.push_back(axis->str());
    auto fail = [&](const std::string &what) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group ", i, " [", absl::StrJoin(axes, ", "), "] ", what));
    };
    if (axes.empty())
      return fail("names no mesh axis");
    std::set<std::string> unique;
    for (const std::string &axis : axes) {
      if (meshAxisIndex(plan, axis) < 0)
        return fail(absl::StrCat("names '", axis, "', which is no mesh axis"));
      if (!unique.insert(axis).second)
        return fail(absl::StrCat("names axis '", axis, "' twice"));
    }
    if (!seen.insert(axes).second)
      return fail("is listed twice");
  }
  return absl::OkStatus();
}

/// The instructions of `function` with opcode `op`.
std::vector<const plan::Instr *> instrsOf(const plan::Function &function,
                                          plan::OpCode op) {
  std::vector<const plan::Instr *> result;
  if (function.body())
    for (const plan::Instr *instr : *function.body())
      if (instr->op() == op)
        result.push_back(instr);
  return result;
}

/// A point-to-point transfer of one schedule action: sender, receiver,
/// direction, source stage and microbatch.
using TransferKey = std::tuple<int, int, int, int, int>;

/// A pipelined plan's schedule: checked again as the compiler checked it
/// (schedule::verify: every send matched, no deadlock), and the step's
/// calls against it: in the schedule's order, transfers only where the
/// schedule has them, with its peers. Runs after the programs' checks.
absl::Status checkSchedule(const plan::Plan &plan) {
  int64_t pipelineRanks = meshAxisSize(plan, "pp");
  bool anyActions = false;
  for (const plan::Program *program : *plan.programs())
    anyActions |= program->actions() || program->call_actions();
  if (pipelineRanks == 1) {
    if (plan.schedule() || anyActions)
      return absl::InvalidArgumentError(
          "the plan has a pipeline schedule but no 'pp' axis above 1");
    return absl::OkStatus();
  }
  if (!plan.schedule()) {
    // Without a schedule the step may not move data between pipeline ranks
    // (a plan for the executor's own tests may, outside the step).
    if (anyActions)
      return absl::InvalidArgumentError(
          "the plan lists schedule actions but names no schedule");
    for (const plan::Program *program : *plan.programs())
      if (program->step())
        for (size_t i = 0; i < program->step()->size(); ++i) {
          const plan::Function &function =
              *program->functions()->Get(program->step()->Get(i)->function());
          if (!instrsOf(function, plan::OpCode::Send).empty() ||
              !instrsOf(function, plan::OpCode::Recv).empty())
            return absl::InvalidArgumentError(absl::StrCat(
                "program of pipeline rank ", program->pipeline_rank(),
                ": step call ", i, " ('", function.name()->str(),
                "') transfers data between pipeline ranks, but the plan has "
                "no pipeline schedule to check"));
        }
    return absl::OkStatus();
  }
  if (static_cast<int64_t>(plan.programs()->size()) != pipelineRanks)
    return absl::InvalidArgumentError(
        absl::StrCat("the mesh has pp = ", pipelineRanks, " but the plan has ",
                     plan.programs()->size(), " programs"));
  if (plan.virtual_stages() < 1 || plan.virtual_stages() > 4096 ||
      plan.microbatches() > (1 << 20))
    return absl::InvalidArgumentError(absl::StrCat(
        "the schedule's ", plan.virtual_stages(), " virtual stages or ",
        plan.microbatches(), " microbatches are out of range"));
  schedule::Schedule schedule;
  schedule.name = plan.schedule()->str();
  schedule.ranks = static_cast<int>(pipelineRanks);
  schedule.microbatches = static_cast<int>(plan.microbatches());
  schedule.virtualStages = static_cast<int>(plan.virtual_stages());
  schedule.actions.resize(pipelineRanks);
  // The (tag, elements) of every message the calls send and receive, per
  // (sender, receiver, direction, source stage, microbatch).
  std::map<TransferKey, std::vector<std::pair<int64_t, int64_t>>> sent,
      received;
  for (const plan::Program *program : *plan.programs()) {
    uint32_t rank = program->pipeline_rank();
    std::string where = absl::StrCat("program of pipeline rank ", rank, ": ");
    if (rank >= pipelineRanks)
      return absl::InvalidArgumentError(absl::StrCat(
          where, "the mesh has pipeline ranks [0, ", pipelineRanks, ")"));
    if (!program->actions() || !program->call_actions())
      return absl::InvalidArgumentError(
          absl::StrCat(where, "it lists no schedule actions"));
    std::vector<schedule::Action> &actions = schedule.actions[rank];
    for (const flatbuffers::String *token : *program->actions()) {
      absl::StatusOr<schedule::Action> action =
          schedule::parseAction(token->str());
      if (!action.ok())
        return absl::InvalidArgumentError(
            absl::StrCat(where, action.status().message()));
      actions.push_back(*action);
    }
    size_t calls = program->step() ? program->step()->size() : 0;
    if (program->call_actions()->size() != calls)
      return absl::InvalidArgumentError(
          absl::StrCat(where, "its step has ", calls, " calls but ",
                       program->call_actions()->size(), " action indices"));
    int64_t last = -1;
    for (size_t i = 0; i < calls; ++i) {
      int64_t index = program->call_actions()->Get(i);
      const plan::Call *call = program->step()->Get(i);
      const plan::Function &function =
          *program->functions()->Get(call->function());
      std::string callText = absl::StrCat(where, "step call ", i, " ('",
                                          function.name()->str(), "')");
      std::vector<const plan::Instr *> sends =
          instrsOf(function, plan::OpCode::Send);
      std::vector<const plan::Instr *> recvs =
          instrsOf(function, plan::OpCode::Recv);
      if (index == -1) {
        if (!sends.empty() || !recvs.empty())
          return absl::InvalidArgumentError(absl::StrCat(
              callText, " transfers data outside the schedule's actions"));
        continue;
      }
      if (index < 0 || index >= static_cast<int64_t>(actions.size()) ||
          index <= last)
        return absl::InvalidArgumentError(absl::StrCat(
            callText, " performs action ", index, "; calls follow the ",
            actions.size(), " actions in order, each at most once"));
      last = index;
      const schedule::Action &action = actions[index];
      std::string token = schedule::format(action);
      bool transfer = action.kind == schedule::ActionKind::Send ||
                      action.kind == schedule::ActionKind::Recv;
      if (transfer || action.kind == schedule::ActionKind::Forward ||
          action.kind == schedule::ActionKind::Backward ||
          action.kind == schedule::ActionKind::BackwardInput ||
          action.kind == schedule::ActionKind::BackwardWeight) {
        if (static_cast<int64_t>(call->microbatch()) != action.microbatch)
          return absl::InvalidArgumentError(
              absl::StrCat(callText, " reads microbatch ", call->microbatch(),
                           " but performs ", token));
      }
      if (transfer) {
        bool send = action.kind == schedule::ActionKind::Send;
        const std::vector<const plan::Instr *> &moves = send ? sends : recvs;
        if (moves.empty() || !(send ? recvs : sends).empty())
          return absl::InvalidArgumentError(
              absl::StrCat(callText, " performs ", token, " but does not only ",
                           send ? "send" : "receive"));
        std::vector<std::pair<int64_t, int64_t>> &messages =
            (send ? sent : received)[{
                send ? static_cast<int>(rank) : action.peer,
                send ? action.peer : static_cast<int>(rank),
                static_cast<int>(action.direction),
                send ? action.stage : action.peerStage, action.microbatch}];
        for (const plan::Instr *move : moves) {
          if (move->ints()->Get(0) != action.peer)
            return absl::InvalidArgumentError(
                absl::StrCat(callText, " performs ", token,
                             " but transfers with pipeline "
                             "rank ",
                             move->ints()->Get(0)));
          uint32_t data =
              send ? move->inputs()->Get(0) : move->outputs()->Get(0);
          messages.push_back(
              {move->ints()->Get(1),
               elementCount(program->values()->Get(data)->shape())});
        }
      } else if (action.kind != schedule::ActionKind::Optimizer &&
                 (!sends.empty() || !recvs.empty())) {
        // The optimizer exchanges the parts of tied gradients.
        return absl::InvalidArgumentError(
            absl::StrCat(callText, " performs ", token, " but transfers data"));
      }
    }
  }
  if (absl::Status status = schedule::verify(schedule); !status.ok())
    return absl::InvalidArgumentError(status.message());
  // The schedule matches its sends and receives; the calls must too: what
  // one pipeline rank's calls send for an action, its peer's calls receive,
  // message for message (tag and size), or a rank would wait forever.
  auto describe = [](const TransferKey &key) {
    auto [sender, receiver, direction, stage, microbatch] = key;
    return absl::StrCat(direction ==
                                static_cast<int>(schedule::Direction::Gradient)
                            ? "the gradient"
                            : "the activation",
                        " of stage ", stage, ", microbatch ", microbatch,
                        ", from pipeline rank ", sender, " to ", receiver);
  };
  for (const auto &[key, messages] : sent) {
    auto it = received.find(key);
    if (it == received.end())
      return absl::InvalidArgumentError(
          absl::StrCat("the step sends ", describe(key),
                       ", but the receiver's step never receives it"));
    if (it->second != messages)
      return absl::InvalidArgumentError(absl::StrCat(
          "the step sends ", describe(key),
          " in messages whose tags or sizes differ from those received"));
  }
  for (const auto &[key, messages] : received)
    if (!sent.count(key))
      return absl::InvalidArgumentError(
          absl::StrCat("the step receives ", describe(key),
                       ", but the sender's step never sends it"));
  return absl::OkStatus();
}

} // namespace

uint32_t slotsOf(const plan::Program &program, const plan::Function &function) {
  uint32_t most = 0;
  auto visit = [&](const flatbuffers::Vector<uint32_t> *list) {
    if (list)
      for (uint32_t index : *list) {
        uint32_t slots = index < program.values()->size()
                             ? program.values()->Get(index)->slots()
                             : 0;
        most = std::max(most, slots);
      }
  };
  visit(function.args());
  visit(function.results());
  if (function.body())
    for (const plan::Instr *instr : *function.body()) {
      visit(instr->inputs());
      visit(instr->outputs());
    }
  return most;
}

absl::Status checkPlan(const plan::Plan &plan) {
  if (!vectorsAligned(plan))
    return absl::InvalidArgumentError(
        "the file is corrupt (a vector is misaligned)");
  if (plan.version() != kPlanVersion)
    return absl::FailedPreconditionError(absl::StrCat(
        "plan format version ", plan.version(), " is not the runtime's (",
        kPlanVersion, "): recompile the plan with this release"));
  if (plan.seq() <= 0 || plan.vocab() <= 0 || plan.batch() <= 0 ||
      plan.microbatches() <= 0 || plan.batch() % plan.microbatches() != 0)
    return absl::InvalidArgumentError(
        "seq, vocab, batch and microbatches must be positive, and "
        "microbatches must divide batch");
  if (plan.vocab() > INT32_MAX)
    return absl::InvalidArgumentError("the vocabulary exceeds 2^31 - 1 ids");
  if (!plan.mesh() || plan.mesh()->size() == 0)
    return absl::InvalidArgumentError("the plan has no mesh");
  std::set<std::string> axes;
  int64_t world = 1;
  for (const plan::MeshAxis *axis : *plan.mesh()) {
    if (axis->size() == 0 || !axes.insert(axis->name()->str()).second)
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh axis '", axis->name()->str(), "' is empty or repeated"));
    world *= axis->size();
    if (world > (1 << 24))
      return absl::InvalidArgumentError("the mesh is too large");
  }
  if (absl::Status status = checkGroups(plan); !status.ok())
    return status;
  int64_t dp = meshAxisSize(plan, "dp");
  if (plan.batch() / plan.microbatches() % dp != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "a batch of ", plan.batch(), " does not split into dp = ", dp,
        " replicas of ", plan.microbatches(), " microbatches"));
  if (!plan.programs() || plan.programs()->size() == 0)
    return absl::InvalidArgumentError("the plan has no program");
  std::set<uint32_t> ranks;
  for (size_t i = 0; i < plan.programs()->size(); ++i) {
    const plan::Program *program = plan.programs()->Get(i);
    if (!ranks.insert(program->pipeline_rank()).second)
      return absl::InvalidArgumentError(absl::StrCat(
          "two programs are for pipeline rank ", program->pipeline_rank()));
    if (absl::Status status = ProgramChecker(plan, *program, i).check();
        !status.ok())
      return status;
  }
  return checkSchedule(plan);
}

namespace {
constexpr char kSealMagic[8] = {'T', 'R', 'I', 'A', 'D', 'S', 'U', 'M'};
} // namespace

uint64_t planHash(std::string_view bytes) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001B3ull;
  }
  return hash;
}

std::string sealPlan(std::string flatbuffer) {
  uint64_t hash = planHash(flatbuffer);
  flatbuffer.append(kSealMagic, sizeof(kSealMagic));
  for (int i = 0; i < 8; ++i)
    flatbuffer.push_back(static_cast<char>((hash >> (8 * i)) & 0xFF));
  return flatbuffer;
}

absl::StatusOr<LoadedPlan> loadPlanFromBytes(std::string bytes,
                                             const std::string &name) {
  auto invalid = [&](const std::string &what) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid plan '", name, "': ", what));
  };
  // The seal first: the bytes are exactly what triad-translate wrote.
  bool sealed = bytes.size() >= kPlanSealBytes + 8 &&
                std::memcmp(bytes.data() + bytes.size() - kPlanSealBytes,
                            kSealMagic, sizeof(kSealMagic)) == 0;
  if (!sealed) {
    if (bytes.size() >= 8 && plan::PlanBufferHasIdentifier(bytes.data()))
      return invalid(
          "the file does not end in the plan's seal: it was cut short, "
          "has bytes appended, or was written by an older triad-translate "
          "(export it again)");
    return invalid("not a Triad plan file");
  }
  uint64_t stored = 0;
  for (int i = 0; i < 8; ++i)
    stored |= static_cast<uint64_t>(
                  static_cast<unsigned char>(bytes[bytes.size() - 8 + i]))
              << (8 * i);
  bytes.resize(bytes.size() - kPlanSealBytes);
  if (planHash(bytes) != stored)
    return invalid("the file is corrupt (its checksum does not match its "
                   "contents)");
  if (bytes.size() < 8 || !plan::PlanBufferHasIdentifier(bytes.data()))
    return invalid("not a Triad plan file");
  if (bytes.size() > kMaxPlanBytes)
    return invalid(absl::StrCat("its ", bytes.size(),
                                " bytes exceed the plan format's limit of ",
                                kMaxPlanBytes, " bytes (2 GiB)"));
  // Every table takes at least 4 bytes, so the count the verifier allows
  // follows from the size: any plan that fits the format verifies, in time
  // linear in its bytes.
  flatbuffers::Verifier verifier(
      reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size(),
      /*max_depth=*/64,
      /*max_tables=*/static_cast<flatbuffers::uoffset_t>(bytes.size() / 4 + 1));
  if (!plan::VerifyPlanBuffer(verifier))
    return invalid("the file is truncated or corrupt (structure check failed)");
  if (absl::Status status = checkPlan(*plan::GetPlan(bytes.data()));
      !status.ok())
    return invalid(std::string(status.message()));
  LoadedPlan loaded;
  loaded.bytes = std::move(bytes);
  return loaded;
}

absl::StatusOr<LoadedPlan> loadPlan(const std::string &path) {
  absl::StatusOr<std::string> bytes = readFile(path);
  if (!bytes.ok())
    return bytes.status();
  return loadPlanFromBytes(std::move(*bytes), path);
}

} // namespace triad::rt
