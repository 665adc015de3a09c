//===- RtDialect.cpp - the rt per-rank program dialect --------------------===//
//
// Registers the dialect and verifies its ops. The checks here are the
// structural ones (offsets inside the arena, slices inside their global
// tensors, names and kinds) and, for every rt.kernel, the runtime's kernel
// contract (runtime/plan/KernelContract.h): the plan loader runs the same
// function, so a kernel the runtime would refuse is an error here, with
// the loader's message.
//
//===----------------------------------------------------------------------===//

#include "dialects/Rt/RtDialect.h"
#include "runtime/plan/KernelContract.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace triad::rt;
namespace plan = triad::plan;

// The kernels are the plan format's, value for value: the verifier hands
// an rt.kernel's opcode to the plan's contract as it is.
// clang-format off
#define TRIAD_SAME_OPCODES(X)                                                  \
  X(Embedding) X(EmbeddingGrad) X(Matmul) X(Add) X(Mul) X(Scale) X(Activation) \
  X(ActivationGrad) X(Gated) X(LayerNorm) X(LayerNormGrad) X(RmsNorm)          \
  X(RmsNormGrad) X(Attention) X(AttentionGrad) X(Rope) X(Copy) X(Transpose)    \
  X(Slice) X(Pad) X(Concat) X(Broadcast) X(Sum) X(Cast) X(Dropout)             \
  X(CrossEntropy) X(CrossEntropyGrad) X(Fill) X(SumSquares)                    \
  X(ClipCoefficient) X(LrSchedule) X(AdamW) X(Select) X(LossScaleUpdate)       \
  X(CountValid) X(Accumulate) X(Reciprocal) X(ScaleBy) X(AllReduce)            \
  X(AllGather) X(ReduceScatter) X(AllToAll) X(AllSlice) X(Send) X(Recv)        \
  X(LogSumExp) X(Values)
// clang-format on
#define TRIAD_SAME_OPCODE(name)                                                \
  static_assert(static_cast<int>(OpCode::name) ==                              \
                    static_cast<int>(plan::OpCode::name),                      \
                "rt opcode " #name " differs from the plan's");
TRIAD_SAME_OPCODES(TRIAD_SAME_OPCODE)
#undef TRIAD_SAME_OPCODE
#define TRIAD_COUNT_OPCODE(name) +1
static_assert(0 TRIAD_SAME_OPCODES(TRIAD_COUNT_OPCODE) ==
                  static_cast<int>(plan::OpCode::MAX) + 1,
              "the rt dialect and plan.fbs list different kernels");
#undef TRIAD_COUNT_OPCODE
#undef TRIAD_SAME_OPCODES
static_assert(static_cast<int>(OpCode::Values) ==
                  static_cast<int>(plan::OpCode::MAX),
              "the rt dialect and plan.fbs list different kernels");

#include "dialects/Rt/RtDialect.cpp.inc"
#include "dialects/Rt/RtEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Rt/RtAttrs.cpp.inc"

#define GET_OP_CLASSES
#include "dialects/Rt/RtOps.cpp.inc"

void RtDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Rt/RtOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Rt/RtAttrs.cpp.inc"
      >();
}

int64_t triad::rt::elementBytes(Type type) {
  if (type.isF32() || type.isInteger(32))
    return 4;
  if (type.isBF16() || type.isF16())
    return 2;
  return 0;
}

//===----------------------------------------------------------------------===//
// PlanOp
//===----------------------------------------------------------------------===//

LogicalResult PlanOp::verify() {
  if (getAxes().size() != getAxisSizes().size())
    return emitOpError("has ") << getAxes().size() << " mesh axes but "
                               << getAxisSizes().size() << " sizes";
  llvm::StringSet<> names;
  int64_t dp = 1, tp = 1;
  for (auto [name, size] : llvm::zip(getAxes(), getAxisSizes())) {
    StringRef axis = cast<StringAttr>(name).getValue();
    if (!names.insert(axis).second)
      return emitOpError("mesh axis '") << axis << "' appears twice";
    if (size < 1)
      return emitOpError("mesh axis '")
             << axis << "' has size " << size << "; sizes must be at least 1";
    if (axis == "dp")
      dp = size;
    if (axis == "tp")
      tp = size;
  }
  for (Attribute group : getGroups()) {
    auto axes = cast<ArrayAttr>(group);
    if (axes.empty())
      return emitOpError("has a communicator group without mesh axes");
    llvm::StringSet<> seen;
    for (Attribute axis : axes) {
      StringRef name = cast<StringAttr>(axis).getValue();
      if (!names.contains(name))
        return emitOpError("communicator group names mesh axis '")
               << name << "', which the mesh does not have";
      if (!seen.insert(name).second)
        return emitOpError("communicator group names mesh axis '")
               << name << "' twice";
    }
  }
  for (auto [what, value] : {std::pair<StringRef, int64_t>{"seq", getSeq()},
                             {"vocab", getVocab()},
                             {"batch", getBatch()},
                             {"microbatches", getMicrobatches()}})
    if (value < 1)
      return emitOpError() << what << " is " << value
                           << "; it must be at least 1";
  if (std::optional<int64_t> padded = getPaddedVocab()) {
    if (*padded < static_cast<int64_t>(getVocab()) || *padded % tp != 0 ||
        *padded > INT32_MAX)
      return emitOpError("padded vocabulary ")
             << *padded << " must be a multiple of tp (" << tp
             << ") no smaller than the vocabulary (" << getVocab()
             << ") and below 2^31";
  }
  if (getSchedule().has_value() != getVirtualStages().has_value())
    return emitOpError("names a pipeline schedule without its virtual "
                       "stages, or the other way round");
  if (getBatch() % (dp * getMicrobatches()) != 0)
    return emitOpError("batch ")
           << getBatch() << " is not divisible by dp (" << dp
           << ") times microbatches (" << getMicrobatches() << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// ProgramOp
//===----------------------------------------------------------------------===//

LogicalResult ProgramOp::verify() {
  if (static_cast<int64_t>(getPipelineRank()) < 0)
    return emitOpError("pipeline rank ")
           << static_cast<int64_t>(getPipelineRank()) << " is negative";
  if (static_cast<int64_t>(getArenaBytes()) < 0)
    return emitOpError("arena size ")
           << static_cast<int64_t>(getArenaBytes()) << " is negative";
  llvm::StringSet<> persistent;
  llvm::DenseSet<Value> persistentBuffers;
  int steps = 0;
  for (Operation &op : getBody().front()) {
    if (auto p = dyn_cast<PersistentOp>(op)) {
      if (!persistent.insert(p.getName()).second)
        return p.emitOpError("persistent tensor '")
               << p.getName() << "' is declared twice";
      if (!persistentBuffers.insert(p.getBuffer()).second)
        return p.emitOpError("buffer already holds another persistent tensor");
    }
    if (isa<StepOp>(op))
      ++steps;
  }
  if (steps != 1)
    return emitOpError("must hold exactly one rt.step, found ") << steps;
  return success();
}

//===----------------------------------------------------------------------===//
// BufferOp
//===----------------------------------------------------------------------===//

int64_t BufferOp::getBytes() {
  MemRefType type = getType();
  return type.getNumElements() * elementBytes(type.getElementType());
}

LogicalResult BufferOp::verify() {
  int64_t offset = getOffset();
  if (offset < 0 || offset % kBufferAlignment != 0)
    return emitOpError("offset ")
           << offset << " is not a non-negative multiple of "
           << kBufferAlignment;
  if (getSlots().has_value() != getStride().has_value())
    return emitOpError("has slots without a stride, or the other way round");
  int64_t slots = getSlotCount(), stride = getStride().value_or(0);
  if (getSlots() && (slots < 1 || slots > kMaxBufferSlots))
    return emitOpError("has ")
           << slots << " slots; it needs 1 to " << kMaxBufferSlots;
  if (getSlots() && (stride < getBytes() || stride % kBufferAlignment != 0))
    return emitOpError("stride ")
           << stride << " must be a multiple of " << kBufferAlignment
           << " and at least the buffer's " << getBytes() << " bytes";
  int64_t arena = (*this)->getParentOfType<ProgramOp>().getArenaBytes();
  int64_t room = arena - offset - getBytes();
  if (offset > arena || getBytes() > arena - offset ||
      (slots > 1 && stride > room / (slots - 1)))
    return emitOpError("its ")
           << getBytes() << " bytes at offset " << offset
           << (slots > 1 ? " in " + std::to_string(slots) + " slots" : "")
           << " extend past the arena of " << arena << " bytes";
  return success();
}

int64_t triad::rt::slotsOf(FuncOp func) {
  int64_t slots = 0;
  auto visit = [&](ValueRange buffers) {
    for (Value buffer : buffers)
      if (auto op = buffer.getDefiningOp<BufferOp>())
        if (op.getSlots())
          slots = std::max(slots, op.getSlotCount());
  };
  visit(func.getArgs());
  visit(func.getResults());
  for (auto kernel : func.getBody().getOps<KernelOp>()) {
    visit(kernel.getInputs());
    visit(kernel.getOutputs());
  }
  return slots;
}

//===----------------------------------------------------------------------===//
// PersistentOp
//===----------------------------------------------------------------------===//

LogicalResult PersistentOp::verify() {
  auto type = cast<MemRefType>(getBuffer().getType());
  ArrayRef<int64_t> global = getGlobalShape(), offsets = getOffsets();
  auto buffer = getBuffer().getDefiningOp<BufferOp>();
  if (!buffer)
    return emitOpError("buffer must be an rt.buffer");
  if (buffer.getSlots())
    return emitOpError("buffer must not be slotted: one copy of '")
           << getName() << "' lives between steps";
  if (global.size() != static_cast<size_t>(type.getRank()) ||
      offsets.size() != global.size())
    return emitOpError("global shape and offsets must have the buffer's rank ")
           << type.getRank();
  if (!getSplit().empty() &&
      getSplit().size() != static_cast<size_t>(type.getRank()))
    return emitOpError("split must list the axes of every dimension (")
           << type.getRank() << "), not " << getSplit().size();
  // The pieces tile the padded shape, when there is one.
  ArrayRef<int64_t> extent = global;
  if (std::optional<ArrayRef<int64_t>> padded = getPaddedShape()) {
    extent = *padded;
    if (extent.size() != global.size())
      return emitOpError("padded shape must have the buffer's rank ")
             << type.getRank();
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (extent[d] < global[d])
        return emitOpError("padded dimension ")
               << d << " (" << extent[d] << ") is smaller than the global "
               << global[d];
  }
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (offsets[d] < 0 || offsets[d] > extent[d] ||
        type.getDimSize(d) > extent[d] - offsets[d])
      return emitOpError("the slice of dimension ")
             << d << " ([" << offsets[d] << ", "
             << offsets[d] + type.getDimSize(d) << ")) is outside the "
             << (getPaddedShape() ? "padded" : "global") << " size "
             << extent[d];
  // A gradient sum: a float tensor (16-bit with grad-accumulation=param)
  // that begin_step zeroes.
  if (getRole() == Role::Accumulator &&
      (!isa<FloatType>(type.getElementType()) ||
       getInit().getKind() != triad::InitKind::zeros))
    return emitOpError("accumulator '")
           << getName()
           << "' must be a float tensor (f32, bf16 or f16) and start at zeros";
  return success();
}

//===----------------------------------------------------------------------===//
// FuncOp
//===----------------------------------------------------------------------===//

/// Every buffer an rt op names is an rt.buffer of its program.
static LogicalResult checkBuffers(Operation *op, ValueRange values) {
  for (Value value : values)
    if (!value.getDefiningOp<BufferOp>())
      return op->emitOpError("operands must be rt.buffer values");
  return success();
}

LogicalResult FuncOp::verify() {
  if (failed(checkBuffers(*this, getArgs())) ||
      failed(checkBuffers(*this, getResults())))
    return failure();
  if (getArgKinds().size() != getArgs().size())
    return emitOpError("has ") << getArgs().size() << " arguments but "
                               << getArgKinds().size() << " argument kinds";
  for (Attribute kind : getArgKinds()) {
    StringRef name = cast<StringAttr>(kind).getValue();
    if (name != "tokens" && name != "labels" && name != "prefix_lengths")
      return emitOpError("argument kind '")
             << name
             << "' is unknown (expected tokens, labels or prefix_lengths)";
  }
  for (Value arg : getArgs())
    if (!cast<MemRefType>(arg.getType()).getElementType().isInteger(32))
      return emitOpError("arguments hold token ids and must be i32 buffers");
  if (getResultNames().size() != getResults().size())
    return emitOpError("has ") << getResults().size() << " results but "
                               << getResultNames().size() << " result names";
  llvm::StringSet<> names;
  for (Attribute name : getResultNames()) {
    StringRef text = cast<StringAttr>(name).getValue();
    if (text.empty() || !names.insert(text).second)
      return emitOpError("result names must be non-empty and distinct");
  }
  if (getLayerNames().has_value() != getLayerSpans().has_value())
    return emitOpError("layers need both their names and their spans");
  if (std::optional<ArrayRef<int64_t>> spans = getLayerSpans()) {
    if (spans->size() != 2 * getLayerNames()->size())
      return emitOpError("has ")
             << getLayerNames()->size() << " layers but " << spans->size()
             << " span bounds (two per layer)";
    int64_t kernels = llvm::range_size(getBody().getOps<KernelOp>());
    for (size_t i = 0, end = 0; i < spans->size(); i += 2) {
      int64_t first = (*spans)[i], last = (*spans)[i + 1];
      if (first < static_cast<int64_t>(end) || first >= last || last > kernels)
        return emitOpError("layer span [")
               << first << ", " << last << ") must follow the one before it "
               << "and lie in the body's " << kernels << " kernels";
      end = static_cast<size_t>(last);
    }
  }
  return success();
}

//===----------------------------------------------------------------------===//
// KernelOp
//===----------------------------------------------------------------------===//

/// What the module's rt.plan says that kernels' attributes depend on;
/// unknown without one.
static plan::KernelContext kernelContextOf(ProgramOp program) {
  plan::KernelContext context;
  auto module = program ? program->getParentOfType<ModuleOp>() : nullptr;
  if (!module)
    return context;
  for (PlanOp header : module.getOps<PlanOp>()) {
    llvm::StringMap<int64_t> axisSize;
    for (auto [name, size] : llvm::zip(header.getAxes(), header.getAxisSizes()))
      axisSize[cast<StringAttr>(name).getValue()] = size;
    context.known = true;
    context.vocab = header.getVocab();
    context.tp = axisSize.lookup("tp") > 0 ? axisSize.lookup("tp") : 1;
    context.paddedVocab = header.getPaddedVocab().value_or(0);
    context.microbatches = header.getMicrobatches();
    for (Attribute group : header.getGroups()) {
      int64_t size = 1;
      for (Attribute axis : cast<ArrayAttr>(group))
        size *= axisSize.lookup(cast<StringAttr>(axis).getValue());
      context.groupSizes.push_back(size);
    }
  }
  return context;
}

/// Whether `kernel` may write an output in place of an input (the kernel
/// contract says which).
static bool updatesInPlace(KernelOp kernel) {
  switch (kernel.getOpcode()) {
  case OpCode::AdamW:
  case OpCode::Accumulate:
  case OpCode::ScaleBy:
  case OpCode::Select:
  case OpCode::Copy:
  case OpCode::AllReduce:
    return true;
  case OpCode::Matmul:
    // The accumulating epilogue: c is its accumulator.
    return kernel.getInts().size() == 3 &&
           kernel.getInts()[2] ==
               static_cast<int64_t>(plan::EpilogueCode::Accumulate);
  default:
    return false;
  }
}

LogicalResult KernelOp::verify() {
  if (failed(checkBuffers(*this, getInputs())) ||
      failed(checkBuffers(*this, getOutputs())))
    return failure();
  if (getOpcode() == OpCode::Send &&
      (getInputs().size() != 1 || !getOutputs().empty()))
    return emitOpError("kernel 'send' reads one input and writes no output");
  if (getOpcode() == OpCode::Recv &&
      (!getInputs().empty() || getOutputs().size() != 1))
    return emitOpError("kernel 'recv' reads no input and writes one output");
  if (getOutputs().empty() && getOpcode() != OpCode::Send)
    return emitOpError("writes no output");
  if (!updatesInPlace(*this))
    for (Value out : getOutputs())
      if (llvm::is_contained(getInputs(), out))
        return emitOpError("kernel '")
               << stringifyOpCode(getOpcode())
               << "' cannot write an output in place of an input";
  if (getOpcode() == OpCode::Accumulate &&
      (getInputs().empty() || getOutputs().front() != getInputs().front()))
    return emitOpError("accumulate must write its first input in place");

  // The runtime's kernel contract, on the buffers' types.
  plan::KernelView view;
  view.op = static_cast<plan::OpCode>(getOpcode());
  llvm::DenseMap<Value, uint32_t> operandOf;
  auto operand = [&](Value value, StringRef side, size_t index) {
    auto [it, added] = operandOf.try_emplace(
        value, static_cast<uint32_t>(view.operands.size()));
    if (added) {
      auto type = cast<MemRefType>(value.getType());
      Type element = type.getElementType();
      plan::DType dtype = element.isF32()    ? plan::DType::F32
                          : element.isBF16() ? plan::DType::BF16
                          : element.isF16()  ? plan::DType::F16
                                             : plan::DType::I32;
      view.operands.push_back(
          {dtype,
           std::vector<int64_t>(type.getShape().begin(), type.getShape().end()),
           (side + " " + Twine(index)).str()});
    }
    return it->second;
  };
  for (auto [index, value] : llvm::enumerate(getInputs()))
    view.inputs.push_back(operand(value, "input", index));
  for (auto [index, value] : llvm::enumerate(getOutputs()))
    view.outputs.push_back(operand(value, "output", index));
  view.ints.assign(getInts().begin(), getInts().end());
  view.floats.assign(getFloats().begin(), getFloats().end());
  absl::Status status = plan::checkKernel(
      view, kernelContextOf((*this)->getParentOfType<ProgramOp>()));
  if (!status.ok())
    return emitOpError("kernel '")
           << stringifyOpCode(getOpcode()) << "': "
           << StringRef(status.message().data(), status.message().size());
  return success();
}

//===----------------------------------------------------------------------===//
// StepOp
//===----------------------------------------------------------------------===//

LogicalResult StepOp::verify() {
  if (getCallees().size() != getMicrobatches().size())
    return emitOpError("has ")
           << getCallees().size() << " calls but " << getMicrobatches().size()
           << " microbatch indices";
  auto program = (*this)->getParentOfType<ProgramOp>();
  int64_t microbatches = -1;
  if (auto module = program->getParentOfType<ModuleOp>())
    for (auto plan : module.getOps<PlanOp>())
      microbatches = plan.getMicrobatches();
  std::optional<ArrayRef<int64_t>> callSlots = getSlots();
  if (callSlots && callSlots->size() != getCallees().size())
    return emitOpError("has ") << getCallees().size() << " calls but "
                               << callSlots->size() << " slot indices";
  // The functions by name, with their slots, found once.
  llvm::StringMap<int64_t> functionSlots;
  for (auto func : program.getBody().getOps<FuncOp>())
    functionSlots[func.getSymName()] = slotsOf(func) > 0 ? kMaxBufferSlots : 1;
  for (auto [index, entry] :
       llvm::enumerate(llvm::zip(getCallees(), getMicrobatches()))) {
    auto [callee, microbatch] = entry;
    auto symbol = cast<FlatSymbolRefAttr>(callee);
    auto it = functionSlots.find(symbol.getValue());
    if (it == functionSlots.end())
      return emitOpError("calls ") << symbol << ", which is no rt.func here";
    if (microbatch < 0 || (microbatches > 0 && microbatch >= microbatches))
      return emitOpError("microbatch ")
             << microbatch << " of the call of " << symbol << " is outside [0, "
             << microbatches << ")";
    int64_t slot = callSlots ? (*callSlots)[index] : 0;
    if (slot < 0 || slot >= it->second)
      return emitOpError("slot ") << slot << " of the call of " << symbol
                                  << " is outside [0, " << it->second << ")";
  }
  if (getActions().has_value() != getCallActions().has_value())
    return emitOpError("lists schedule actions without the action of each "
                       "call, or the other way round");
  if (std::optional<ArrayRef<int64_t>> at = getCallActions()) {
    if (at->size() != getCallees().size())
      return emitOpError("has ") << getCallees().size() << " calls but "
                                 << at->size() << " action indices";
    int64_t last = -1, count = getActions()->size();
    for (auto [callee, index] : llvm::zip(getCallees(), *at)) {
      if (index == -1)
        continue;
      if (index < 0 || index >= count || index <= last)
        return emitOpError("the call of ")
               << callee << " performs action " << index
               << "; calls follow the " << count
               << " actions in order, each at most once (-1: none)";
      last = index;
    }
  }
  return success();
}
