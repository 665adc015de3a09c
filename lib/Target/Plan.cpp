//===- Plan.cpp - rt programs to plan files and back ----------------------===//
//
// Export walks the rt ops in order and writes their FlatBuffers twins;
// every rt.buffer of a program becomes one plan value. Import is the
// inverse. Both directions run the runtime's loader checks, so neither can
// produce a plan the runtime would refuse.
//
//===----------------------------------------------------------------------===//

#include "triad/Target/Plan.h"

#include "dialects/Rt/RtDialect.h"
#include "runtime/plan/Plan.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
namespace fb = flatbuffers;
namespace plan = triad::plan;
namespace rtir = triad::rt;

// The rt dialect's enums are the plan's, value for value (the kernels are
// checked where the verifier hands them to the plan's contract).
static_assert(static_cast<int>(rtir::Role::Accumulator) ==
              static_cast<int>(plan::Role::MAX));
static_assert(rtir::kMaxBufferSlots == rtir::kMaxSlots,
              "the rt dialect and the plan loader allow different slots");

namespace {

FailureOr<plan::DType> dtypeOf(Type type) {
  if (type.isF32())
    return plan::DType::F32;
  if (type.isBF16())
    return plan::DType::BF16;
  if (type.isF16())
    return plan::DType::F16;
  if (type.isInteger(32))
    return plan::DType::I32;
  return failure();
}

Type typeOf(plan::DType dtype, MLIRContext *ctx) {
  switch (dtype) {
  case plan::DType::F32:
    return Float32Type::get(ctx);
  case plan::DType::BF16:
    return BFloat16Type::get(ctx);
  case plan::DType::F16:
    return Float16Type::get(ctx);
  case plan::DType::I32:
    return IntegerType::get(ctx, 32);
  }
  return {};
}

plan::InitKind initKindOf(triad::InitKind kind) {
  switch (kind) {
  case triad::InitKind::normal:
    return plan::InitKind::Normal;
  case triad::InitKind::scaled_normal:
    return plan::InitKind::ScaledNormal;
  case triad::InitKind::zeros:
    return plan::InitKind::Zeros;
  case triad::InitKind::ones:
    return plan::InitKind::Ones;
  case triad::InitKind::constant:
    return plan::InitKind::Constant;
  }
  return plan::InitKind::Zeros;
}

triad::InitKind initKindOf(plan::InitKind kind) {
  switch (kind) {
  case plan::InitKind::Normal:
    return triad::InitKind::normal;
  case plan::InitKind::ScaledNormal:
    return triad::InitKind::scaled_normal;
  case plan::InitKind::Zeros:
    return triad::InitKind::zeros;
  case plan::InitKind::Ones:
    return triad::InitKind::ones;
  case plan::InitKind::Constant:
    return triad::InitKind::constant;
  }
  return triad::InitKind::zeros;
}

fb::Offset<fb::Vector<fb::Offset<fb::String>>> strings(fb::FlatBufferBuilder &b,
                                                       ArrayAttr list) {
  std::vector<std::string> values;
  for (Attribute a : list)
    values.push_back(cast<StringAttr>(a).getValue().str());
  return b.CreateVectorOfStrings(values);
}

fb::Offset<plan::Program> exportProgram(fb::FlatBufferBuilder &b,
                                        rtir::ProgramOp program) {
  llvm::DenseMap<Value, uint32_t> index;
  std::vector<fb::Offset<plan::Value>> values;
  std::vector<fb::Offset<plan::Persistent>> persistent;
  std::vector<fb::Offset<plan::Function>> functions;
  std::vector<plan::Call> step;
  llvm::StringMap<uint32_t> functionIndex;
  auto indices = [&](ValueRange list) {
    std::vector<uint32_t> result;
    for (Value v : list)
      result.push_back(index.at(v));
    return b.CreateVector(result);
  };

  for (Operation &op : program.getBody().front()) {
    if (auto buffer = dyn_cast<rtir::BufferOp>(op)) {
      MemRefType type = buffer.getType();
      plan::Region region(static_cast<uint64_t>(buffer.getOffset()),
                          static_cast<uint64_t>(buffer.getBytes()));
      index[buffer.getResult()] = values.size();
      values.push_back(plan::CreateValue(
          b, *dtypeOf(type.getElementType()),
          b.CreateVector(type.getShape().data(), type.getShape().size()),
          &region, static_cast<uint32_t>(buffer.getSlots().value_or(0)),
          static_cast<uint64_t>(buffer.getStride().value_or(0))));
    } else if (auto p = dyn_cast<rtir::PersistentOp>(op)) {
      triad::InitAttr init = p.getInit();
      bool constant = init.getKind() == triad::InitKind::constant;
      double stdOrValue = init.getStd().convertToDouble();
      auto initOffset = plan::CreateInit(
          b, initKindOf(init.getKind()), constant ? 0.0 : stdOrValue,
          init.getLayers(), constant ? stdOrValue : 0.0,
          b.CreateString(p.getStream().value_or(p.getName()).str()));
      std::vector<fb::Offset<plan::DimSplit>> split;
      for (Attribute dim : p.getSplit()) {
        std::vector<fb::Offset<fb::String>> axes;
        for (Attribute axis : cast<ArrayAttr>(dim))
          axes.push_back(
              b.CreateString(cast<StringAttr>(axis).getValue().str()));
        split.push_back(plan::CreateDimSplit(b, b.CreateVector(axes)));
      }
      persistent.push_back(plan::CreatePersistent(
          b, b.CreateString(p.getName().str()),
          static_cast<plan::Role>(p.getRole()), index.at(p.getBuffer()),
          b.CreateVector(p.getGlobalShape().data(), p.getGlobalShape().size()),
          b.CreateVector(p.getOffsets().data(), p.getOffsets().size()),
          initOffset, split.empty() ? 0 : b.CreateVector(split),
          p.getPaddedShape() ? b.CreateVector(p.getPaddedShape()->data(),
                                              p.getPaddedShape()->size())
                             : 0));
    } else if (auto func = dyn_cast<rtir::FuncOp>(op)) {
      std::vector<fb::Offset<plan::Instr>> body;
      for (auto kernel : func.getBody().getOps<rtir::KernelOp>())
        body.push_back(plan::CreateInstr(
            b, static_cast<plan::OpCode>(kernel.getOpcode()),
            indices(kernel.getInputs()), indices(kernel.getOutputs()),
            b.CreateVector(kernel.getInts().data(), kernel.getInts().size()),
            b.CreateVector(kernel.getFloats().data(),
                           kernel.getFloats().size())));
      std::vector<plan::ArgKind> kinds;
      for (Attribute kind : func.getArgKinds())
        kinds.push_back(
            llvm::StringSwitch<plan::ArgKind>(cast<StringAttr>(kind).getValue())
                .Case("tokens", plan::ArgKind::Tokens)
                .Case("prefix_lengths", plan::ArgKind::PrefixLengths)
                .Default(plan::ArgKind::Labels));
      functionIndex[func.getSymName()] = functions.size();
      fb::Offset<fb::Vector<fb::Offset<fb::String>>> layerNames = 0;
      fb::Offset<fb::Vector<uint32_t>> layerSpans = 0;
      if (std::optional<ArrayRef<int64_t>> spans = func.getLayerSpans()) {
        layerNames = strings(b, *func.getLayerNames());
        std::vector<uint32_t> bounds(spans->begin(), spans->end());
        layerSpans = b.CreateVector(bounds);
      }
      functions.push_back(plan::CreateFunction(
          b, b.CreateString(func.getSymName().str()), indices(func.getArgs()),
          b.CreateVector(kinds), indices(func.getResults()),
          strings(b, func.getResultNames()), b.CreateVector(body), layerNames,
          layerSpans));
    } else if (auto calls = dyn_cast<rtir::StepOp>(op)) {
      std::optional<ArrayRef<int64_t>> slots = calls.getSlots();
      for (auto [i, callee] : llvm::enumerate(calls.getCallees()))
        step.emplace_back(
            functionIndex.lookup(cast<FlatSymbolRefAttr>(callee).getValue()),
            static_cast<uint32_t>(calls.getMicrobatches()[i]),
            static_cast<uint32_t>(slots ? (*slots)[i] : 0));
    }
  }
  fb::Offset<fb::Vector<fb::Offset<fb::String>>> actions = 0;
  fb::Offset<fb::Vector<int32_t>> callActions = 0;
  for (auto calls : program.getBody().getOps<rtir::StepOp>())
    if (calls.getActions()) {
      actions = strings(b, *calls.getActions());
      std::vector<int32_t> at(calls.getCallActions()->begin(),
                              calls.getCallActions()->end());
      callActions = b.CreateVector(at);
    }
  return plan::CreateProgram(
      b, static_cast<uint32_t>(program.getPipelineRank()),
      static_cast<uint64_t>(program.getArenaBytes()), b.CreateVector(values),
      b.CreateVector(persistent), b.CreateVector(functions),
      b.CreateVectorOfStructs(step), actions, callActions);
}

} // namespace

FailureOr<std::string> triad::exportPlan(ModuleOp module) {
  auto plans = llvm::to_vector(module.getOps<rtir::PlanOp>());
  auto programs = llvm::to_vector(module.getOps<rtir::ProgramOp>());
  if (plans.size() != 1 || programs.empty())
    return emitError(module.getLoc(),
                     "needs one rt.plan and at least one rt.program "
                     "(run --triad-train-pipeline first)");
  rtir::PlanOp header = plans.front();
  // A step call must come after the function it calls: check the order
  // the exporter relies on.
  for (rtir::ProgramOp program : programs) {
    llvm::StringSet<> seen;
    for (Operation &op : program.getBody().front()) {
      if (auto func = dyn_cast<rtir::FuncOp>(op))
        seen.insert(func.getSymName());
      if (auto step = dyn_cast<rtir::StepOp>(op))
        for (Attribute callee : step.getCallees())
          if (!seen.contains(cast<FlatSymbolRefAttr>(callee).getValue()))
            return step.emitOpError("must follow the functions it calls");
    }
  }

  fb::FlatBufferBuilder b;
  std::vector<fb::Offset<plan::MeshAxis>> mesh;
  for (auto [name, size] : llvm::zip(header.getAxes(), header.getAxisSizes()))
    mesh.push_back(plan::CreateMeshAxis(
        b, b.CreateString(cast<StringAttr>(name).getValue().str()),
        static_cast<uint32_t>(size)));
  std::vector<fb::Offset<plan::Group>> groups;
  for (Attribute group : header.getGroups()) {
    std::vector<fb::Offset<fb::String>> axes;
    for (Attribute axis : cast<ArrayAttr>(group))
      axes.push_back(b.CreateString(cast<StringAttr>(axis).getValue().str()));
    groups.push_back(plan::CreateGroup(b, b.CreateVector(axes)));
  }
  // FlatBuffers addresses 2 GiB and its builder does not say when a plan
  // outgrows that: the exporter stops at half of it, checked after every
  // program (a plan's size follows its layers and stages: a 1T-parameter
  // model at pp 64 takes 12 MB).
  std::vector<fb::Offset<plan::Program>> programOffsets;
  auto tooLarge = [&]() -> LogicalResult {
    if (b.GetSize() < rt::kMaxPlanBytes / 2)
      return success();
    return emitError(module.getLoc(), "the plan passed 1 GiB (")
           << b.GetSize() << " bytes after " << programOffsets.size() << " of "
           << programs.size()
           << " programs); the plan format addresses at most 2 GiB";
  };
  for (rtir::ProgramOp program : programs) {
    programOffsets.push_back(exportProgram(b, program));
    if (failed(tooLarge()))
      return failure();
  }
  fb::Offset<fb::String> schedule = 0;
  if (header.getSchedule())
    schedule = b.CreateString(header.getSchedule()->str());
  b.Finish(plan::CreatePlan(
               b, rt::kPlanVersion, b.CreateVector(mesh),
               b.CreateVector(programOffsets), header.getSeq(),
               header.getVocab(), header.getBatch(), header.getMicrobatches(),
               b.CreateVector(groups), schedule,
               static_cast<uint32_t>(header.getVirtualStages().value_or(0)),
               header.getPaddedVocab().value_or(0)),
           plan::PlanIdentifier());

  std::string bytes = rt::sealPlan(std::string(
      reinterpret_cast<const char *>(b.GetBufferPointer()), b.GetSize()));
  absl::StatusOr<rt::LoadedPlan> checked =
      rt::loadPlanFromBytes(bytes, "exported plan");
  if (!checked.ok())
    return emitError(module.getLoc(), "the plan fails the runtime's checks: ")
           << std::string(checked.status().message());
  return bytes;
}

OwningOpRef<ModuleOp> triad::importPlan(llvm::StringRef bytes,
                                        llvm::StringRef name,
                                        MLIRContext *ctx) {
  ctx->loadDialect<rtir::RtDialect>();
  Location loc = FileLineColLoc::get(ctx, name, 0, 0);
  absl::StatusOr<rt::LoadedPlan> loaded =
      rt::loadPlanFromBytes(bytes.str(), name.str());
  if (!loaded.ok()) {
    emitError(loc) << std::string(loaded.status().message());
    return {};
  }
  const plan::Plan &root = loaded->root();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder b = OpBuilder::atBlockEnd(module->getBody());

  SmallVector<StringRef> axes;
  SmallVector<int64_t> sizes;
  if (root.mesh())
    for (const plan::MeshAxis *axis : *root.mesh()) {
      axes.push_back(axis->name()->string_view());
      sizes.push_back(axis->size());
    }
  SmallVector<Attribute> groups;
  if (root.groups())
    for (const plan::Group *group : *root.groups()) {
      SmallVector<StringRef> names;
      if (group->axes())
        for (const fb::String *axis : *group->axes())
          names.push_back(axis->string_view());
      groups.push_back(b.getStrArrayAttr(names));
    }
  auto header = rtir::PlanOp::create(
      b, loc, b.getStrArrayAttr(axes), b.getDenseI64ArrayAttr(sizes),
      root.seq(), root.vocab(), root.batch(), root.microbatches(),
      /*padded_vocab=*/nullptr, b.getArrayAttr(groups), /*schedule=*/nullptr,
      /*virtual_stages=*/nullptr);
  if (root.padded_vocab() != 0)
    header.setPaddedVocabAttr(b.getI64IntegerAttr(root.padded_vocab()));
  if (root.schedule()) {
    header.setScheduleAttr(b.getStringAttr(root.schedule()->string_view()));
    header.setVirtualStagesAttr(b.getI64IntegerAttr(root.virtual_stages()));
  }

  auto i64s = [](const fb::Vector<int64_t> *list) {
    SmallVector<int64_t> result;
    if (list)
      result.assign(list->begin(), list->end());
    return result;
  };
  for (const plan::Program *program : *root.programs()) {
    auto op = rtir::ProgramOp::create(
        b, loc, ("rank" + llvm::Twine(program->pipeline_rank())).str(),
        program->pipeline_rank(), program->arena_bytes());
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(b.createBlock(&op.getBody()));
    SmallVector<Value> values;
    for (const plan::Value *value : *program->values()) {
      auto type =
          MemRefType::get(i64s(value->shape()), typeOf(value->dtype(), ctx));
      auto buffer = rtir::BufferOp::create(
          b, loc, type, static_cast<int64_t>(value->region()->offset()));
      if (value->slots() > 0) {
        buffer.setSlotsAttr(b.getI64IntegerAttr(value->slots()));
        buffer.setStrideAttr(
            b.getI64IntegerAttr(static_cast<int64_t>(value->slot_stride())));
      }
      values.push_back(buffer);
    }
    auto valueList = [&](const fb::Vector<uint32_t> *list) {
      SmallVector<Value> result;
      if (list)
        for (uint32_t i : *list)
          result.push_back(values[i]);
      return result;
    };
    if (program->persistent())
      for (const plan::Persistent *p : *program->persistent()) {
        const plan::Init *init = p->init();
        bool constant = init->kind() == plan::InitKind::Constant;
        // The stream is the tensor's name unless it says another.
        StringAttr stream;
        if (init->stream() && init->stream()->str() != p->name()->str())
          stream = b.getStringAttr(init->stream()->str());
        auto initAttr = triad::InitAttr::get(
            ctx, initKindOf(init->kind()),
            APFloat(constant ? init->value() : init->std()), init->layers());
        SmallVector<Attribute> split;
        if (p->split())
          for (const plan::DimSplit *dim : *p->split()) {
            SmallVector<StringRef> axes;
            if (dim->axes())
              for (const fb::String *axis : *dim->axes())
                axes.push_back(axis->string_view());
            split.push_back(b.getStrArrayAttr(axes));
          }
        rtir::PersistentOp::create(
            b, loc, p->name()->str(), static_cast<rtir::Role>(p->role()),
            values[p->value()], b.getDenseI64ArrayAttr(i64s(p->global_shape())),
            p->padded_shape() ? b.getDenseI64ArrayAttr(i64s(p->padded_shape()))
                              : DenseI64ArrayAttr(),
            b.getDenseI64ArrayAttr(i64s(p->offsets())), b.getArrayAttr(split),
            initAttr, stream);
      }
    SmallVector<Attribute> functionNames;
    for (const plan::Function *function : *program->functions()) {
      SmallVector<StringRef> kinds, names;
      if (function->arg_kinds())
        for (auto kind : *function->arg_kinds())
          kinds.push_back(kind == plan::ArgKind::Tokens   ? "tokens"
                          : kind == plan::ArgKind::Labels ? "labels"
                                                          : "prefix_lengths");
      if (function->result_names())
        for (const fb::String *n : *function->result_names())
          names.push_back(n->string_view());
      ArrayAttr layerNames;
      DenseI64ArrayAttr layerSpans;
      if (function->layer_names() && function->layer_spans()) {
        SmallVector<StringRef> layers;
        for (const fb::String *n : *function->layer_names())
          layers.push_back(n->string_view());
        layerNames = b.getStrArrayAttr(layers);
        SmallVector<int64_t> bounds(function->layer_spans()->begin(),
                                    function->layer_spans()->end());
        layerSpans = b.getDenseI64ArrayAttr(bounds);
      }
      auto func = rtir::FuncOp::create(
          b, loc, function->name()->str(), valueList(function->args()),
          b.getStrArrayAttr(kinds), valueList(function->results()),
          b.getStrArrayAttr(names), layerNames, layerSpans);
      functionNames.push_back(
          FlatSymbolRefAttr::get(ctx, function->name()->string_view()));
      OpBuilder::InsertionGuard bodyGuard(b);
      b.setInsertionPointToEnd(b.createBlock(&func.getBody()));
      if (function->body())
        for (const plan::Instr *instr : *function->body()) {
          SmallVector<double> floats;
          if (instr->floats())
            floats.assign(instr->floats()->begin(), instr->floats()->end());
          rtir::KernelOp::create(b, loc, static_cast<rtir::OpCode>(instr->op()),
                                 valueList(instr->inputs()),
                                 valueList(instr->outputs()),
                                 i64s(instr->ints()), floats);
        }
    }
    SmallVector<Attribute> callees;
    SmallVector<int64_t> microbatches, slots;
    bool slotted = false;
    if (program->step())
      for (const plan::Call *call : *program->step()) {
        callees.push_back(functionNames[call->function()]);
        microbatches.push_back(call->microbatch());
        slots.push_back(call->slot());
        slotted |= call->slot() != 0;
      }
    auto step = rtir::StepOp::create(
        b, loc, b.getArrayAttr(callees), b.getDenseI64ArrayAttr(microbatches),
        slotted ? b.getDenseI64ArrayAttr(slots) : DenseI64ArrayAttr(),
        /*actions=*/nullptr,
        /*call_actions=*/nullptr);
    if (program->actions() && program->call_actions()) {
      SmallVector<StringRef> actions;
      for (const fb::String *action : *program->actions())
        actions.push_back(action->string_view());
      step.setActionsAttr(b.getStrArrayAttr(actions));
      step.setCallActionsAttr(b.getDenseI64ArrayAttr(SmallVector<int64_t>(
          program->call_actions()->begin(), program->call_actions()->end())));
    }
  }
  if (failed(mlir::verify(*module)))
    return {};
  return module;
}
