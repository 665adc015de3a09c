//===- Plan.cpp - loading and verifying plan files ------------------------===//
//
// The semantic checks of a plan: see Plan.h. Every message says where the
// problem is (program, function, instruction) and what is wrong.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Plan.h"

#include "runtime/comm/Collectives.h"
#include "runtime/plan/KernelContract.h"
#include "runtime/plan/Mesh.h"
#include "runtime/schedule/Schedule.h"
#include "runtime/support/Files.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
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

/// The bytes [begin, end) of one copy of `v`, or of all its copies.
std::pair<uint64_t, uint64_t> span(const plan::Value &v, bool allSlots) {
  uint64_t begin = v.region()->offset(), end = begin + v.region()->bytes();
  if (allSlots && v.slots() > 1)
    end += (v.slots() - 1) * v.slot_stride();
  return {begin, end};
}

} // namespace

bool mayOverlap(const plan::Value &a, const plan::Value &b) {
  if (a.region()->bytes() == 0 || b.region()->bytes() == 0)
    return false;
  bool sameCopies =
      a.slots() == b.slots() && a.slot_stride() == b.slot_stride();
  auto [aBegin, aEnd] = span(a, !sameCopies);
  auto [bBegin, bEnd] = span(b, !sameCopies);
  return aBegin < bEnd && bBegin < aEnd;
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

/// What the plan's header says that kernels' attributes depend on.
plan::KernelContext kernelContextOf(const plan::Plan &plan) {
  plan::KernelContext context;
  context.known = true;
  context.vocab = plan.vocab();
  context.tp = meshAxisSize(plan, "tp");
  context.paddedVocab = plan.padded_vocab();
  context.microbatches = plan.microbatches();
  if (plan.groups())
    for (uint32_t g = 0; g < plan.groups()->size(); ++g)
      context.groupSizes.push_back(groupSize(plan, g));
  return context;
}

/// An instruction as the kernel contract sees it: one operand per distinct
/// value, named by its index in the program (its operands are values).
plan::KernelView kernelViewOf(const plan::Program &program,
                              const plan::Instr &instr) {
  plan::KernelView view;
  view.op = instr.op();
  std::map<uint32_t, uint32_t> operandOf;
  auto operand = [&](uint32_t index) {
    auto [it, added] = operandOf.try_emplace(
        index, static_cast<uint32_t>(view.operands.size()));
    if (added) {
      const plan::Value *value = program.values()->Get(index);
      view.operands.push_back(
          {value->dtype(), shapeOf(value), absl::StrCat("value ", index)});
    }
    return it->second;
  };
  if (instr.inputs())
    for (uint32_t index : *instr.inputs())
      view.inputs.push_back(operand(index));
  if (instr.outputs())
    for (uint32_t index : *instr.outputs())
      view.outputs.push_back(operand(index));
  if (instr.ints())
    view.ints.assign(instr.ints()->begin(), instr.ints()->end());
  if (instr.floats())
    view.floats.assign(instr.floats()->begin(), instr.floats()->end());
  return view;
}

/// Checks one program; errors carry the location prefix.
class ProgramChecker {
public:
  ProgramChecker(const plan::Plan &planRoot, const plan::Program &program,
                 size_t index)
      : planRoot(planRoot), program(program),
        where(absl::StrCat("program ", index)),
        kernelContext(kernelContextOf(planRoot)) {}

  absl::Status check();

private:
  absl::Status fail(const std::string &what) const {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
  }
  absl::Status checkValues();
  absl::Status checkPersistent();
  absl::Status checkSplit(const plan::Persistent &p, const Shape &local);
  absl::Status checkSignature(const plan::Function &function);
  absl::Status checkLayers(const plan::Function &function);
  absl::Status checkStep();
  absl::Status checkInstr(const plan::Instr &instr);
  absl::Status checkCollective(plan::OpCode op, const std::vector<uint32_t> &in,
                               const std::vector<uint32_t> &out,
                               const std::vector<int64_t> &ints);
  absl::Status checkTransfer(plan::OpCode op, const std::vector<uint32_t> &in,
                             const std::vector<uint32_t> &out,
                             const std::vector<int64_t> &ints);
  /// The bytes of a product that accumulates into its result or adds an
  /// addend (the contract cannot see bytes).
  absl::Status checkMatmulBytes(const std::vector<uint32_t> &in,
                                const std::vector<uint32_t> &out,
                                const std::vector<int64_t> &ints);
  absl::Status checkAdamW(const std::vector<uint32_t> &in,
                          const std::vector<uint32_t> &out, size_t floats);

  const plan::Value *value(uint32_t index) const {
    return program.values()->Get(index);
  }

  const plan::Plan &planRoot;
  const plan::Program &program;
  std::string where;
  plan::KernelContext kernelContext;
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
    if (absl::Status status = checkLayers(*function); !status.ok())
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
      // The logits sampling reads: [samples, seq, vocabulary] of floats.
      if (name == "logits") {
        if (result->dtype() == plan::DType::I32 || shapeOf(result).size() != 3)
          return fail("result 'logits' must be a float tensor [samples, seq, "
                      "vocabulary]");
        continue;
      }
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
        (value(p->value())->dtype() == plan::DType::I32 ||
         p->init()->kind() != plan::InitKind::Zeros))
      return fail(absl::StrCat("accumulator '", name,
                               "' must be a float tensor (f32, bf16 or f16) "
                               "and start from zeros"));
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
    std::vector<int64_t> levels; // the sizes of the axes, outermost first
    if (p.split() && p.split()->size() == dims && p.split()->Get(d)->axes())
      for (const flatbuffers::String *axis : *p.split()->Get(d)->axes()) {
        if (meshAxisIndex(planRoot, axis->string_view()) < 0 ||
            !used.insert(axis->str()).second)
          return fail(absl::StrCat("persistent tensor '", name,
                                   "' is split over '", axis->str(),
                                   "', which is no mesh axis or is named "
                                   "twice"));
        levels.push_back(meshAxisSize(planRoot, axis->str()));
      }
    int64_t offset = p.offsets()->Get(d), global = p.global_shape()->Get(d);
    int64_t extent = padded ? padded->Get(d) : global;
    if (padded && (global < 1 || extent < global))
      return fail(absl::StrCat("persistent tensor '", name, "': padded ",
                               "dimension ", d, " (", extent, ") is smaller ",
                               "than its global size ", global));
    auto outside = [&] {
      return fail(absl::StrCat("persistent tensor '", name,
                               "': its slice lies outside its ",
                               padded ? "padded" : "global", " shape"));
    };
    if (offset < 0 || global < 0 || offset > extent)
      return outside();
    // The outermost axis's pieces tile the (padded) extent; each inner axis
    // splits the piece of the axes before it into pieces of ceil(piece /
    // its size), the innermost into pieces of the local size at most (the
    // last ones padded past the piece they split).
    int64_t piece = extent - offset;
    if (levels.empty()) {
      if (local[d] > piece)
        return outside();
      continue;
    }
    int64_t outer =
        levels.size() == 1 ? local[d] : paddedPiece(piece, levels.front());
    if (outer > piece / levels.front())
      return outside();
    piece = outer;
    for (size_t i = 1; i + 1 < levels.size(); ++i)
      piece = paddedPiece(piece, levels[i]);
    if (levels.size() > 1 && local[d] > paddedPiece(piece, levels.back()))
      return fail(absl::StrCat("persistent tensor '", name, "': dimension ", d,
                               " holds ", local[d], " elements, more than ",
                               "a piece of ", piece, " split ", levels.back(),
                               " ways"));
  }
  return absl::OkStatus();
}

absl::Status ProgramChecker::checkLayers(const plan::Function &function) {
  const auto *names = function.layer_names();
  const auto *spans = function.layer_spans();
  if (!names && !spans)
    return absl::OkStatus();
  size_t count = names ? names->size() : 0;
  if (!names || !spans || spans->size() != 2 * count)
    return fail(absl::StrCat("has ", count, " layer names but ",
                             spans ? spans->size() : 0,
                             " layer span bounds (two per layer)"));
  uint64_t kernels = function.body() ? function.body()->size() : 0, end = 0;
  for (size_t i = 0; i < count; ++i) {
    uint64_t first = spans->Get(2 * i), last = spans->Get(2 * i + 1);
    if (first < end || first >= last || last > kernels)
      return fail(absl::StrCat("layer '", names->Get(i)->str(), "' spans [",
                               first, ", ", last, "), which does not follow ",
                               "the layer before it inside the body's ",
                               kernels, " instructions"));
    end = last;
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
  plan::KernelView view = kernelViewOf(program, instr);
  if (absl::Status status = plan::checkKernel(view, kernelContext);
      !status.ok())
    return fail(std::string(status.message()));
  switch (instr.op()) {
  case plan::OpCode::AllReduce:
  case plan::OpCode::AllGather:
  case plan::OpCode::ReduceScatter:
  case plan::OpCode::AllToAll:
  case plan::OpCode::AllSlice:
    return checkCollective(instr.op(), in, out, view.ints);
  case plan::OpCode::Send:
  case plan::OpCode::Recv:
    return checkTransfer(instr.op(), in, out, view.ints);
  case plan::OpCode::AdamW:
    return checkAdamW(in, out, view.floats.size());
  case plan::OpCode::Matmul:
    return checkMatmulBytes(in, out, view.ints);
  default:
    return absl::OkStatus();
  }
}

absl::Status
ProgramChecker::checkMatmulBytes(const std::vector<uint32_t> &in,
                                 const std::vector<uint32_t> &out,
                                 const std::vector<int64_t> &ints) {
  plan::MatmulAttrs attrs = plan::matmulAttrs(ints);
  if (!attrs.accumulates() && !attrs.hasAddend())
    return absl::OkStatus();
  // The result is written while the product's operands (and the bias or
  // weight) are read: no bytes in common. An addend is read where the
  // result is written: the same bytes or none (cuBLASLt's C and D).
  size_t read = attrs.hasAddend() ? in.size() - 1 : in.size();
  for (size_t i = 0; i < read; ++i)
    if (!(attrs.accumulates() && i == 2) &&
        mayOverlap(*value(out[0]), *value(in[i])))
      return fail(absl::StrCat("the result's bytes overlap input ", i,
                               " of the product"));
  if (attrs.hasAddend()) {
    const plan::Value &result = *value(out[0]), &addend = *value(in.back());
    // (One copy, whatever its stride says, is one copy.)
    bool oneCopy = result.slots() <= 1 && addend.slots() <= 1;
    bool same = result.region()->offset() == addend.region()->offset() &&
                result.region()->bytes() == addend.region()->bytes() &&
                (oneCopy || (result.slots() == addend.slots() &&
                             result.slot_stride() == addend.slot_stride()));
    if (!same && mayOverlap(result, addend))
      return fail("the result's bytes partly overlap the addend's (they "
                  "must be the same bytes or none of them)");
  }
  return absl::OkStatus();
}

absl::Status ProgramChecker::checkAdamW(const std::vector<uint32_t> &in,
                                        const std::vector<uint32_t> &out,
                                        size_t floats) {
  // The tensors of one AdamW are updated at once (a GPU runs them side by
  // side): an output may be its own tensor's param, m or v itself (in
  // place), but shares no bytes with anything else its tensor or another
  // reads or writes, nor with the shared scalars.
  std::optional<plan::AdamWShape> tensors =
      plan::adamWShape(in.size(), out.size(), floats);
  size_t per = tensors->outputsPerTensor;
  for (size_t k = 0; k < out.size(); ++k)
    for (size_t shared = in.size() - tensors->sharedInputs();
         shared < in.size(); ++shared)
      if (mayOverlap(*value(out[k]), *value(in[shared])))
        return fail(absl::StrCat("output ", k,
                                 " of the update overlaps its lr, step, "
                                 "coefficient or skip flag"));
  auto operands = [&](size_t t) {
    std::vector<uint32_t> all(in.begin() + 4 * t, in.begin() + 4 * t + 4);
    all.insert(all.end(), out.begin() + per * t, out.begin() + per * (t + 1));
    return all;
  };
  for (size_t t = 0; t < tensors->count; ++t) {
    std::vector<uint32_t> own = operands(t);
    std::vector<uint32_t> written(out.begin() + per * t,
                                  out.begin() + per * (t + 1));
    for (size_t k = 0; k < written.size(); ++k) {
      uint32_t result = written[k];
      // Only the same value may be both (param and param', m and m', v
      // and v': in place); anything else that shares bytes, its own input
      // included (a param' that half overlaps its param), would be read
      // and written by different threads.
      for (uint32_t operand : own)
        if (operand != result && mayOverlap(*value(result), *value(operand)))
          return fail(absl::StrCat("output ", per * t + k,
                                   " overlaps another operand of tensor ", t,
                                   " of the update"));
    }
  }
  // Across tensors, by a sweep over the operands in the order of their
  // first byte (an update of thousands of tensors is checked in about
  // n log n, not n^2): every pair of operands of different tensors whose
  // spans meet, one of them an output, must not overlap.
  struct Span {
    uint64_t begin, end;
    size_t tensor;
    size_t output; // its index among the outputs, or SIZE_MAX for an input
    uint32_t value;
  };
  std::vector<Span> spans;
  for (size_t t = 0; t < tensors->count; ++t) {
    auto add = [&](uint32_t index, size_t output) {
      auto [begin, end] = span(*value(index), /*allSlots=*/true);
      spans.push_back({begin, end, t, output, index});
    };
    for (size_t i = 0; i < 4; ++i)
      add(in[4 * t + i], SIZE_MAX);
    for (size_t k = 0; k < per; ++k)
      add(out[per * t + k], per * t + k);
  }
  std::stable_sort(
      spans.begin(), spans.end(),
      [](const Span &a, const Span &b) { return a.begin < b.begin; });
  std::vector<Span> open;
  for (const Span &span : spans) {
    open.erase(
        std::remove_if(open.begin(), open.end(),
                       [&](const Span &o) { return o.end <= span.begin; }),
        open.end());
    for (const Span &o : open) {
      if (o.tensor == span.tensor ||
          (o.output == SIZE_MAX && span.output == SIZE_MAX) ||
          !mayOverlap(*value(o.value), *value(span.value)))
        continue;
      const Span &written = o.output != SIZE_MAX ? o : span;
      const Span &other = &written == &o ? span : o;
      return fail(absl::StrCat("output ", written.output,
                               " of the update overlaps an operand of tensor ",
                               other.tensor));
    }
    open.push_back(span);
  }
  return absl::OkStatus();
}

absl::Status ProgramChecker::checkCollective(plan::OpCode op,
                                             const std::vector<uint32_t> &in,
                                             const std::vector<uint32_t> &out,
                                             const std::vector<int64_t> &ints) {
  // The operand and attribute counts are the kernel contract's. A bucket
  // (several inputs) is checked pair by pair, then as a whole: one element
  // type, and no output overlapping another pair's input or output.
  if (in.size() > 1) {
    std::string instruction = where;
    for (size_t i = 0; i < in.size(); ++i) {
      where = absl::StrCat(instruction, ", tensor ", i, " of its bucket");
      absl::Status status =
          checkCollective(op, {in[i]}, {out[i]}, {ints[0], ints[1 + i]});
      where = instruction;
      if (!status.ok())
        return status;
    }
    for (size_t i = 0; i < in.size(); ++i) {
      if (value(in[i])->dtype() != value(in[0])->dtype())
        return fail("a bucket's tensors have one element type");
      for (size_t j = 0; j < in.size(); ++j)
        if (i != j && (mayOverlap(*value(out[i]), *value(in[j])) ||
                       mayOverlap(*value(out[i]), *value(out[j]))))
          return fail(absl::StrCat("output ", i, " of the bucket overlaps ",
                                   "the input or output of tensor ", j));
    }
    return absl::OkStatus();
  }
  const plan::Value *x = value(in[0]), *result = value(out[0]);
  // Slicing moves no data between ranks and takes token ids too.
  bool sliceOfIds = op == plan::OpCode::AllSlice &&
                    x->dtype() == plan::DType::I32 &&
                    result->dtype() == plan::DType::I32;
  // Float values of one type (a backend with 16-bit storage reduces
  // 16-bit ones in f32).
  if (!sliceOfIds &&
      (x->dtype() == plan::DType::I32 || result->dtype() != x->dtype()))
    return fail("collectives run on float values of one element type "
                "(all_slice also on i32 ids)");
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
  plan::DType dtype = value(data)->dtype();
  if (dtype == plan::DType::I32)
    return fail(absl::StrCat("transfers move float values; value ", data,
                             " is ", plan::EnumNameDType(dtype)));
  // 16-bit values travel two to a 4-byte word.
  if (dtype != plan::DType::F32 && elementCount(value(data)->shape()) % 2 != 0)
    return fail(absl::StrCat("a 16-bit transfer moves an even number of "
                             "elements; value ",
                             data, " has ",
                             elementCount(value(data)->shape())));
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
  forEachValueOf(function, [&](uint32_t index) {
    if (index < program.values()->size())
      most = std::max(most, program.values()->Get(index)->slots());
  });
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
  if (int64_t padded = plan.padded_vocab(), tp = meshAxisSize(plan, "tp");
      padded != 0 &&
      (padded < plan.vocab() || padded % tp != 0 || padded > INT32_MAX))
    return absl::InvalidArgumentError(absl::StrCat(
        "the padded vocabulary ", padded, " is not a multiple of tp (", tp,
        ") from the vocabulary (", plan.vocab(), ") up to 2^31 - 1"));
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

double stepFlops(const plan::Plan &plan) {
  double total = 0;
  int64_t pipeline = 0;
  for (const plan::Program *program : *plan.programs()) {
    ++pipeline;
    std::vector<double> functionFlops;
    for (const plan::Function *function : *program->functions()) {
      double flops = 0;
      if (function->body())
        for (const plan::Instr *instr : *function->body())
          flops += plan::kernelFlops(kernelViewOf(*program, *instr));
      functionFlops.push_back(flops);
    }
    if (program->step())
      for (const plan::Call *call : *program->step())
        total += functionFlops[call->function()];
  }
  // Every pipeline rank's program runs on meshSize / pp ranks.
  return pipeline ? total * static_cast<double>(meshSize(plan)) / pipeline
                  : 0.0;
}

} // namespace triad::rt
