//===- LowerToRt.cpp - the training step as per-rank rt programs ----------===//
//
// Lowers @microbatch_step (or, under a pipeline, the stage functions of
// --triad-pipeline-materialize) and @apply_step to rt.programs: every
// tensor value becomes a buffer (a view of a storage: reshapes share their
// input's storage), every op a kernel call (layers flattened), and the
// storages get arena offsets from their lifetimes
// (lib/Analysis/MemoryPlanner). Persistent storages (parameters, state,
// accumulators) sit at fixed offsets first; a stage's kept values above
// them, one copy per microbatch in flight; each function's temporaries
// share the bytes above those.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "dialects/Dist/DistDialect.h"
#include "dialects/Triad/TriadOps.h"
#include "passes/Lowering/EpilogueFusion.h"
#include "passes/Pipeline/Passes.h"
#include "passes/Sharding/LayoutRules.h"
#include "runtime/plan/KernelCodes.h"
#include "triad/Analysis/MemoryPlanner.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <limits>
#include <map>
#include <set>

namespace triad {
#define GEN_PASS_DEF_LOWERTORT
#include "passes/Lowering/Passes.h.inc"
} // namespace triad

using namespace mlir;
using namespace triad;
using rt::OpCode;

namespace {

/// Point-to-point tags: the schedule's transfers count up from 0 (one tag
/// per direction and sending stage: the microbatches of one tag go in
/// order, and MPI keeps messages of one tag in order), the exchanges of
/// tied gradients count up from here (MPI guarantees tags up to 32767).
constexpr int64_t kTiedTagBase = 32000;

/// Bytes that back one or more buffers.
struct Storage {
  int64_t bytes = 0;
  bool persistent = false;
  int64_t offset = -1;
  /// A pipeline stage's value kept from one call to a later one: `slots`
  /// copies `stride` bytes apart (0: one copy, live within one call).
  int64_t slots = 0, stride = 0;
};

/// A buffer: a typed view of a storage.
struct Slot {
  unsigned storage;
  MemRefType type;
};

struct Kernel {
  OpCode opcode;
  SmallVector<unsigned> inputs, outputs;
  SmallVector<int64_t> ints;
  SmallVector<double> floats;
  /// The dist.all_reduce bucket the kernel reduces part of (-1: none).
  int64_t bucket = -1;
  /// Why a collective runs (the comm report prints it).
  std::string reason;
  /// The model layer it comes from ("transformer 3"); empty: none.
  std::string layer = {};
};

struct Function {
  std::string name;
  /// The pipeline stage whose work it is (-1: none; begin and apply step).
  int64_t stage = -1;
  SmallVector<unsigned> args;
  SmallVector<std::string> argKinds;
  SmallVector<unsigned> results;
  SmallVector<std::string> resultNames;
  std::vector<Kernel> body;
};

struct Persistent {
  std::string name;
  rt::Role role;
  unsigned slot;
  InitAttr init;
  /// The global shape, and the axes splitting each dimension (none:
  /// replicated).
  SmallVector<int64_t> globalShape;
  SmallVector<SmallVector<std::string>> split;
  /// The shape the pieces tile when the tensor is padded (a vocabulary
  /// padded to a multiple of tp), empty otherwise.
  SmallVector<int64_t> paddedShape;
  /// The generator stream its init draws from, when not its own name.
  std::string stream = {};
};

/// What a triad op becomes: a kernel with its attributes.
struct KernelSpec {
  OpCode opcode;
  SmallVector<int64_t> ints;
  SmallVector<double> floats;
};

/// The plan's number for an activation (runtime/plan/KernelCodes.h).
int64_t activationCode(ActivationKind kind) {
  plan::ActivationCode code = plan::ActivationCode::Gelu;
  switch (kind) {
  case ActivationKind::gelu:
    code = plan::ActivationCode::Gelu;
    break;
  case ActivationKind::gelu_tanh:
    code = plan::ActivationCode::GeluTanh;
    break;
  case ActivationKind::fast_gelu:
    code = plan::ActivationCode::FastGelu;
    break;
  case ActivationKind::relu:
    code = plan::ActivationCode::Relu;
    break;
  case ActivationKind::silu:
    code = plan::ActivationCode::Silu;
    break;
  }
  return static_cast<int64_t>(code);
}

/// The plan's number for an attention mask.
int64_t maskCode(MaskKind mask) {
  plan::MaskCode code = plan::MaskCode::Causal;
  switch (mask) {
  case MaskKind::causal:
    code = plan::MaskCode::Causal;
    break;
  case MaskKind::prefix:
    code = plan::MaskCode::Prefix;
    break;
  case MaskKind::none:
    code = plan::MaskCode::None;
    break;
  }
  return static_cast<int64_t>(code);
}

template <typename AttentionLike>
KernelSpec attentionSpec(OpCode opcode, AttentionLike op) {
  return {opcode,
          {static_cast<int64_t>(op.getHeads()),
           static_cast<int64_t>(op.getKvHeads()), maskCode(op.getMask()),
           op.getPrefixLengths() ? 1 : 0, op.getAlibiSlopes() ? 1 : 0},
          {op.getEffectiveScale()}};
}

/// The kernel of every triad op that computes (not the ones that only name
/// or alias storage: get_param, reshape, layer, assign, constants).
FailureOr<KernelSpec> kernelFor(Operation *op) {
  using R = FailureOr<KernelSpec>;
  auto plain = [](OpCode opcode) -> R { return KernelSpec{opcode, {}, {}}; };
  auto activation = [](ActivationKind kind) -> R {
    return KernelSpec{OpCode::Activation, {activationCode(kind)}, {}};
  };
  auto reduce = [](Value x, ArrayRef<int64_t> dims, bool mean) -> R {
    double factor = 1.0;
    if (mean) {
      auto shape = cast<RankedTensorType>(x.getType()).getShape();
      int64_t count = 1;
      for (int64_t d : dims)
        count *= shape[d];
      factor = 1.0 / static_cast<double>(count);
    }
    return KernelSpec{OpCode::Sum, {}, {factor}};
  };
  return llvm::TypeSwitch<Operation *, R>(op)
      .Case([&](EmbeddingOp) { return plain(OpCode::Embedding); })
      .Case([&](EmbeddingGradOp) { return plain(OpCode::EmbeddingGrad); })
      .Case([&](MatmulOp m) -> R {
        return KernelSpec{
            OpCode::Matmul,
            {m.getTransposeLhs() ? 1 : 0, m.getTransposeRhs() ? 1 : 0},
            {}};
      })
      .Case<AddOp, BiasAddOp>([&](Operation *) { return plain(OpCode::Add); })
      .Case([&](MulOp) { return plain(OpCode::Mul); })
      .Case([&](ScaleOp s) -> R {
        return KernelSpec{OpCode::Scale, {}, {s.getFactor().convertToDouble()}};
      })
      .Case([&](GeluOp g) {
        return activation(g.getApproximate() == GeluApproximation::tanh
                              ? ActivationKind::gelu_tanh
                              : ActivationKind::gelu);
      })
      .Case([&](FastGeluOp) { return activation(ActivationKind::fast_gelu); })
      .Case([&](ReluOp) { return activation(ActivationKind::relu); })
      .Case([&](SiluOp) { return activation(ActivationKind::silu); })
      .Case([&](SwigluOp) -> R {
        return KernelSpec{
            OpCode::Gated, {activationCode(ActivationKind::silu)}, {}};
      })
      .Case([&](GegluOp) -> R {
        return KernelSpec{
            OpCode::Gated, {activationCode(ActivationKind::gelu)}, {}};
      })
      .Case([&](ActivationGradOp a) -> R {
        return KernelSpec{
            OpCode::ActivationGrad, {activationCode(a.getKind())}, {}};
      })
      .Case([&](LayerNormOp n) -> R {
        return KernelSpec{
            OpCode::LayerNorm, {}, {n.getEpsilon().convertToDouble()}};
      })
      .Case([&](RmsNormOp n) -> R {
        return KernelSpec{
            OpCode::RmsNorm, {}, {n.getEpsilon().convertToDouble()}};
      })
      .Case([&](LayerNormGradOp n) -> R {
        return KernelSpec{
            OpCode::LayerNormGrad, {}, {n.getEpsilon().convertToDouble()}};
      })
      .Case([&](RmsNormGradOp n) -> R {
        return KernelSpec{
            OpCode::RmsNormGrad, {}, {n.getEpsilon().convertToDouble()}};
      })
      .Case([&](AttentionOp a) { return attentionSpec(OpCode::Attention, a); })
      .Case([&](AttentionGradOp a) {
        return attentionSpec(OpCode::AttentionGrad, a);
      })
      .Case([&](RopeOp r) -> R {
        return KernelSpec{OpCode::Rope,
                          {static_cast<int64_t>(r.getHeads()),
                           static_cast<int64_t>(r.getRotaryDim())},
                          {r.getBase().convertToDouble(), 1.0}};
      })
      .Case([&](RopeGradOp r) -> R {
        return KernelSpec{OpCode::Rope,
                          {static_cast<int64_t>(r.getHeads()),
                           static_cast<int64_t>(r.getRotaryDim())},
                          {r.getBase().convertToDouble(), -1.0}};
      })
      .Case([&](TransposeOp t) -> R {
        return KernelSpec{
            OpCode::Transpose, SmallVector<int64_t>(t.getPermutation()), {}};
      })
      .Case([&](SliceOp s) -> R {
        SmallVector<int64_t> ints(s.getOffsets());
        llvm::append_range(ints, s.getSizes());
        return KernelSpec{OpCode::Slice, ints, {}};
      })
      .Case([&](PadOp p) -> R {
        SmallVector<int64_t> ints(p.getLow());
        llvm::append_range(ints, p.getHigh());
        return KernelSpec{OpCode::Pad, ints, {}};
      })
      .Case([&](ConcatOp c) -> R {
        return KernelSpec{
            OpCode::Concat, {static_cast<int64_t>(c.getDim())}, {}};
      })
      .Case([&](BroadcastOp) { return plain(OpCode::Broadcast); })
      .Case([&](CastOp) { return plain(OpCode::Cast); })
      .Case([&](SumOp s) { return reduce(s.getX(), s.getDims(), false); })
      .Case([&](MeanOp m) { return reduce(m.getX(), m.getDims(), true); })
      .Case([&](DropoutOp d) -> R {
        return KernelSpec{OpCode::Dropout,
                          {static_cast<int64_t>(d.getRngStream()), 0},
                          {d.getProbability().convertToDouble()}};
      })
      .Case([&](CrossEntropyOp c) -> R {
        return KernelSpec{OpCode::CrossEntropy,
                          {static_cast<int64_t>(c.getIgnoreIndex())},
                          {}};
      })
      .Case([&](CrossEntropyGradOp c) -> R {
        return KernelSpec{OpCode::CrossEntropyGrad,
                          {static_cast<int64_t>(c.getIgnoreIndex())},
                          {}};
      })
      .Case([&](LogSumExpOp) { return plain(OpCode::LogSumExp); })
      .Case([&](SumSquaresOp s) -> R {
        if (FloatAttr limit = s.getLimitAttr())
          return KernelSpec{OpCode::SumSquares, {}, {limit.getValueAsDouble()}};
        return plain(OpCode::SumSquares);
      })
      .Case([&](ClipCoefficientOp c) -> R {
        return KernelSpec{
            OpCode::ClipCoefficient, {}, {c.getMaxNorm().convertToDouble()}};
      })
      .Case([&](LrScheduleOp l) -> R {
        return KernelSpec{
            OpCode::LrSchedule,
            {static_cast<int64_t>(l.getWarmup()),
             static_cast<int64_t>(l.getDecay())},
            {l.getPeak().convertToDouble(), l.getFloor().convertToDouble()}};
      })
      .Case([&](AdamWUpdateOp a) -> R {
        return KernelSpec{OpCode::AdamW,
                          {},
                          {a.getBeta1().convertToDouble(),
                           a.getBeta2().convertToDouble(),
                           a.getEpsilon().convertToDouble(),
                           a.getWeightDecay().convertToDouble()}};
      })
      .Case([&](SelectOp) { return plain(OpCode::Select); })
      .Case([&](LossScaleUpdateOp l) -> R {
        return KernelSpec{OpCode::LossScaleUpdate,
                          {static_cast<int64_t>(l.getGrowthInterval())},
                          {l.getGrowth().convertToDouble(),
                           l.getBackoff().convertToDouble()}};
      })
      .Default([&](Operation *other) -> R {
        return other->emitOpError("has no runtime kernel");
      });
}

/// The operands of `op` whose storage the kernel may overwrite with result
/// `result` (an in-place update): the kernel copies them over first.
SmallVector<unsigned> inPlaceOperands(Operation *op, unsigned result) {
  if (isa<AdamWUpdateOp>(op)) {
    // param' <- param, m' <- m, v' <- v
    static const unsigned kSources[] = {0, 2, 3};
    return {kSources[result]};
  }
  if (isa<SelectOp>(op))
    return {1, 2};
  return {};
}

/// The stage functions of --triad-pipeline-materialize, indexed once for
/// every pipeline rank's lowering.
struct StagedStep {
  static FailureOr<StagedStep> build(ModuleOp module, int64_t numStages);

  /// Stage `stage`'s function for `work`, or null (nothing to do).
  func::FuncOp lookup(int64_t stage, pipe::StageWork work) const {
    auto it = functions.find({stage, work});
    return it == functions.end() ? func::FuncOp() : it->second;
  }

  std::map<std::pair<int64_t, pipe::StageWork>, func::FuncOp> functions;
  /// Every stage function, in module order.
  SmallVector<func::FuncOp> all;
  /// The stages that read each parameter.
  llvm::StringMap<std::set<int64_t>> paramStages;
  /// Parameters whose gradient several stages compute parts of (the tied
  /// embedding), with those stages.
  SmallVector<std::pair<std::string, std::set<int64_t>>> tied;
};

class ProgramLowering {
public:
  /// Lowers `microbatch` (without a pipeline) or the stage functions
  /// `stepFunctions` (with one), and `apply`.
  ProgramLowering(ModuleOp module, dist::MeshOp mesh, func::FuncOp microbatch,
                  ArrayRef<func::FuncOp> stepFunctions, func::FuncOp apply,
                  std::vector<std::vector<std::string>> &groups)
      : module(module), symbols(module), mesh(mesh), groups(groups),
        microbatch(microbatch), stepFunctions(stepFunctions), apply(apply) {}

  LogicalResult lower(int64_t microbatches);
  /// The program of pipeline rank `rank` under `schedule`, whose stages
  /// --triad-pipeline-split recorded on the microbatch step.
  LogicalResult lowerPipelineRank(int64_t rank,
                                  const schedule::Schedule &schedule,
                                  const StagedStep &step);
  /// The rt.plan every program shares (after every program is lowered, so
  /// that it lists every communicator group).
  void emitPlan(int64_t microbatches);

  int64_t kernels = 0, inPlace = 0, copies = 0, arenaBytes = 0, fused = 0;
  /// The most bytes of tensors one bucketed all_gather or reduce_scatter
  /// moves (bucketCollectives).
  int64_t bucketBytes = 25 * 1024 * 1024;
  /// Whether products lower with their bias and activation as one kernel
  /// (EpilogueFusion.h).
  bool fuseEpilogues = true;
  /// Whether a step of one microbatch reduces its gradients in the backward
  /// (reduceInBackward).
  bool overlapGradReduce = true;
  /// The apply step's 1 / (the step's token count over every rank), by
  /// which it scales each accumulator to the step's mean: the same on
  /// every rank, so a sum over ranks may come before it.
  std::optional<unsigned> meanInverse;

private:
  /// Under a pipeline: the rank's schedule actions (tokens), the action
  /// each call of the step performs (-1: none), and the schedule's name
  /// and stages per rank (for the plan).
  SmallVector<std::string> actionTokens;
  SmallVector<int64_t> callActions;
  std::optional<std::pair<std::string, int64_t>> scheduleInfo;

  /// One call of the step: a function, its microbatch and the copy of its
  /// slotted storages it works on.
  struct Call {
    unsigned function;
    int64_t microbatch, slot = 0;
  };

  MemRefType memrefOf(Type tensor) {
    auto type = cast<RankedTensorType>(tensor);
    return MemRefType::get(type.getShape(), type.getElementType());
  }
  unsigned addStorage(MemRefType type, bool persistent) {
    storages.push_back(
        {type.getNumElements() * rt::elementBytes(type.getElementType()),
         persistent});
    return storages.size() - 1;
  }
  /// Whether a slot of `a` and one of `b` are views of one storage.
  bool sharesStorage(ArrayRef<unsigned> a, ArrayRef<unsigned> b) const {
    return llvm::any_of(a, [&](unsigned x) {
      return llvm::any_of(
          b, [&](unsigned y) { return slots[x].storage == slots[y].storage; });
    });
  }
  unsigned addSlot(unsigned storage, MemRefType type) {
    slots.push_back({storage, type});
    return slots.size() - 1;
  }
  unsigned temporary(MemRefType type) {
    return addSlot(addStorage(type, false), type);
  }
  unsigned temporary(Type tensor) { return temporary(memrefOf(tensor)); }
  /// A persistent tensor of (global) type `tensor`; `unpadded`, when it
  /// differs, is the shape of the model's tensor inside a padded one.
  unsigned addPersistent(StringRef name, rt::Role role, Type tensor,
                         InitAttr init, dist::LayoutAttr layout = {},
                         ArrayRef<int64_t> unpadded = {}) {
    auto global = cast<RankedTensorType>(tensor);
    MemRefType type =
        memrefOf(layout ? dist::localType(global, layout, mesh) : global);
    unsigned slot = addSlot(addStorage(type, true), type);
    Persistent p{name.str(), role, slot, init, {}, {}, {}};
    p.globalShape.assign(global.getShape().begin(), global.getShape().end());
    if (!unpadded.empty() && unpadded != global.getShape()) {
      p.paddedShape = p.globalShape;
      p.globalShape.assign(unpadded.begin(), unpadded.end());
    }
    // A padded split (ZeRO's pieces of a dimension dp does not divide): the
    // pieces of its outermost axis tile the dimension padded to a whole
    // number of them (an inner axis pads each of those pieces: see
    // rt.persistent).
    if (layout)
      for (int64_t dim = 0; dim < layout.getRank(); ++dim) {
        SmallVector<StringRef> axes = layout.getSplitAxes(dim);
        if (axes.empty())
          continue;
        int64_t outer = mesh.getGroupSize(axes.front());
        int64_t tiled = outer * dist::pieceSize(global.getDimSize(dim), outer);
        if (tiled > global.getDimSize(dim)) {
          if (p.paddedShape.empty())
            p.paddedShape = SmallVector<int64_t>(global.getShape());
          p.paddedShape[dim] = std::max(p.paddedShape[dim], tiled);
        }
      }
    if (layout && sharding::isDistributed(layout, mesh))
      for (int64_t dim = 0; dim < layout.getRank(); ++dim) {
        SmallVector<std::string> &axes = p.split.emplace_back();
        for (StringRef axis : layout.getSplitAxes(dim))
          axes.push_back(axis.str());
      }
    persistents.push_back(std::move(p));
    persistentSlot[name] = slot;
    return slot;
  }
  void emit(Function &f, OpCode opcode, SmallVector<unsigned> inputs,
            SmallVector<unsigned> outputs, SmallVector<int64_t> ints = {},
            SmallVector<double> floats = {}) {
    f.body.push_back({opcode, std::move(inputs), std::move(outputs),
                      std::move(ints), std::move(floats)});
    f.body.back().layer = currentLayer;
  }
  /// The model layer whose ops are being lowered ("transformer 3"), which
  /// the kernels they emit carry; empty outside layers.
  std::string currentLayer;
  unsigned fill(Function &f, double value) {
    unsigned slot = temporary(scalarType());
    emit(f, OpCode::Fill, {}, {slot}, {}, {value});
    return slot;
  }
  RankedTensorType scalarType() {
    return RankedTensorType::get({}, Float32Type::get(module.getContext()));
  }

  /// Declares the parameters and state `keep` accepts (by parameter name;
  /// state by the parameter it belongs to, global state always) and the
  /// accumulators of their gradients.
  void declarePersistents(llvm::function_ref<bool(StringRef)> keep =
                              [](StringRef) { return true; });
  /// Reads the data shape and the loss's ignore index from the microbatch
  /// step's signature and cross entropy.
  LogicalResult readDataShape(int64_t microbatches);
  struct Update {
    unsigned accumulator, grad, weight;
  };
  /// Adds each update's gradient into its accumulator right after the
  /// kernel of f.body[bodyStart...] that last writes the gradient (at the
  /// end when none does), in that kernel's layer. A gradient cast from
  /// another type moves up with its cast, to right after the kernel that
  /// completes the cast's input; a cast that only widens a 16-bit gradient
  /// for its accumulate goes, the accumulate reading the 16-bit gradient.
  void accumulateAfterLastWrite(Function &f, size_t bodyStart,
                                ArrayRef<Update> updates);
  LogicalResult findInPlaceUpdates(func::FuncOp func);
  /// Notes the products of `func` that lower with their epilogue
  /// (findFusedEpilogues), after findInPlaceUpdates, whose updates they do
  /// not move across.
  void findEpilogues(func::FuncOp func);
  /// The kernel of `group`, in place of its anchor.
  void lowerFusedEpilogue(const FusedEpilogue &group, Function &f);
  /// Notes the reduce_scatters that complete a gradient the step's
  /// functions return (weightedCollectives).
  void noteWeightedCollectives() {
    for (func::FuncOp function : stepFunctions) {
      Operation *terminator = function.getBody().front().getTerminator();
      for (auto [index, value] : llvm::enumerate(terminator->getOperands()))
        if (function.getResultAttr(index, "triad.grad"))
          if (auto scatter = value.getDefiningOp<dist::ReduceScatterOp>())
            weightedCollectives.insert(scatter);
    }
  }
  LogicalResult lowerBlock(Block &block, Function &f);
  LogicalResult lowerOp(Operation &op, Function &f);
  LogicalResult lowerMicrobatchStep(Function &f, int64_t microbatches);
  /// `eval_step`: the kernels of the lowered microbatch step `step` that
  /// its loss sum and token count depend on (the forward pass, without the
  /// backward or the gradient sums), on temporaries of its own, with each
  /// dropout a copy (evaluation does not drop).
  Function forwardOnly(const Function &step);
  /// `logits_step`, for sampling: the kernels of `step` its cross
  /// entropy's logits depend on, returning them ("logits"); none where the
  /// logits are a piece of the vocabulary (tensor parallelism) or the step
  /// has no cross entropy.
  std::optional<Function> logitsOnly(const Function &step);
  /// The kernels of `step` that write what `needed` (storages) holds at
  /// its end, on temporaries of their own (a storage two functions touch
  /// would be kept between their calls), each dropout a copy; `remap`
  /// names a copied slot's own.
  Function slice(const Function &step, StringRef name,
                 llvm::DenseSet<unsigned> needed, size_t end,
                 DenseMap<unsigned, unsigned> &remap);
  /// Where the parameters of a pipeline rank's stages live (null: no
  /// pipeline; the program holds everything).
  struct Placement {
    int64_t rank = 0, ranks = 1;
    const StagedStep *step = nullptr;
    bool onRank(int64_t stage) const { return stage % ranks == rank; }
    bool owns(StringRef param) const {
      auto it = step->paramStages.find(param);
      if (it == step->paramStages.end())
        return rank == 0;
      return llvm::any_of(it->second,
                          [&](int64_t stage) { return onRank(stage); });
    }
  };
  LogicalResult lowerApplyStep(Function &f,
                               const Placement *placement = nullptr);
  /// The apply step's ops that concern `placement`'s rank.
  LogicalResult lowerApplyOps(Function &f, const Placement &placement);
  /// Under a pipeline: the storages a stage's calls pass from one to a
  /// later one (its stash: activations for its backward, tensors received
  /// or to send) get one copy per microbatch in flight, and every call its
  /// slot. The stashes sit above the persistent tensors, each function's
  /// own temporaries above them.
  LogicalResult planMemoryWithSlots(ArrayRef<Function> functions,
                                    MutableArrayRef<Call> calls);
  /// Persistent storages at fixed offsets from 0; returns their end.
  int64_t placePersistents(ArrayRef<Function> functions);
  /// Places the temporaries of `calls` (run in order, as one timeline)
  /// from `base` by their lifetimes; returns the bytes they span.
  int64_t placeTemporaries(ArrayRef<const Function *> calls, int64_t base);
  void planMemory(ArrayRef<Function> functions);
  void emitProgram(ArrayRef<Function> functions, ArrayRef<Call> calls);
  void mergeBuckets(Function &f);
  /// Buckets of all_gathers and of reduce_scatters: each all_gather sinks
  /// to the next one over its group (past kernels that neither read nor
  /// write its buffers and are not communication), and runs of them over
  /// one group, of one element type and at most bucketBytes together,
  /// become one kernel with an input and an output per tensor (the
  /// runtime moves a bucket in one collective). ZeRO's reduce-scatters of
  /// the gradients entering the apply step, and its all-gathers of the
  /// updated parameters, become a few collectives instead of one per
  /// tensor.
  void bucketCollectives(Function &f);
  /// A copy of `f` named `name` whose temporaries are its own: every
  /// storage only `f` uses of the program's `functions` (not a persistent
  /// tensor, not a value kept between calls) gets a fresh one of its size,
  /// so that the memory planner sees them live within the copy's calls.
  Function copyWithOwnTemporaries(const Function &f, std::string name,
                                  ArrayRef<const Function *> functions);
  /// Moves the apply step's in-place all-reduces of gradient accumulators
  /// into `step`, the step's only or last microbatch (or the call that ends
  /// a pipeline rank's schedule), each bucket (dist.all_reduce) right after
  /// the kernel that completes its last accumulator there. An all-reduce
  /// stays where the apply step touches its accumulator before it (but to
  /// scale it to the step's mean, which then scales the sum), or where
  /// `step` touches it after its last write. With `completeBefore` (every
  /// other call that writes an accumulator comes before `step`'s), the
  /// all-reduce of an accumulator `step` does not write goes at its end.
  /// Returns the groups of the gradients' all-reduces that moved.
  SmallVector<int64_t> reduceInBackward(Function &step, Function &apply,
                                        bool completeBefore = false);
  /// For the last call of `f`: a copy of it named `name`, with its own
  /// temporaries among `functions`, into which reduceInBackward moves
  /// `apply`'s all-reduces; none, and `apply` as it was, unless a
  /// data-parallel gradient's all-reduce moves (the copy is worth it for
  /// those only).
  std::optional<Function> reducingCopy(const Function &f, std::string name,
                                       Function &apply,
                                       ArrayRef<const Function *> functions,
                                       bool completeBefore);
  LogicalResult lowerCollective(Operation &op, Function &f);
  /// One operand of a dist.all_reduce over `group`, in the current bucket.
  void lowerAllReducePart(Function &f, Value input, Value result,
                          int64_t group);
  LogicalResult lowerCollectiveKernels(Operation &op, Function &f);
  /// The index of the communicator group over `axes`, added if new.
  int64_t groupIndex(ArrayRef<StringRef> axes) {
    std::vector<std::string> key(axes.begin(), axes.end());
    auto it = llvm::find(groups, key);
    if (it != groups.end())
      return it - groups.begin();
    groups.push_back(key);
    return groups.size() - 1;
  }

  ModuleOp module;
  /// The module's symbols, indexed once (a module-level lookup scans).
  SymbolTable symbols;
  dist::MeshOp mesh;
  /// Communicator groups, in order of first use (shared by the programs of
  /// every pipeline rank).
  std::vector<std::vector<std::string>> &groups;
  /// The microbatch step (null under a pipeline), the functions computing
  /// it (itself, or the stage functions) and the apply step.
  func::FuncOp microbatch;
  SmallVector<func::FuncOp> stepFunctions;
  func::FuncOp apply;
  /// Where errors about the step as a whole point.
  Operation *anchor() {
    return microbatch ? microbatch.getOperation()
                      : stepFunctions.front().getOperation();
  }
  /// The calls of @microbatch_step that make one step (readDataShape).
  int64_t microbatchCount = 1;
  std::vector<Storage> storages;
  std::vector<Slot> slots;
  std::vector<Persistent> persistents;
  llvm::StringMap<unsigned> persistentSlot;
  DenseMap<Value, unsigned> slotOf;
  /// Results written straight into a persistent tensor's slot.
  DenseMap<Value, unsigned> redirect;
  /// Reads of a persistent tensor that must copy its old value.
  llvm::DenseSet<Operation *> snapshots;
  /// The products that lower with their epilogue, and the group each op
  /// of theirs belongs to (an index into it).
  SmallVector<FusedEpilogue> epilogues;
  DenseMap<Operation *, unsigned> epilogueOf;
  /// Accumulators of the gradients (by parameter), the loss and the count.
  llvm::StringMap<unsigned> gradAccumulator;
  unsigned lossSum = 0, tokenCount = 0;
  /// The microbatch's count of non-ignored labels, once counted.
  std::optional<unsigned> microbatchTokens;
  /// Collectives that complete a gradient the microbatch step returns
  /// (ZeRO-2's reduce_scatter): their input is weighted by the
  /// microbatch's token count first, since ranks count their own tokens.
  llvm::DenseSet<Operation *> weightedCollectives;
  int64_t buckets = 0;
  int64_t seq = 0, vocab = 0, batch = 0, globalBatch = 0;
  /// The columns of the loss's whole logits (vocab, or more where the
  /// vocabulary is padded).
  int64_t paddedVocab = 0;
  int64_t pipelineRank = 0;
  /// The microbatch step's labels argument and its cross entropy's ignore
  /// index (readDataShape).
  BlockArgument labelsArg, prefixLengthsArg;
  std::optional<int64_t> ignoreIndex;
};

void ProgramLowering::declarePersistents(
    llvm::function_ref<bool(StringRef)> keep) {
  auto layoutOf = [](Operation *op) {
    return op->getAttrOfType<dist::LayoutAttr>(
        dist::DistDialect::kLayoutAttrName);
  };
  for (auto param : module.getOps<ParamOp>())
    if (keep(param.getSymName()))
      addPersistent(param.getSymName(), rt::Role::Parameter,
                    param.getTensorType(), param.getInit(), layoutOf(param),
                    param.getUnpaddedShape());
  // The state of a padded parameter is padded alike.
  for (auto state : module.getOps<StateOp>()) {
    if (state.getOf() && !keep(*state.getOf()))
      continue;
    ArrayRef<int64_t> unpadded;
    if (state.getOf())
      if (auto param = symbols.lookup<ParamOp>(*state.getOf()))
        unpadded = param.getUnpaddedShape();
    addPersistent(state.getSymName(), rt::Role::State, state.getType(),
                  state.getInit(), layoutOf(state), unpadded);
    // A random state of a parameter (its master copy) draws from the
    // parameter's stream, so that it starts as the parameter does.
    InitKind kind = state.getInit().getKind();
    if (state.getOf() &&
        (kind == InitKind::normal || kind == InitKind::scaled_normal))
      persistents.back().stream = state.getOf()->str();
  }
  MLIRContext *ctx = module.getContext();
  InitAttr zeros = InitAttr::get(ctx, InitKind::zeros, APFloat(0.0), 0);
  // One accumulator per gradient (a tied one's parts from several stage
  // functions add into it).
  for (func::FuncOp function : stepFunctions)
    for (auto [index, type] : llvm::enumerate(function.getResultTypes())) {
      auto param =
          function.getResultAttrOfType<FlatSymbolRefAttr>(index, "triad.grad");
      if (param && keep(param.getValue()) &&
          !gradAccumulator.count(param.getValue()))
        gradAccumulator[param.getValue()] =
            addPersistent(("grad." + param.getValue()).str(),
                          rt::Role::Accumulator, type, zeros);
    }
  lossSum =
      addPersistent("loss.sum", rt::Role::Accumulator, scalarType(), zeros);
  tokenCount =
      addPersistent("loss.tokens", rt::Role::Accumulator, scalarType(), zeros);
}

LogicalResult ProgramLowering::findInPlaceUpdates(func::FuncOp func) {
  // Program order of every op, nested layers included.
  DenseMap<Operation *, int64_t> position;
  int64_t next = 0;
  func.walk<WalkOrder::PreOrder>([&](Operation *op) { position[op] = next++; });

  // The values that are views of what one get_param read: reshapes, layer
  // arguments and layer results.
  auto viewsOf = [](Value root) {
    SmallVector<Value> values = {root};
    for (size_t i = 0; i < values.size(); ++i)
      for (OpOperand &use : values[i].getUses()) {
        Operation *user = use.getOwner();
        if (isa<ReshapeOp>(user))
          values.push_back(user->getResult(0));
        else if (auto layer = dyn_cast<LayerOp>(user))
          values.push_back(
              layer.getBody().front().getArgument(use.getOperandNumber()));
        else if (isa<YieldOp>(user))
          if (auto layer = dyn_cast<LayerOp>(user->getParentOp()))
            values.push_back(layer.getResult(use.getOperandNumber()));
      }
    return values;
  };
  llvm::StringMap<SmallVector<GetParamOp>> reads;
  llvm::StringMap<int> assignments;
  func.walk([&](Operation *op) {
    if (auto get = dyn_cast<GetParamOp>(op))
      reads[get.getName()].push_back(get);
    if (auto assign = dyn_cast<AssignOp>(op))
      ++assignments[assign.getName()];
  });
  // Every view of each persistent tensor, and where each read is last used.
  llvm::StringMap<SmallVector<Value>> views;
  DenseMap<Operation *, int64_t> lastUse;
  for (auto &entry : reads)
    for (GetParamOp get : entry.second) {
      SmallVector<Value> readViews = viewsOf(get.getResult());
      int64_t &last = lastUse[get] = -1;
      for (Value view : readViews)
        for (Operation *user : view.getUsers())
          last = std::max(last, position.lookup(user));
      llvm::append_range(views[entry.first()], readViews);
    }

  func.walk([&](AssignOp assign) {
    StringRef name = assign.getName();
    auto result = dyn_cast<OpResult>(assign.getValue());
    if (assignments[name] != 1 || !result || redirect.count(result))
      return;
    Operation *producer = result.getOwner();
    if (isa<GetParamOp, ReshapeOp, LayerOp, arith::ConstantOp>(producer))
      return;
    SmallVector<unsigned> allowed =
        inPlaceOperands(producer, result.getResultNumber());
    for (Value view : views.lookup(name))
      for (OpOperand &use : view.getUses()) {
        Operation *user = use.getOwner();
        if (user == producer
                ? !llvm::is_contained(allowed, use.getOperandNumber())
                : position.lookup(user) > position.lookup(producer))
          return;
      }
    redirect[result] = persistentSlot.lookup(name);
  });

  // An update that is not in place copies into the persistent tensor at its
  // assign: a read made before it whose value is still used after it gets a
  // copy of the old value of its own.
  func.walk([&](AssignOp assign) {
    auto result = dyn_cast<OpResult>(assign.getValue());
    if (result && redirect.count(result))
      return;
    int64_t at = position.lookup(assign);
    for (GetParamOp get : reads.lookup(assign.getName()))
      if (position.lookup(get) < at && lastUse.lookup(get) > at)
        snapshots.insert(get);
  });
  return success();
}

LogicalResult ProgramLowering::lowerBlock(Block &block, Function &f) {
  for (Operation &op : block)
    if (failed(lowerOp(op, f)))
      return failure();
  return success();
}

LogicalResult ProgramLowering::lowerOp(Operation &op, Function &f) {
  if (isa<YieldOp, func::ReturnOp>(op))
    return success();
  // An op a stage function took out of its layer keeps the layer's name.
  if (auto name = op.getAttrOfType<StringAttr>(kLayerNameAttr);
      name && name.getValue() != currentLayer) {
    std::string outer = std::exchange(currentLayer, name.getValue().str());
    op.removeAttr(kLayerNameAttr);
    LogicalResult lowered = lowerOp(op, f);
    op.setAttr(kLayerNameAttr, name);
    currentLayer = std::move(outer);
    return lowered;
  }
  if (auto get = dyn_cast<GetParamOp>(op)) {
    auto it = persistentSlot.find(get.getName());
    if (it == persistentSlot.end())
      return get.emitOpError("reads ")
             << get.getNameAttr() << ", which is no parameter or state";
    if (snapshots.contains(get)) {
      unsigned copy = temporary(get.getType());
      emit(f, OpCode::Copy, {it->second}, {copy});
      slotOf[get.getResult()] = copy;
    } else {
      slotOf[get.getResult()] = it->second;
    }
    return success();
  }
  if (auto layer = dyn_cast<LayerOp>(op)) {
    Block &body = layer.getBody().front();
    for (auto [arg, operand] :
         llvm::zip(body.getArguments(), layer.getOperands()))
      slotOf[arg] = slotOf.at(operand);
    std::string outer = std::move(currentLayer);
    currentLayer = layerName(layer);
    LogicalResult lowered = lowerBlock(body, f);
    currentLayer = std::move(outer);
    if (failed(lowered))
      return failure();
    for (auto [result, value] :
         llvm::zip(layer.getResults(), body.getTerminator()->getOperands()))
      slotOf[result] = slotOf.at(value);
    return success();
  }
  if (auto reshape = dyn_cast<ReshapeOp>(op)) {
    slotOf[reshape.getResult()] = addSlot(
        slots[slotOf.at(reshape.getX())].storage, memrefOf(reshape.getType()));
    return success();
  }
  if (auto assign = dyn_cast<AssignOp>(op)) {
    unsigned target = persistentSlot.lookup(assign.getName());
    unsigned source = slotOf.at(assign.getValue());
    if (slots[source].storage == slots[target].storage) {
      ++inPlace;
      return success();
    }
    emit(f, OpCode::Copy, {source}, {target});
    ++copies;
    return success();
  }
  if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
    auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
    if (!dense || !dense.getElementType().isF32())
      return constant.emitOpError(
          "is not an f32 tensor; only those lower to the runtime");
    unsigned slot = temporary(constant.getType());
    // A splat fills its tensor; others (ALiBi's slopes) list their values.
    if (dense.isSplat()) {
      emit(f, OpCode::Fill, {}, {slot}, {},
           {dense.getSplatValue<APFloat>().convertToDouble()});
    } else {
      SmallVector<double> values;
      for (const APFloat &value : dense.getValues<APFloat>())
        values.push_back(value.convertToDouble());
      emit(f, OpCode::Values, {}, {slot}, {}, values);
    }
    slotOf[constant.getResult()] = slot;
    return success();
  }

  if (op.getDialect() == mesh->getDialect())
    return lowerCollective(op, f);
  // A product and its epilogue's ops are one kernel, at the group's anchor.
  if (auto it = epilogueOf.find(&op); it != epilogueOf.end()) {
    const FusedEpilogue &group = epilogues[it->second];
    if (&op == group.anchor())
      lowerFusedEpilogue(group, f);
    return success();
  }

  FailureOr<KernelSpec> spec = kernelFor(&op);
  if (failed(spec))
    return failure();
  // A vocab-parallel local form (embedding, cross entropy) finds its rows
  // or columns from its index in a group.
  // A padded vocabulary's classes follow the group (-1: none, the whole
  // vocabulary).
  auto axes = op.getAttrOfType<ArrayAttr>("vocab_axes");
  auto classes = op.getAttrOfType<IntegerAttr>("classes");
  // A dropout on a piece of the batch finds its samples from its index in
  // the group of its real axes (-1: none) and the step's microbatches (1
  // unless the virtual microbatch axis splits it).
  // A piece of the sequence adds the group of its axes.
  if (auto dropout = dyn_cast<DropoutOp>(op))
    if (dropout.getBatchAxes() || dropout.getSeqAxes()) {
      SmallVector<StringRef> real = dropout.getBatchMeshAxes();
      spec->ints.push_back(real.empty() ? -1 : groupIndex(real));
      spec->ints.push_back(dropout.splitsIntoMicrobatches() ? microbatchCount
                                                            : 1);
      if (std::optional<ArrayAttr> seq = dropout.getSeqAxes())
        spec->ints.push_back(groupIndex(
            SmallVector<StringRef>(seq->getAsValueRange<StringAttr>())));
    }
  if (axes)
    spec->ints.push_back(
        groupIndex(SmallVector<StringRef>(axes.getAsValueRange<StringAttr>())));
  if (classes) {
    if (!axes)
      spec->ints.push_back(-1);
    spec->ints.push_back(classes.getInt());
  }
  Kernel kernel{spec->opcode, {}, {}, spec->ints, spec->floats};
  for (Value operand : op.getOperands())
    kernel.inputs.push_back(slotOf.at(operand));
  for (OpResult result : op.getResults()) {
    unsigned slot;
    if (auto it = redirect.find(result); it != redirect.end())
      slot = it->second;
    else
      slot = temporary(result.getType());
    slotOf[result] = slot;
    kernel.outputs.push_back(slot);
  }
  // A reduction writes its result with the reduced dimensions kept (size
  // 1), as the Sum kernel wants; the result is a view of that.
  if (isa<SumOp, MeanOp>(op)) {
    auto x = cast<RankedTensorType>(op.getOperand(0).getType());
    auto dims =
        isa<SumOp>(op) ? cast<SumOp>(op).getDims() : cast<MeanOp>(op).getDims();
    SmallVector<int64_t> kept(x.getShape());
    for (int64_t d : dims)
      kept[d] = 1;
    unsigned result = kernel.outputs[0];
    kernel.outputs[0] = addSlot(slots[result].storage,
                                MemRefType::get(kept, x.getElementType()));
  }
  kernel.layer = currentLayer;
  f.body.push_back(std::move(kernel));
  return success();
}

void ProgramLowering::findEpilogues(func::FuncOp func) {
  if (!fuseEpilogues)
    return;
  // What may overwrite bytes a value lives in: a persistent tensor's
  // update (a copy, or a result written straight into it), a kernel that
  // updates in place, a collective (an all_reduce of an accumulator), and
  // whatever is not a triad op.
  auto writesInPlace = [&](Operation *op) {
    if (isa<AssignOp>(op) ||
        (!isa<TriadDialect>(op->getDialect()) && !isa<arith::ConstantOp>(op)))
      return true;
    return llvm::any_of(op->getResults(), [&](OpResult result) {
      return redirect.count(result) ||
             !inPlaceOperands(op, result.getResultNumber()).empty();
    });
  };
  for (FusedEpilogue &group : findFusedEpilogues(func, writesInPlace)) {
    unsigned index = epilogues.size();
    epilogueOf[group.product] = index;
    for (Operation *op : group.epilogueOps())
      epilogueOf[op] = index;
    epilogues.push_back(group);
  }
}

void ProgramLowering::lowerFusedEpilogue(const FusedEpilogue &group,
                                         Function &f) {
  MatmulOp product = group.product;
  Kernel kernel{OpCode::Matmul,
                {slotOf.at(product.getLhs()), slotOf.at(product.getRhs()),
                 slotOf.at(group.thirdOperand())},
                {},
                {product.getTransposeLhs() ? 1 : 0,
                 product.getTransposeRhs() ? 1 : 0,
                 static_cast<int64_t>(group.code)},
                {}};
  auto write = [&](Value value) {
    auto it = redirect.find(value);
    unsigned slot =
        it != redirect.end() ? it->second : temporary(value.getType());
    slotOf[value] = slot;
    kernel.outputs.push_back(slot);
  };
  write(group.result());
  if (std::optional<Value> second = group.secondResult())
    write(*second);
  kernel.layer = currentLayer;
  f.body.push_back(std::move(kernel));
  ++fused;
}

/// A collective is a kernel on the group of its mesh axes. An all_reduce of
/// a gradient accumulator entering the apply step that nothing else reads
/// reduces it in place.
LogicalResult ProgramLowering::lowerCollective(Operation &op, Function &f) {
  size_t first = f.body.size();
  if (failed(lowerCollectiveKernels(op, f)))
    return failure();
  if (auto reason =
          op.getAttrOfType<StringAttr>(dist::DistDialect::kReasonAttrName))
    for (size_t k = first; k < f.body.size(); ++k)
      if (f.body[k].opcode != OpCode::ScaleBy)
        f.body[k].reason = reason.str();
  return success();
}

void ProgramLowering::lowerAllReducePart(Function &f, Value input, Value result,
                                         int64_t group) {
  unsigned source = slotOf.at(input);
  // In place only on an accumulator entering the function: any other
  // value's storage may be shared with views that are read later.
  bool accumulator = isa<BlockArgument>(input) &&
                     isa<func::FuncOp>(input.getParentBlock()->getParentOp());
  unsigned target =
      accumulator && input.hasOneUse() ? source : temporary(result.getType());
  emit(f, OpCode::AllReduce, {source}, {target}, {group});
  f.body.back().bucket = buckets;
  slotOf[result] = target;
}

LogicalResult ProgramLowering::lowerCollectiveKernels(Operation &op,
                                                      Function &f) {
  auto axesOf = [](ArrayAttr axes) {
    return SmallVector<StringRef>(axes.getAsValueRange<StringAttr>());
  };
  if (auto reduce = dyn_cast<dist::AllReduceOp>(op)) {
    int64_t group = groupIndex(axesOf(reduce.getAxes()));
    for (auto [input, result] :
         llvm::zip(reduce.getInputs(), reduce.getResults()))
      lowerAllReducePart(f, input, result, group);
    ++buckets;
    return success();
  }
  auto single = [&](OpCode opcode, unsigned source, Value result,
                    ArrayAttr axes, ArrayRef<int64_t> dims) {
    SmallVector<int64_t> ints = {groupIndex(axesOf(axes))};
    ints.append(dims.begin(), dims.end());
    unsigned target = temporary(result.getType());
    emit(f, opcode, {source}, {target}, ints);
    slotOf[result] = target;
    return success();
  };
  if (auto gather = dyn_cast<dist::AllGatherOp>(op))
    return single(OpCode::AllGather, slotOf.at(gather.getInput()),
                  gather.getResult(), gather.getAxes(),
                  {static_cast<int64_t>(gather.getDim())});
  if (auto scatter = dyn_cast<dist::ReduceScatterOp>(op)) {
    unsigned source = slotOf.at(scatter.getInput());
    if (weightedCollectives.contains(&op)) {
      unsigned weighted = temporary(scatter.getInput().getType());
      emit(f, OpCode::ScaleBy, {source, *microbatchTokens}, {weighted});
      source = weighted;
    }
    return single(OpCode::ReduceScatter, source, scatter.getResult(),
                  scatter.getAxes(), {static_cast<int64_t>(scatter.getDim())});
  }
  if (auto slice = dyn_cast<dist::AllSliceOp>(op))
    return single(OpCode::AllSlice, slotOf.at(slice.getInput()),
                  slice.getResult(), slice.getAxes(),
                  {static_cast<int64_t>(slice.getDim())});
  if (auto exchange = dyn_cast<dist::AllToAllOp>(op))
    return single(OpCode::AllToAll, slotOf.at(exchange.getInput()),
                  exchange.getResult(), exchange.getAxes(),
                  {static_cast<int64_t>(exchange.getSplitDim()),
                   static_cast<int64_t>(exchange.getConcatDim())});
  return op.emitOpError("has no runtime kernel");
}

LogicalResult ProgramLowering::readDataShape(int64_t microbatches) {
  microbatchCount = microbatches;
  // The data arguments of the step's functions: their kinds and shapes.
  dist::LayoutAttr dataLayout;
  for (func::FuncOp function : stepFunctions)
    for (BlockArgument arg : function.getArguments()) {
      auto kind = function.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                        "triad.input");
      auto type = cast<RankedTensorType>(arg.getType());
      if (kind && kind.getValue() == "prefix_lengths") {
        // Checked against the batch once the tokens have given it.
        if (type.getRank() != 1 || !type.getElementType().isInteger(32))
          return function.emitOpError("argument ")
                 << arg.getArgNumber() << " (prefix_lengths) must be i32 "
                 << "[batch], got " << type;
        prefixLengthsArg = arg;
        continue;
      }
      if (!kind || (kind.getValue() != "tokens" && kind.getValue() != "labels"))
        return function.emitOpError("argument ")
               << arg.getArgNumber()
               << " is neither tokens, labels nor prefix_lengths "
                  "(triad.input); the runtime feeds only those";
      if (type.getRank() != 2 || !type.getElementType().isInteger(32))
        return function.emitOpError("argument ")
               << arg.getArgNumber() << " must be i32 [batch, seq], got "
               << type;
      if (batch && (type.getDimSize(0) != batch || type.getDimSize(1) != seq))
        return function.emitOpError("tokens and labels differ in shape");
      batch = type.getDimSize(0);
      seq = type.getDimSize(1);
      if (!dataLayout)
        dataLayout = function.getArgAttrOfType<dist::LayoutAttr>(
            arg.getArgNumber(), dist::DistDialect::kLayoutAttrName);
      if (kind.getValue() == "labels")
        labelsArg = arg;
    }
  if (!labelsArg)
    return anchor()->emitOpError("takes no labels argument");
  if (prefixLengthsArg &&
      cast<RankedTensorType>(prefixLengthsArg.getType()).getDimSize(0) != batch)
    return anchor()->emitOpError("prefix_lengths hold ")
           << cast<RankedTensorType>(prefixLengthsArg.getType()).getDimSize(0)
           << " samples but the tokens " << batch;
  // The arguments hold one call's samples: the step's batch is that times
  // the ranks splitting it and the microbatches.
  int64_t splitting = dataLayout && dataLayout.getRank() > 0
                          ? mesh.getGroupSize(dataLayout.getSplitAxes(0))
                          : 1;
  globalBatch = batch * splitting * microbatches;

  // The loss: one cross entropy, whose ignore index the count uses.
  for (func::FuncOp function : stepFunctions) {
    WalkResult walk = function.walk([&](CrossEntropyOp loss) {
      if (ignoreIndex &&
          *ignoreIndex != static_cast<int64_t>(loss.getIgnoreIndex())) {
        loss.emitOpError("has another ignore_index than the step's other "
                         "cross entropy");
        return WalkResult::interrupt();
      }
      ignoreIndex = loss.getIgnoreIndex();
      // A vocab-parallel loss holds one piece of the vocabulary; a padded
      // one knows its classes.
      vocab =
          cast<RankedTensorType>(loss.getLogits().getType()).getShape().back();
      if (std::optional<ArrayAttr> axes = loss.getVocabAxes())
        vocab *= mesh.getGroupSize(
            SmallVector<StringRef>(axes->getAsValueRange<StringAttr>()));
      paddedVocab = vocab;
      if (std::optional<int64_t> classes = loss.getClasses())
        vocab = *classes;
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
  }
  if (!ignoreIndex)
    return anchor()->emitOpError("computes no triad.cross_entropy loss");
  return success();
}

void ProgramLowering::accumulateAfterLastWrite(Function &f, size_t bodyStart,
                                               ArrayRef<Update> updates) {
  DenseMap<unsigned, size_t> lastWriter;
  for (size_t k = bodyStart; k < f.body.size(); ++k)
    for (unsigned out : f.body[k].outputs)
      lastWriter[slots[out].storage] = k;
  // A gradient summed in f32 arrives through a cast from the 16-bit one,
  // and the function's casts come last (they feed its results). Each such
  // cast moves up to right after the kernel that completes its input, with
  // its accumulate: otherwise every 16-bit gradient of a stage stays live
  // to the end of its backward, the stage's parameters over again in
  // temporaries.
  // Where the cast only widens a 16-bit gradient for its accumulate (its
  // f32 copy read by nothing else), the accumulate reads the 16-bit
  // gradient itself, widening it as the cast would, exactly: the cast and
  // its f32 copy go (a read and a write of the gradient in f32 fewer).
  llvm::DenseSet<unsigned> readStorages;
  for (const Kernel &k : f.body)
    for (unsigned in : k.inputs)
      readStorages.insert(slots[in].storage);
  for (ArrayRef<unsigned> list :
       {ArrayRef<unsigned>(f.results), ArrayRef<unsigned>(f.args)})
    for (unsigned slot : list)
      readStorages.insert(slots[slot].storage);
  auto onlyWidens = [&](const Kernel &cast, unsigned grad) {
    Type from = slots[cast.inputs.front()].type.getElementType();
    return cast.outputs.size() == 1 && cast.outputs.front() == grad &&
           slots[grad].type.getElementType().isF32() &&
           (from.isBF16() || from.isF16()) &&
           !readStorages.contains(slots[grad].storage);
  };
  DenseMap<size_t, SmallVector<size_t>> movedCasts;
  llvm::DenseSet<size_t> moved;
  DenseMap<size_t, SmallVector<Update>> after;
  SmallVector<Update> atEnd;
  for (const Update &update : updates) {
    auto it = lastWriter.find(slots[update.grad].storage);
    if (it == lastWriter.end()) {
      atEnd.push_back(update);
      continue;
    }
    size_t k = it->second;
    const Kernel &cast = f.body[k];
    if (cast.opcode == OpCode::Cast && cast.inputs.size() == 1 &&
        !moved.contains(k)) {
      auto input = lastWriter.find(slots[cast.inputs.front()].storage);
      if (input != lastWriter.end() && input->second < k) {
        moved.insert(k);
        if (onlyWidens(cast, update.grad)) {
          after[input->second].push_back(
              {update.accumulator, cast.inputs.front(), update.weight});
          continue;
        }
        movedCasts[input->second].push_back(k);
      }
    }
    after[k].push_back(update);
  }
  std::vector<Kernel> body(f.body.begin(), f.body.begin() + bodyStart);
  auto accumulateAfter = [&](size_t k, StringRef layer) {
    for (auto [accumulator, grad, weight] : after.lookup(k))
      body.push_back({OpCode::Accumulate,
                      {accumulator, grad, weight},
                      {accumulator},
                      {},
                      {},
                      -1,
                      {},
                      layer.str()});
  };
  for (size_t k = bodyStart; k < f.body.size(); ++k) {
    if (moved.contains(k))
      continue;
    body.push_back(f.body[k]);
    std::string layer = f.body[k].layer;
    accumulateAfter(k, layer);
    for (size_t c : movedCasts.lookup(k)) {
      body.push_back(f.body[c]);
      body.back().layer = layer;
      accumulateAfter(c, layer);
    }
  }
  f.body = std::move(body);
  for (auto [accumulator, grad, weight] : atEnd)
    emit(f, OpCode::Accumulate, {accumulator, grad, weight}, {accumulator});
}

LogicalResult ProgramLowering::lowerMicrobatchStep(Function &f,
                                                   int64_t microbatches) {
  f.name = "microbatch_step";
  if (failed(readDataShape(microbatches)))
    return failure();
  // The data arguments.
  unsigned labels = 0;
  for (BlockArgument arg : microbatch.getArguments()) {
    unsigned slot = temporary(arg.getType());
    slotOf[arg] = slot;
    f.args.push_back(slot);
    f.argKinds.push_back(
        microbatch
            .getArgAttrOfType<StringAttr>(arg.getArgNumber(), "triad.input")
            .str());
    if (arg == labelsArg)
      labels = slot;
  }

  unsigned count = temporary(scalarType());
  emit(f, OpCode::CountValid, {labels}, {count}, {*ignoreIndex});
  unsigned one = fill(f, 1.0);
  microbatchTokens = count;
  auto returned = microbatch.getBody().front().getTerminator()->getOperands();
  noteWeightedCollectives();
  size_t bodyStart = f.body.size();
  if (failed(findInPlaceUpdates(microbatch)))
    return failure();
  findEpilogues(microbatch);
  if (failed(lowerBlock(microbatch.getBody().front(), f)))
    return failure();

  // Accumulate each gradient right after the kernel that completes it, the
  // loss at the end; a gradient weighted before its collective is added
  // as it is.
  std::optional<unsigned> loss;
  SmallVector<Update> updates;
  for (auto [index, value] : llvm::enumerate(returned)) {
    unsigned slot = slotOf.at(value);
    auto param =
        microbatch.getResultAttrOfType<FlatSymbolRefAttr>(index, "triad.grad");
    if (!param) {
      auto name =
          microbatch.getResultAttrOfType<StringAttr>(index, "triad.output");
      if (name && name.getValue() == "loss")
        loss = slot;
      continue;
    }
    updates.push_back(
        {gradAccumulator.lookup(param.getValue()), slot,
         weightedCollectives.contains(value.getDefiningOp()) ? one : count});
  }
  if (!loss)
    return microbatch.emitOpError("returns no result marked triad.output = "
                                  "\"loss\"");
  accumulateAfterLastWrite(f, bodyStart, updates);
  emit(f, OpCode::Accumulate, {lossSum, *loss, count}, {lossSum});
  emit(f, OpCode::Accumulate, {tokenCount, count, one}, {tokenCount});
  return success();
}

Function ProgramLowering::slice(const Function &step, StringRef name,
                                llvm::DenseSet<unsigned> needed, size_t end,
                                DenseMap<unsigned, unsigned> &remap) {
  // The kernels before `end` that write a storage a later needed kernel
  // reads; storages, not slots, since a reshape is another slot of the same
  // storage.
  std::vector<bool> keep(end, false);
  // A fused product's pre-activation that no kept kernel reads (the
  // backward's activation_grad did) is left out: the copy of the kernel
  // writes the activation alone and needs one buffer less.
  std::vector<bool> dropsPreActivation(end, false);
  for (size_t i = end; i-- > 0;) {
    const Kernel &kernel = step.body[i];
    bool writesNeeded = llvm::any_of(kernel.outputs, [&](unsigned slot) {
      return needed.contains(slots[slot].storage);
    });
    if (!writesNeeded)
      continue;
    keep[i] = true;
    if (kernel.opcode == OpCode::Matmul && kernel.outputs.size() == 2) {
      unsigned storage = slots[kernel.outputs[1]].storage;
      dropsPreActivation[i] =
          !needed.contains(storage) && !storages[storage].persistent;
    }
    for (unsigned slot : kernel.inputs)
      needed.insert(slots[slot].storage);
  }
  DenseMap<unsigned, unsigned> storageCopy;
  auto own = [&](unsigned slot) -> unsigned {
    unsigned storage = slots[slot].storage;
    if (storages[storage].persistent)
      return slot;
    auto [it, inserted] = remap.try_emplace(slot, 0);
    if (inserted) {
      auto [copy, fresh] = storageCopy.try_emplace(storage, 0);
      if (fresh)
        copy->second = addStorage(slots[slot].type, false);
      it->second = addSlot(copy->second, slots[slot].type);
    }
    return it->second;
  };
  Function sliced;
  sliced.name = name.str();
  for (unsigned arg : step.args)
    sliced.args.push_back(own(arg));
  sliced.argKinds = step.argKinds;
  for (size_t i = 0; i < end; ++i) {
    if (!keep[i])
      continue;
    Kernel copy = step.body[i];
    if (dropsPreActivation[i])
      copy.outputs.pop_back();
    if (copy.opcode == OpCode::Dropout) {
      copy.opcode = OpCode::Copy;
      copy.ints.clear();
      copy.floats.clear();
    }
    for (unsigned &slot : copy.inputs)
      slot = own(slot);
    for (unsigned &slot : copy.outputs)
      slot = own(slot);
    sliced.body.push_back(std::move(copy));
  }
  return sliced;
}

Function ProgramLowering::forwardOnly(const Function &step) {
  DenseMap<unsigned, unsigned> remap;
  return slice(step, "eval_step",
               {slots[lossSum].storage, slots[tokenCount].storage},
               step.body.size(), remap);
}

std::optional<Function> ProgramLowering::logitsOnly(const Function &step) {
  // The first cross entropy over the whole vocabulary (ints: the ignore
  // index alone, or with group -1 and the classes of a padded vocabulary,
  // whose padding columns the sampler leaves out; a vocabulary piece has
  // its group).
  auto entropy = llvm::find_if(step.body, [](const Kernel &kernel) {
    return kernel.opcode == OpCode::CrossEntropy &&
           (kernel.ints.size() == 1 || kernel.ints[1] == -1);
  });
  if (entropy == step.body.end())
    return std::nullopt;
  unsigned logits = entropy->inputs[0];
  DenseMap<unsigned, unsigned> remap;
  Function sliced =
      slice(step, "logits_step", {slots[logits].storage},
            static_cast<size_t>(entropy - step.body.begin()), remap);
  sliced.results.push_back(remap.lookup(logits));
  sliced.resultNames.push_back("logits");
  return sliced;
}

LogicalResult ProgramLowering::lowerApplyStep(Function &f,
                                              const Placement *placement) {
  f.name = "apply_step";
  // The loss and token count are partial where the batch is split: reduced
  // first, so that every rank divides by the step's whole count (the
  // gradients, reduced in the body, are linear in the division).
  for (func::FuncOp function : stepFunctions)
    for (unsigned index = 0; index < function.getNumResults(); ++index) {
      auto name =
          function.getResultAttrOfType<StringAttr>(index, "triad.output");
      auto layout = function.getResultAttrOfType<dist::LayoutAttr>(
          index, dist::DistDialect::kLayoutAttrName);
      if (!name || name.getValue() != "loss" || !layout ||
          mesh.getGroupSize(layout.getPartialAxes()) <= 1)
        continue;
      int64_t group = groupIndex(layout.getPartialAxes());
      std::string reason =
          "the step's loss sum and token count, partial over " +
          llvm::join(layout.getPartialAxes(), ",");
      emit(f, OpCode::AllReduce, {lossSum}, {lossSum}, {group});
      f.body.back().bucket = buckets;
      f.body.back().reason = reason;
      emit(f, OpCode::AllReduce, {tokenCount}, {tokenCount}, {group});
      f.body.back().bucket = buckets++;
      f.body.back().reason = reason;
    }
  if (placement) {
    // The loss is summed on the last stage only; every pipeline rank
    // counted the same tokens.
    emit(f, OpCode::AllReduce, {lossSum}, {lossSum}, {groupIndex({"pp"})});
    f.body.back().bucket = buckets++;
    f.body.back().reason = "the step's loss sum, computed on the last "
                           "pipeline stage";
    // A tied parameter's gradient: the parts of its stages on other ranks
    // are sent and added (every holder then applies the same update).
    unsigned one = 0;
    for (auto [index, entry] : llvm::enumerate(placement->step->tied)) {
      auto &[param, stages] = entry;
      if (!placement->owns(param))
        continue;
      std::set<int64_t> peers;
      for (int64_t stage : stages)
        if (!placement->onRank(stage))
          peers.insert(stage % placement->ranks);
      if (peers.empty())
        continue;
      unsigned accumulator = gradAccumulator.lookup(param);
      int64_t tag = kTiedTagBase + index;
      for (int64_t peer : peers) {
        emit(f, OpCode::Send, {accumulator}, {}, {peer, tag});
        f.body.back().reason = "the gradient part of tied " + param;
      }
      if (!one)
        one = fill(f, 1.0);
      for (int64_t peer : peers) {
        unsigned part = temporary(slots[accumulator].type);
        emit(f, OpCode::Recv, {}, {part}, {peer, tag});
        f.body.back().reason = "the gradient part of tied " + param;
        emit(f, OpCode::Accumulate, {accumulator, part, one}, {accumulator});
      }
    }
  }
  // The step's mean: every accumulator over the step's token count, or,
  // where the apply step takes the step's 1 / tokens (fold-token-mean), the
  // accumulators as they are with that factor.
  unsigned inverse = temporary(scalarType());
  emit(f, OpCode::Reciprocal, {tokenCount}, {inverse});
  meanInverse = inverse;
  bool foldsMean = llvm::any_of(apply.getArguments(), [&](BlockArgument arg) {
    return apply.getArgAttr(arg.getArgNumber(), kMeanScaleAttrName);
  });
  llvm::DenseSet<unsigned> normalized;
  for (BlockArgument arg : apply.getArguments()) {
    if (apply.getArgAttr(arg.getArgNumber(), kMeanScaleAttrName)) {
      if (arg.getType() !=
          RankedTensorType::get({}, Float32Type::get(apply.getContext())))
        return apply.emitOpError("argument ")
               << arg.getArgNumber()
               << " (the step's 1 / tokens) must be an f32 scalar";
      slotOf[arg] = inverse;
      continue;
    }
    auto param = apply.getArgAttrOfType<FlatSymbolRefAttr>(arg.getArgNumber(),
                                                           "triad.grad");
    if (placement && param && !placement->owns(param.getValue()))
      continue;
    auto it =
        param ? gradAccumulator.find(param.getValue()) : gradAccumulator.end();
    if (it == gradAccumulator.end())
      return apply.emitOpError("argument ")
             << arg.getArgNumber()
             << " is not the gradient of a parameter microbatch_step returns";
    if (slots[it->second].type != memrefOf(arg.getType()))
      return apply.emitOpError("argument ")
             << arg.getArgNumber() << " has type " << arg.getType()
             << " but the gradient of " << param << " has another";
    if (!normalized.insert(it->second).second)
      return apply.emitOpError("argument ")
             << arg.getArgNumber() << " repeats the gradient of " << param;
    if (!foldsMean)
      emit(f, OpCode::ScaleBy, {it->second, inverse}, {it->second});
    slotOf[arg] = it->second;
  }
  unsigned loss = temporary(scalarType());
  emit(f, OpCode::ScaleBy, {lossSum, inverse}, {loss});
  if (failed(findInPlaceUpdates(apply)))
    return failure();
  findEpilogues(apply);
  if (failed(placement ? lowerApplyOps(f, *placement)
                       : lowerBlock(apply.getBody().front(), f)))
    return failure();
  f.results.push_back(loss);
  f.resultNames.push_back("loss");
  f.results.push_back(tokenCount);
  f.resultNames.push_back("tokens");
  auto returned = apply.getBody().front().getTerminator()->getOperands();
  for (auto [index, value] : llvm::enumerate(returned)) {
    auto name = apply.getResultAttrOfType<StringAttr>(index, "triad.output");
    if (!name || llvm::is_contained(f.resultNames, name.getValue()))
      return apply.emitOpError("result ")
             << index << " needs a distinct triad.output name";
    f.results.push_back(slotOf.at(value));
    f.resultNames.push_back(name.getValue().str());
  }
  return success();
}

void ProgramLowering::bucketCollectives(Function &f) {
  auto single = [](const Kernel &k, OpCode opcode) {
    return k.opcode == opcode && k.inputs.size() == 1 && k.outputs.size() == 1;
  };
  auto typeOf = [&](const Kernel &k) {
    return slots[k.inputs[0]].type.getElementType();
  };
  // The tensor a bucket counts: what is gathered, or what is scattered.
  auto bytesOf = [&](const Kernel &k) {
    MemRefType type =
        slots[k.opcode == OpCode::AllGather ? k.outputs[0] : k.inputs[0]].type;
    return type.getNumElements() * rt::elementBytes(type.getElementType());
  };
  auto sameBucket = [&](const Kernel &a, const Kernel &b) {
    return single(b, a.opcode) && b.ints[0] == a.ints[0] &&
           typeOf(b) == typeOf(a);
  };
  auto touches = [&](ArrayRef<unsigned> a, ArrayRef<unsigned> b) {
    return sharesStorage(a, b);
  };
  auto communicates = [](OpCode opcode) {
    return opcode == OpCode::AllReduce || opcode == OpCode::AllGather ||
           opcode == OpCode::ReduceScatter || opcode == OpCode::AllToAll ||
           opcode == OpCode::Send || opcode == OpCode::Recv;
  };
  std::vector<Kernel> &body = f.body;
  // An all_gather whose result is only copied into a persistent tensor
  // (ZeRO's updated parameter assigned back) gathers into it directly: the
  // copy and the temporary go, and nothing reads the result before the
  // buckets form.
  auto usedElsewhere = [&](unsigned slot, size_t except) {
    for (size_t k = 0; k < body.size(); ++k)
      if (k != except && k + 1 != except &&
          (touches(body[k].inputs, slot) || touches(body[k].outputs, slot)))
        return true;
    return touches(f.results, slot) || touches(f.args, slot);
  };
  for (size_t i = 1; i < body.size(); ++i) {
    Kernel &copy = body[i], &gather = body[i - 1];
    if (copy.opcode != OpCode::Copy || copy.inputs.size() != 1 ||
        !single(gather, OpCode::AllGather) ||
        gather.outputs[0] != copy.inputs[0])
      continue;
    unsigned result = gather.outputs[0], target = copy.outputs[0];
    const Storage &into = storages[slots[target].storage];
    if (!into.persistent || slots[target].type != slots[result].type ||
        storages[slots[result].storage].persistent ||
        touches(gather.inputs, target) || usedElsewhere(result, i))
      continue;
    gather.outputs[0] = target;
    body.erase(body.begin() + i);
    --i;
  }
  // Whether `moved`, sinking past `k`, would change what either computes:
  // `k` reads or writes what `moved` writes, or writes what it reads.
  auto blocks = [&](const Kernel &moved, const Kernel &k) {
    return touches(k.inputs, moved.outputs) ||
           touches(k.outputs, moved.outputs) ||
           touches(k.outputs, moved.inputs);
  };
  // ZeRO-2's reduce-scatters in the backward, each followed by the
  // accumulate that adds its piece: the reduce-scatter sinks to the run of
  // reduce-scatters after it (past no communication), its accumulate to
  // just after that run, while the run stays within a bucket. From the
  // end, as below.
  for (size_t i = body.size(); i-- > 0;) {
    if (!single(body[i], OpCode::ReduceScatter) || i + 1 >= body.size() ||
        body[i + 1].opcode != OpCode::Accumulate ||
        !touches(body[i + 1].inputs, body[i].outputs))
      continue;
    const Kernel &scatter = body[i], &accumulate = body[i + 1];
    size_t next = i + 2;
    bool blocked = false;
    for (; next < body.size() && !sameBucket(scatter, body[next]); ++next)
      if (communicates(body[next].opcode) || blocks(scatter, body[next]) ||
          blocks(accumulate, body[next])) {
        blocked = true;
        break;
      }
    if (blocked || next == body.size())
      continue;
    size_t end = next;
    int64_t bytes = bytesOf(scatter);
    for (; end < body.size() && sameBucket(scatter, body[end]); ++end) {
      bytes += bytesOf(body[end]);
      blocked |= blocks(accumulate, body[end]);
    }
    if (blocked || bytes > bucketBytes)
      continue;
    Kernel movedScatter = std::move(body[i]),
           movedAccumulate = std::move(body[i + 1]);
    body.erase(body.begin() + i, body.begin() + i + 2);
    body.insert(body.begin() + (end - 2), std::move(movedAccumulate));
    body.insert(body.begin() + (next - 2), std::move(movedScatter));
  }
  // From the end, so that each all_gather joins the cluster already built
  // after it while that stays within a bucket.
  for (size_t i = body.size(); i-- > 0;) {
    const Kernel &gather = body[i];
    if (!single(gather, OpCode::AllGather))
      continue;
    size_t next = i + 1;
    for (; next < body.size() && !sameBucket(gather, body[next]); ++next)
      if (communicates(body[next].opcode) || blocks(gather, body[next]))
        break;
    if (next == body.size() || next == i + 1 || !sameBucket(gather, body[next]))
      continue;
    int64_t bytes = bytesOf(gather);
    for (size_t r = next; r < body.size() && sameBucket(gather, body[r]); ++r)
      bytes += bytesOf(body[r]);
    if (bytes > bucketBytes)
      continue;
    std::rotate(body.begin() + i, body.begin() + i + 1, body.begin() + next);
  }
  std::vector<Kernel> merged;
  for (size_t i = 0; i < body.size();) {
    Kernel first = body[i];
    if (!single(first, OpCode::AllGather) &&
        !single(first, OpCode::ReduceScatter)) {
      merged.push_back(std::move(body[i++]));
      continue;
    }
    SmallVector<unsigned> inputs = first.inputs, outputs = first.outputs;
    SmallVector<int64_t> ints = first.ints;
    int64_t bytes = bytesOf(first);
    size_t end = i + 1;
    // A bucket's tensors are independent: none reads what another writes.
    for (; end < body.size() && sameBucket(first, body[end]) &&
           bytes + bytesOf(body[end]) <= bucketBytes &&
           !touches(body[end].inputs, outputs) &&
           !touches(body[end].outputs, inputs) &&
           !touches(body[end].outputs, outputs);
         ++end) {
      bytes += bytesOf(body[end]);
      inputs.push_back(body[end].inputs[0]);
      outputs.push_back(body[end].outputs[0]);
      ints.push_back(body[end].ints[1]);
    }
    if (end > i + 1) {
      first.inputs = std::move(inputs);
      first.outputs = std::move(outputs);
      first.ints = std::move(ints);
      first.reason = (Twine(end - i) +
                      " tensors in one bucket, the first: " + first.reason)
                         .str();
    }
    merged.push_back(std::move(first));
    i = end;
  }
  body = std::move(merged);
}

std::optional<Function> ProgramLowering::reducingCopy(
    const Function &f, std::string name, Function &apply,
    ArrayRef<const Function *> functions, bool completeBefore) {
  Function copy = copyWithOwnTemporaries(f, std::move(name), functions);
  Function reduced = apply;
  SmallVector<int64_t> moved = reduceInBackward(copy, reduced, completeBefore);
  if (llvm::none_of(moved, [&](int64_t group) {
        return llvm::is_contained(groups[group], "dp");
      }))
    return std::nullopt;
  apply = std::move(reduced);
  return copy;
}

Function
ProgramLowering::copyWithOwnTemporaries(const Function &f, std::string name,
                                        ArrayRef<const Function *> functions) {
  llvm::DenseSet<unsigned> shared;
  auto note = [&](ArrayRef<unsigned> list) {
    for (unsigned slot : list)
      shared.insert(slots[slot].storage);
  };
  for (const Function *other : functions) {
    if (other == &f)
      continue;
    note(other->args);
    note(other->results);
    for (const Kernel &k : other->body) {
      note(k.inputs);
      note(k.outputs);
    }
  }
  DenseMap<unsigned, unsigned> storageCopy, slotCopy;
  auto own = [&](unsigned slot) -> unsigned {
    unsigned storage = slots[slot].storage;
    if (storages[storage].persistent || shared.contains(storage))
      return slot;
    auto [it, inserted] = slotCopy.try_emplace(slot, 0);
    if (inserted) {
      auto [copy, fresh] = storageCopy.try_emplace(storage, 0);
      if (fresh) {
        storages.push_back({storages[storage].bytes, /*persistent=*/false});
        copy->second = storages.size() - 1;
      }
      it->second = addSlot(copy->second, slots[slot].type);
    }
    return it->second;
  };
  Function copy = f;
  copy.name = std::move(name);
  for (unsigned &slot : copy.args)
    slot = own(slot);
  for (unsigned &slot : copy.results)
    slot = own(slot);
  for (Kernel &k : copy.body) {
    for (unsigned &slot : k.inputs)
      slot = own(slot);
    for (unsigned &slot : k.outputs)
      slot = own(slot);
  }
  return copy;
}

SmallVector<int64_t> ProgramLowering::reduceInBackward(Function &step,
                                                       Function &apply,
                                                       bool completeBefore) {
  auto touchedBy = [&](const Kernel &k, unsigned slot) {
    return sharesStorage(k.inputs, slot) || sharesStorage(k.outputs, slot);
  };
  auto accumulator = [&](unsigned slot) {
    return llvm::any_of(persistents, [&](const Persistent &p) {
      return p.role == rt::Role::Accumulator && sharesStorage(p.slot, slot);
    });
  };
  // The all-reduces that move, with the step's kernel that completes each.
  std::vector<std::pair<size_t, Kernel>> moved;
  std::vector<Kernel> kept;
  for (size_t i = 0; i < apply.body.size(); ++i) {
    const Kernel &k = apply.body[i];
    std::optional<size_t> lastWrite;
    bool moves = k.opcode == OpCode::AllReduce && k.bucket >= 0 &&
                 k.inputs.size() == 1 && k.inputs[0] == k.outputs[0] &&
                 accumulator(k.inputs[0]);
    // Before it, the apply step may only scale the accumulator to the
    // step's mean (a factor every rank shares: the sum over ranks may come
    // first).
    for (size_t j = 0; moves && j < i; ++j) {
      const Kernel &before = apply.body[j];
      bool toMean =
          before.opcode == OpCode::ScaleBy && meanInverse &&
          before.inputs.size() == 2 && before.inputs[0] == k.inputs[0] &&
          before.inputs[1] == *meanInverse && before.outputs.size() == 1 &&
          before.outputs[0] == k.inputs[0];
      moves = toMean || !touchedBy(before, k.inputs[0]);
    }
    for (size_t j = 0; moves && j < step.body.size(); ++j)
      if (sharesStorage(step.body[j].outputs, k.inputs[0]))
        lastWrite = j;
    if (moves && !lastWrite && completeBefore && !step.body.empty())
      lastWrite = step.body.size() - 1;
    moves = moves && lastWrite && !sharesStorage(step.results, k.inputs[0]) &&
            !sharesStorage(step.args, k.inputs[0]);
    for (size_t j = lastWrite.value_or(0) + 1; moves && j < step.body.size();
         ++j)
      moves = !touchedBy(step.body[j], k.inputs[0]);
    if (moves)
      moved.emplace_back(*lastWrite, k);
    else
      kept.push_back(k);
  }
  if (moved.empty())
    return {};
  // A bucket split between the two (an accumulator the apply step touches
  // first) says how many of its tensors each part reduces.
  llvm::DenseMap<int64_t, std::pair<size_t, size_t>> parts;
  for (const auto &[after, k] : moved)
    ++parts[k.bucket].first;
  for (const Kernel &k : kept)
    if (k.opcode == OpCode::AllReduce && k.bucket >= 0)
      ++parts[k.bucket].second;
  auto recount = [&](Kernel &k, bool movedPart) {
    auto [movedCount, keptCount] = parts.lookup(k.bucket);
    if (movedCount == 0 || keptCount == 0)
      return;
    // "<n> tensors in one bucket" becomes "<part> of its <n> tensors ...".
    size_t at = k.reason.find(" tensors in one bucket");
    if (at == std::string::npos)
      return;
    size_t number = k.reason.find_last_not_of("0123456789", at - 1) + 1;
    k.reason.insert(number, std::to_string(movedPart ? movedCount : keptCount) +
                                " of its ");
  };
  for (Kernel &k : kept)
    if (k.opcode == OpCode::AllReduce && k.bucket >= 0)
      recount(k, false);
  apply.body = std::move(kept);
  // The groups of the gradients' all-reduces that moved (not the loss sum
  // and token count's).
  SmallVector<int64_t> groupsMoved;
  for (const auto &[after, k] : moved)
    if (!sharesStorage(k.inputs, {lossSum, tokenCount}) &&
        !llvm::is_contained(groupsMoved, k.ints[0]))
      groupsMoved.push_back(k.ints[0]);
  // A bucket reduces once its last accumulator is complete.
  llvm::DenseMap<int64_t, size_t> ready;
  for (const auto &[after, k] : moved)
    ready[k.bucket] = std::max(ready.lookup(k.bucket), after);
  std::vector<Kernel> body;
  for (size_t j = 0; j < step.body.size(); ++j) {
    body.push_back(std::move(step.body[j]));
    for (auto &[after, k] : moved) {
      if (ready.lookup(k.bucket) != j)
        continue;
      k.layer = body.back().layer;
      StringRef entering = "gradients entering @apply_step";
      if (StringRef(k.reason).starts_with(entering))
        k.reason =
            "gradients of @" + step.name + k.reason.substr(entering.size());
      recount(k, true);
      k.reason += ", reduced as soon as its bucket is complete "
                  "(overlap-grad-reduce)";
      body.push_back(std::move(k));
    }
  }
  step.body = std::move(body);
  return groupsMoved;
}

/// One all_reduce kernel per bucket where the bucket's tensors are whole
/// persistent storages lying one after the other (the gradient
/// accumulators, laid out in order): it reduces the bytes from the first
/// to the last, alignment gaps included.
void ProgramLowering::mergeBuckets(Function &f) {
  auto wholePersistent = [&](const Kernel &k) {
    if (k.opcode != OpCode::AllReduce || k.bucket < 0 ||
        k.inputs[0] != k.outputs[0])
      return false;
    const Slot &slot = slots[k.inputs[0]];
    const Storage &storage = storages[slot.storage];
    return storage.persistent && slot.type.getElementType().isF32() &&
           slot.type.getNumElements() * 4 == storage.bytes;
  };
  std::vector<Kernel> body;
  for (size_t k = 0; k < f.body.size();) {
    size_t end = k + 1;
    int64_t lastEnd = 0;
    if (wholePersistent(f.body[k])) {
      const Storage *last = &storages[slots[f.body[k].inputs[0]].storage];
      while (end < f.body.size() && wholePersistent(f.body[end]) &&
             f.body[end].bucket == f.body[k].bucket) {
        const Storage &next = storages[slots[f.body[end].inputs[0]].storage];
        if (next.offset !=
            last->offset +
                (int64_t)llvm::alignTo(last->bytes, rt::kBufferAlignment))
          break;
        last = &next;
        ++end;
      }
      lastEnd = last->offset + last->bytes;
    }
    if (end == k + 1) {
      body.push_back(f.body[k++]);
      continue;
    }
    int64_t first = storages[slots[f.body[k].inputs[0]].storage].offset;
    int64_t bytes = lastEnd - first;
    storages.push_back({bytes, /*persistent=*/true, first});
    MemRefType type =
        MemRefType::get({bytes / 4}, Float32Type::get(module.getContext()));
    unsigned view = addSlot(storages.size() - 1, type);
    body.push_back({OpCode::AllReduce,
                    {view},
                    {view},
                    f.body[k].ints,
                    {},
                    f.body[k].bucket,
                    f.body[k].reason,
                    f.body[k].layer});
    k = end;
  }
  f.body = std::move(body);
}

int64_t ProgramLowering::placePersistents(ArrayRef<Function> functions) {
  // The tensors the functions' bucketed all-reduces sum in place first, in
  // the order those kernels run, so that a run of one bucket's all-reduces
  // covers adjacent bytes and mergeBuckets makes it one collective; then
  // every other persistent tensor, in the order it was declared.
  std::vector<unsigned> order;
  llvm::DenseSet<unsigned> placed;
  for (const Function &f : functions)
    for (const Kernel &k : f.body)
      if (k.opcode == OpCode::AllReduce && k.bucket >= 0 &&
          k.inputs.size() == 1 && k.inputs[0] == k.outputs[0]) {
        unsigned storage = slots[k.inputs[0]].storage;
        if (storages[storage].persistent && placed.insert(storage).second)
          order.push_back(storage);
      }
  for (unsigned storage = 0; storage < storages.size(); ++storage)
    if (storages[storage].persistent && !placed.contains(storage))
      order.push_back(storage);
  int64_t top = 0;
  for (unsigned storage : order) {
    storages[storage].offset = top;
    top += llvm::alignTo(storages[storage].bytes, rt::kBufferAlignment);
  }
  return top;
}

int64_t ProgramLowering::placeTemporaries(ArrayRef<const Function *> calls,
                                          int64_t base) {
  // Lifetimes in instruction time over the calls in order: a call's
  // arguments when it starts, its kernels one after the other, its results
  // after the last.
  DenseMap<unsigned, unsigned> index;
  std::vector<unsigned> order;
  std::vector<BufferLifetime> lifetimes;
  auto touch = [&](unsigned slot, int64_t time) {
    unsigned storage = slots[slot].storage;
    if (storages[storage].persistent || storages[storage].slots > 0)
      return;
    auto [it, inserted] = index.try_emplace(storage, lifetimes.size());
    if (inserted) {
      order.push_back(storage);
      lifetimes.push_back({storages[storage].bytes, time, time});
    }
    BufferLifetime &life = lifetimes[it->second];
    life.first = std::min(life.first, time);
    life.last = std::max(life.last, time);
  };
  int64_t time = 0;
  for (const Function *f : calls) {
    for (unsigned arg : f->args)
      touch(arg, time);
    for (const Kernel &kernel : f->body) {
      ++time;
      for (unsigned slot : kernel.inputs)
        touch(slot, time);
      for (unsigned slot : kernel.outputs)
        touch(slot, time);
    }
    ++time;
    for (unsigned result : f->results)
      touch(result, time);
    ++time;
  }
  MemoryPlan plan = triad::planMemory(lifetimes, rt::kBufferAlignment);
  for (auto [i, storage] : llvm::enumerate(order))
    storages[storage].offset = base + plan.offsets[i];
  return plan.arenaBytes;
}

void ProgramLowering::planMemory(ArrayRef<Function> functions) {
  // Each function's temporaries live within its call: they share the
  // bytes above the persistent tensors.
  int64_t top = placePersistents(functions), temporaries = 0;
  for (const Function &f : functions)
    temporaries = std::max(temporaries, placeTemporaries({&f}, top));
  arenaBytes = top + temporaries;
}

LogicalResult
ProgramLowering::planMemoryWithSlots(ArrayRef<Function> functions,
                                     MutableArrayRef<Call> calls) {
  // The temporary storages each function touches; a stage's stash is what
  // more than one of its functions touches.
  std::vector<SmallVector<unsigned>> touched(functions.size());
  for (auto [index, f] : llvm::enumerate(functions)) {
    llvm::SmallSetVector<unsigned, 16> seen;
    auto visit = [&](ArrayRef<unsigned> list) {
      for (unsigned slot : list)
        if (!storages[slots[slot].storage].persistent)
          seen.insert(slots[slot].storage);
    };
    visit(f.args);
    visit(f.results);
    for (const Kernel &kernel : f.body) {
      visit(kernel.inputs);
      visit(kernel.outputs);
    }
    touched[index].assign(seen.begin(), seen.end());
  }
  DenseMap<unsigned, unsigned> firstFunction;
  std::map<int64_t, SmallVector<unsigned>> stash;
  for (auto [index, storageList] : llvm::enumerate(touched))
    for (unsigned storage : storageList) {
      auto [it, inserted] = firstFunction.try_emplace(storage, index);
      if (inserted || storages[storage].slots > 0)
        continue;
      int64_t stage = functions[it->second].stage;
      if (stage < 0 || stage != functions[index].stage)
        return anchor()->emitOpError("lowers to functions @")
               << functions[it->second].name << " and @"
               << functions[index].name
               << " that share a temporary across pipeline stages";
      storages[storage].slots = 1;
      stash[stage].push_back(storage);
    }

  // A microbatch holds a slot of its stage from its stage's first call to
  // its last: the lowest free one, so a stage needs as many slots as it
  // keeps microbatches in flight.
  std::map<std::pair<int64_t, int64_t>, size_t> lastCall;
  for (auto [index, call] : llvm::enumerate(calls))
    if (functions[call.function].stage >= 0)
      lastCall[{functions[call.function].stage, call.microbatch}] = index;
  std::map<int64_t, std::vector<bool>> busy;
  std::map<std::pair<int64_t, int64_t>, int64_t> held;
  for (auto [index, call] : llvm::enumerate(calls)) {
    int64_t stage = functions[call.function].stage;
    if (stage < 0)
      continue;
    auto [it, inserted] = held.try_emplace({stage, call.microbatch}, 0);
    std::vector<bool> &used = busy[stage];
    if (inserted) {
      it->second = llvm::find(used, false) - used.begin();
      if (it->second == static_cast<int64_t>(used.size()))
        used.push_back(false);
      used[it->second] = true;
    }
    call.slot = it->second;
    if (lastCall.at({stage, call.microbatch}) == index)
      used[call.slot] = false;
  }

  // Each kept storage needs as many copies as microbatches live in it at
  // once (a received activation lands while the previous microbatch still
  // waits for its backward; what that backward reads does not): a call
  // works on copy slot mod copies, checked against every pair of
  // microbatches live together, and a storage takes more copies where the
  // slots collide (at most its stage's slots, which never do). Per storage
  // and microbatch: the first and last call that touch it, and the
  // microbatch's slot.
  struct Live {
    size_t first, last;
    int64_t slot;
  };
  DenseMap<unsigned, std::map<int64_t, Live>> lives;
  for (auto [index, call] : llvm::enumerate(calls))
    for (unsigned storage : touched[call.function]) {
      if (storages[storage].slots == 0)
        continue;
      auto [it, inserted] =
          lives[storage].try_emplace(call.microbatch, Live{index, index, 0});
      it->second.last = index;
      it->second.slot = call.slot;
    }
  int64_t top = placePersistents(functions);
  for (auto &[stage, storageList] : stash) {
    int64_t stageSlots = std::max<int64_t>(busy[stage].size(), 1);
    if (stageSlots > rt::kMaxBufferSlots)
      return anchor()->emitOpError("pipeline stage ")
             << stage << " keeps " << stageSlots
             << " microbatches in flight; the runtime holds at most "
             << rt::kMaxBufferSlots;
    for (unsigned storage : storageList) {
      SmallVector<Live> live;
      for (auto &[microbatchIndex, entry] : lives[storage])
        live.push_back(entry);
      llvm::sort(
          live, [](const Live &a, const Live &b) { return a.first < b.first; });
      // Sweeps the lives in order of their first call, `visit(a, active)`
      // seeing those still live when `a` starts.
      auto sweep = [&](auto visit) {
        SmallVector<const Live *> active;
        for (const Live &a : live) {
          llvm::erase_if(active,
                         [&](const Live *b) { return b->last < a.first; });
          if (visit(a, active))
            return true;
          active.push_back(&a);
        }
        return false;
      };
      int64_t copies = 1;
      sweep([&](const Live &, ArrayRef<const Live *> active) {
        copies = std::max<int64_t>(copies, active.size() + 1);
        return false;
      });
      auto collide = [&](int64_t n) {
        return sweep([&](const Live &a, ArrayRef<const Live *> active) {
          return llvm::any_of(
              active, [&](const Live *b) { return a.slot % n == b->slot % n; });
        });
      };
      while (copies < stageSlots && collide(copies))
        ++copies;
      int64_t stride =
          llvm::alignTo(storages[storage].bytes, rt::kBufferAlignment);
      storages[storage].offset = top;
      storages[storage].slots = copies;
      storages[storage].stride = stride;
      top += stride * copies;
    }
  }
  int64_t temporaries = 0;
  for (const Function &f : functions)
    temporaries = std::max(temporaries, placeTemporaries({&f}, top));
  arenaBytes = top + temporaries;
  return success();
}

void ProgramLowering::emitPlan(int64_t microbatches) {
  OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
  SmallVector<Attribute> groupList;
  for (const std::vector<std::string> &group : groups) {
    SmallVector<StringRef> names(group.begin(), group.end());
    groupList.push_back(b.getStrArrayAttr(names));
  }
  auto plan = rt::PlanOp::create(b, module.getLoc(), mesh.getAxes(),
                                 mesh.getSizesAttr(), seq, vocab, globalBatch,
                                 microbatches, /*padded_vocab=*/nullptr,
                                 b.getArrayAttr(groupList),
                                 /*schedule=*/nullptr,
                                 /*virtual_stages=*/nullptr);
  // Only a vocabulary padded beyond a multiple of tp says so: the runtime
  // allows that much by default.
  if (paddedVocab > static_cast<int64_t>(llvm::alignTo(
                        vocab, mesh.getAxisSize("tp").value_or(1))))
    plan.setPaddedVocabAttr(b.getI64IntegerAttr(paddedVocab));
  if (scheduleInfo) {
    plan.setScheduleAttr(b.getStringAttr(scheduleInfo->first));
    plan.setVirtualStagesAttr(b.getI64IntegerAttr(scheduleInfo->second));
  }
}

void ProgramLowering::emitProgram(ArrayRef<Function> functions,
                                  ArrayRef<Call> calls) {
  MLIRContext *ctx = module.getContext();
  Location loc = module.getLoc();
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  auto program = rt::ProgramOp::create(
      b, loc, "rank" + std::to_string(pipelineRank), pipelineRank, arenaBytes);
  Block *body = b.createBlock(&program.getBody());
  b.setInsertionPointToEnd(body);

  // A buffer per slot used, in first-use order, before the functions that
  // use them.
  DenseMap<unsigned, Value> buffers;
  auto declare = [&](unsigned slot) {
    auto [it, inserted] = buffers.try_emplace(slot);
    if (!inserted)
      return;
    const Storage &storage = storages[slots[slot].storage];
    auto buffer =
        rt::BufferOp::create(b, loc, slots[slot].type, storage.offset);
    if (storage.slots > 0) {
      buffer.setSlotsAttr(b.getI64IntegerAttr(storage.slots));
      buffer.setStrideAttr(b.getI64IntegerAttr(storage.stride));
    }
    it->second = buffer;
  };
  for (const Persistent &p : persistents)
    declare(p.slot);
  for (const Function &f : functions) {
    llvm::for_each(f.args, declare);
    for (const Kernel &k : f.body) {
      llvm::for_each(k.inputs, declare);
      llvm::for_each(k.outputs, declare);
    }
    llvm::for_each(f.results, declare);
  }
  auto buffer = [&](unsigned slot) { return buffers.at(slot); };
  for (const Persistent &p : persistents) {
    SmallVector<Attribute> split;
    for (const SmallVector<std::string> &axes : p.split) {
      SmallVector<StringRef> names(axes.begin(), axes.end());
      split.push_back(b.getStrArrayAttr(names));
    }
    rt::PersistentOp::create(
        b, loc, p.name, p.role, buffer(p.slot),
        b.getDenseI64ArrayAttr(p.globalShape),
        p.paddedShape.empty() ? DenseI64ArrayAttr()
                              : b.getDenseI64ArrayAttr(p.paddedShape),
        b.getDenseI64ArrayAttr(SmallVector<int64_t>(p.globalShape.size(), 0)),
        b.getArrayAttr(split), p.init,
        p.stream.empty() ? StringAttr() : b.getStringAttr(p.stream));
  }
  auto values = [&](ArrayRef<unsigned> list) {
    SmallVector<Value> result;
    for (unsigned slot : list)
      result.push_back(buffer(slot));
    return result;
  };
  auto strings = [&](ArrayRef<std::string> list) {
    SmallVector<StringRef> refs(list.begin(), list.end());
    return b.getStrArrayAttr(refs);
  };
  SmallVector<Attribute> callees;
  SmallVector<int64_t> callMicrobatches, callSlots;
  for (const Function &f : functions) {
    SmallVector<Value> args = values(f.args), results = values(f.results);
    // The model layers the kernels come from, as spans of the body.
    SmallVector<StringRef> layerNames;
    SmallVector<int64_t> layerSpans;
    for (size_t k = 0; k < f.body.size();) {
      size_t end = k + 1;
      while (end < f.body.size() && f.body[end].layer == f.body[k].layer)
        ++end;
      if (!f.body[k].layer.empty()) {
        layerNames.push_back(f.body[k].layer);
        layerSpans.append({static_cast<int64_t>(k), static_cast<int64_t>(end)});
      }
      k = end;
    }
    auto func = rt::FuncOp::create(
        b, loc, f.name, args, strings(f.argKinds), results,
        strings(f.resultNames),
        layerNames.empty() ? ArrayAttr() : b.getStrArrayAttr(layerNames),
        layerNames.empty() ? DenseI64ArrayAttr()
                           : b.getDenseI64ArrayAttr(layerSpans));
    Block *funcBody = b.createBlock(&func.getBody());
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToEnd(funcBody);
      for (const Kernel &k : f.body) {
        SmallVector<Value> inputs = values(k.inputs),
                           outputs = values(k.outputs);
        auto kernel = rt::KernelOp::create(b, loc, k.opcode, inputs, outputs,
                                           k.ints, k.floats);
        if (!k.reason.empty())
          kernel->setAttr("reason", b.getStringAttr(k.reason));
        ++kernels;
      }
    }
    b.setInsertionPointToEnd(body);
  }
  bool slotted = false;
  for (const Call &call : calls) {
    callees.push_back(
        FlatSymbolRefAttr::get(ctx, functions[call.function].name));
    callMicrobatches.push_back(call.microbatch);
    callSlots.push_back(call.slot);
    slotted |= call.slot != 0;
  }
  auto step = rt::StepOp::create(
      b, loc, b.getArrayAttr(callees), b.getDenseI64ArrayAttr(callMicrobatches),
      slotted ? b.getDenseI64ArrayAttr(callSlots) : DenseI64ArrayAttr(),
      /*actions=*/nullptr, /*call_actions=*/nullptr);
  if (scheduleInfo) {
    SmallVector<StringRef> tokens(actionTokens.begin(), actionTokens.end());
    step.setActionsAttr(b.getStrArrayAttr(tokens));
    step.setCallActionsAttr(b.getDenseI64ArrayAttr(callActions));
  }
}

LogicalResult ProgramLowering::lowerApplyOps(Function &f,
                                             const Placement &placement) {
  // Where each value lives: on the stages of one parameter (its gradient,
  // state and update), everywhere (global state, constants, the learning
  // rate), or partial over the pipeline (a sum over the parameters of
  // several stages: the gradient norm's terms).
  struct Home {
    bool everywhere = true, partial = false;
    std::set<int64_t> stages;
  };
  DenseMap<Value, Home> home;
  llvm::DenseSet<Value> here;
  auto paramHome = [&](StringRef param) {
    Home h;
    h.everywhere = false;
    auto it = placement.step->paramStages.find(param);
    if (it != placement.step->paramStages.end())
      h.stages = it->second;
    else
      h.stages = {0};
    return h;
  };
  auto isHere = [&](const Home &h) {
    return h.everywhere || llvm::any_of(h.stages, [&](int64_t stage) {
             return placement.onRank(stage);
           });
  };
  for (BlockArgument arg : apply.getArguments()) {
    auto param = apply.getArgAttrOfType<FlatSymbolRefAttr>(arg.getArgNumber(),
                                                           "triad.grad");
    if (!param) {
      // The step's 1 / tokens: every rank counted the step's tokens.
      home[arg] = Home();
      here.insert(arg);
      continue;
    }
    home[arg] = paramHome(param.getValue());
    if (placement.owns(param.getValue()))
      here.insert(arg);
  }
  int64_t ppGroup = groupIndex({"pp"});
  Block &block = apply.getBody().front();
  for (Operation &op : block) {
    if (isa<func::ReturnOp>(op))
      continue;
    if (auto get = dyn_cast<GetParamOp>(op)) {
      Home h;
      if (symbols.lookup<ParamOp>(get.getName()))
        h = paramHome(get.getName());
      else if (auto state = symbols.lookup<StateOp>(get.getName()))
        if (state.getOf())
          h = paramHome(*state.getOf());
      home[get.getResult()] = h;
      if (isHere(h)) {
        here.insert(get.getResult());
        if (failed(lowerOp(op, f)))
          return failure();
      }
      continue;
    }
    if (auto reduce = dyn_cast<dist::AllReduceOp>(op)) {
      // One kernel per operand this rank holds (every rank of the group
      // shares this rank's pipeline coordinate, so holds the same).
      int64_t group = groupIndex(SmallVector<StringRef>(
          reduce.getAxes().getAsValueRange<StringAttr>()));
      auto reason =
          op.getAttrOfType<StringAttr>(dist::DistDialect::kReasonAttrName);
      for (auto [input, result] :
           llvm::zip(reduce.getInputs(), reduce.getResults())) {
        home[result] = home.lookup(input);
        if (!here.contains(input))
          continue;
        here.insert(result);
        lowerAllReducePart(f, input, result, group);
        if (reason)
          f.body.back().reason = reason.str();
      }
      ++buckets;
      continue;
    }
    Home h;
    bool partial = false, disjoint = false;
    for (Value operand : op.getOperands()) {
      const Home &o = home[operand];
      if (o.partial) {
        partial = true;
        continue;
      }
      if (o.everywhere)
        continue;
      if (h.everywhere) {
        h.everywhere = false;
        h.stages = o.stages;
        continue;
      }
      std::set<int64_t> common;
      for (int64_t stage : o.stages)
        if (h.stages.count(stage))
          common.insert(stage);
      if (common.empty())
        disjoint = true;
      h.stages = common;
    }
    bool scalarAdd =
        isa<AddOp>(op) &&
        cast<RankedTensorType>(op.getResult(0).getType()).getRank() == 0;
    if (isa<ClipCoefficientOp, LossScaleUpdateOp>(op) && partial &&
        home[op.getOperand(0)].partial) {
      // The global norm (clipping's, and f16's overflow check): this rank's
      // sum of squares, summed over the pipeline ranks once, for every op
      // that reads it.
      Value total = op.getOperand(0);
      unsigned source = here.contains(total) ? slotOf.at(total) : fill(f, 0.0);
      unsigned summed = temporary(total.getType());
      emit(f, OpCode::AllReduce, {source}, {summed}, {ppGroup});
      f.body.back().bucket = buckets++;
      f.body.back().reason = "the gradient norm's sum of squares over the "
                             "parameters of every pipeline stage";
      slotOf[total] = summed;
      home[total] = Home();
      here.insert(total);
      if (failed(lowerOp(op, f)))
        return failure();
      for (Value result : op.getResults()) {
        home[result] = Home();
        here.insert(result);
      }
      continue;
    }
    // A scalar partial over the stages times scalars every rank holds (f16's
    // unscaling of the sum of squares) stays a partial sum.
    bool scalarScale =
        isa<MulOp>(op) && partial && !disjoint &&
        cast<RankedTensorType>(op.getResult(0).getType()).getRank() == 0 &&
        llvm::count_if(op.getOperands(), [&](Value operand) {
          return home[operand].partial;
        }) == 1;
    if (scalarScale) {
      Value part = *llvm::find_if(op.getOperands(), [&](Value operand) {
        return home[operand].partial;
      });
      Home p;
      p.everywhere = false;
      p.partial = true;
      home[op.getResult(0)] = p;
      if (!here.contains(part))
        continue;
      here.insert(op.getResult(0));
      if (failed(lowerOp(op, f)))
        return failure();
      continue;
    }
    if (partial || disjoint) {
      bool reduction = isa<dist::DistDialect>(op.getDialect());
      if (!scalarAdd && !reduction)
        return op.emitOpError("combines values of several pipeline stages; "
                              "only the gradient norm's sum of squares may");
      Home p;
      p.everywhere = false;
      p.partial = true;
      Value result = op.getResult(0);
      home[result] = p;
      SmallVector<Value> present;
      for (Value operand : op.getOperands())
        if (here.contains(operand))
          present.push_back(operand);
      if (present.empty())
        continue;
      here.insert(result);
      if (present.size() == op.getNumOperands()) {
        if (failed(lowerOp(op, f)))
          return failure();
      } else {
        slotOf[result] = slotOf.at(present.front());
      }
      continue;
    }
    // A parameter's gradient norm counts once, on the first stage that
    // holds the parameter (a tied embedding is held by two).
    if (isa<SumSquaresOp>(op) && !h.everywhere && !h.stages.empty())
      h.stages = {*h.stages.begin()};
    for (Value result : op.getResults())
      home[result] = h;
    if (!isHere(h))
      continue;
    for (Value result : op.getResults())
      here.insert(result);
    if (failed(lowerOp(op, f)))
      return failure();
  }
  for (Value value : block.getTerminator()->getOperands())
    if (!here.contains(value))
      return apply.emitOpError("returns a value that pipeline rank ")
             << placement.rank << " does not compute";
  return success();
}

FailureOr<StagedStep> StagedStep::build(ModuleOp module, int64_t numStages) {
  StagedStep step;
  // The stages returning each parameter's gradient, in order of first
  // appearance (every rank's lowering sees the same order: the tags of the
  // tied exchanges follow it).
  llvm::MapVector<StringRef, std::set<int64_t>> gradStages;
  for (auto function : module.getOps<func::FuncOp>()) {
    std::optional<std::pair<int64_t, pipe::StageWork>> where =
        pipe::stageFunctionOf(function);
    if (!where)
      continue;
    auto [stage, work] = *where;
    if (stage >= numStages)
      return function.emitOpError("is a function of pipeline stage ")
             << stage << ", but the schedule runs " << numStages << " stages";
    if (!step.functions.try_emplace({stage, work}, function).second)
      return function.emitOpError("repeats the ")
             << pipe::stringifyStageWork(work) << " function of pipeline stage "
             << stage;
    step.all.push_back(function);
    function.walk([&, stage = stage](GetParamOp get) {
      step.paramStages[get.getName()].insert(stage);
    });
    for (unsigned index = 0; index < function.getNumResults(); ++index)
      if (auto param = function.getResultAttrOfType<FlatSymbolRefAttr>(
              index, "triad.grad"))
        gradStages[param.getValue()].insert(stage);
  }
  if (step.all.empty())
    return emitError(module.getLoc(),
                     "has no stage functions; run --triad-pipeline-materialize "
                     "after --triad-pipeline-schedule");
  for (auto &[param, stages] : gradStages)
    if (stages.size() > 1)
      step.tied.push_back({param.str(), stages});
  return step;
}

LogicalResult ProgramLowering::lowerPipelineRank(
    int64_t rank, const schedule::Schedule &schedule, const StagedStep &step) {
  pipelineRank = rank;
  int64_t numStages = schedule.stages(), microbatches = schedule.microbatches;
  if (2 * numStages > kTiedTagBase)
    return anchor()->emitOpError("has too many pipeline stages (")
           << numStages << ") for the point-to-point tags";
  Placement placement{rank, schedule.ranks, &step};
  if (failed(readDataShape(microbatches)))
    return failure();
  noteWeightedCollectives();

  declarePersistents([&](StringRef param) { return placement.owns(param); });
  for (func::FuncOp function : stepFunctions) {
    if (failed(findInPlaceUpdates(function)))
      return failure();
    findEpilogues(function);
  }

  // Per stage: the slots of the values its functions keep for later ones
  // (every microbatch's calls of the stage share them, each in its own copy
  // where they pass from one call to another), its microbatch's token
  // count.
  struct Context {
    DenseMap<int64_t, unsigned> stash;
    unsigned count = 0;
  };
  std::map<int64_t, Context> contexts;
  // The first stage of this rank counts the step's tokens.
  int64_t firstLocal = rank;
  // One tag per direction and sending stage.
  auto tag = [&](int64_t from, int64_t to) {
    return (to < from ? numStages : 0) + from;
  };
  // Lowers stage function `function` (stage `s`) into `f`: its kept values
  // through the context, its transfers with pipeline rank `peer`, and each
  // gradient and loss it returns into its accumulator.
  auto lowerStageFunction = [&](func::FuncOp function, int64_t s,
                                pipe::StageWork work, int64_t peer,
                                Function &f) -> LogicalResult {
    Context &context = contexts[s];
    Block &block = function.getBody().front();
    for (BlockArgument arg : block.getArguments()) {
      auto kind = function.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                        "triad.input");
      unsigned slot = temporary(arg.getType());
      slotOf[arg] = slot;
      f.args.push_back(slot);
      f.argKinds.push_back(kind ? kind.str() : std::string());
    }
    // The forward counts its microbatch's tokens, which weigh its loss and
    // gradients (and those of the stage's later functions).
    if (work == pipe::StageWork::forward) {
      auto labels = llvm::find_if(block.getArguments(), [&](BlockArgument a) {
        auto kind = function.getArgAttrOfType<StringAttr>(a.getArgNumber(),
                                                          "triad.input");
        return kind && kind.getValue() == "labels";
      });
      if (labels == block.getArguments().end())
        return function.emitOpError("takes no labels argument; a forward "
                                    "counts its microbatch's tokens");
      context.count = temporary(scalarType());
      emit(f, OpCode::CountValid, {slotOf.at(*labels)}, {context.count},
           {*ignoreIndex});
    }
    bool transfer = work != pipe::StageWork::forward &&
                    work != pipe::StageWork::backward &&
                    work != pipe::StageWork::backward_input &&
                    work != pipe::StageWork::backward_weight;
    // (The schedule's verifier puts a stage's forward before its other
    // passes over a microbatch: the count exists when they run.)
    microbatchTokens = context.count;
    if (transfer && function.getNumResults() != 0)
      return function.emitOpError("returns values; a ")
             << pipe::stringifyStageWork(work) << " function returns none";
    unsigned one = transfer ? 0 : fill(f, 1.0);
    size_t bodyStart = f.body.size();
    for (Operation &op : block) {
      LogicalResult result =
          TypeSwitch<Operation *, LogicalResult>(&op)
              .Case([&](pipe::UnstashOp unstash) -> LogicalResult {
                auto it = context.stash.find(unstash.getIndex());
                if (it == context.stash.end())
                  return unstash.emitOpError("reads kept value ")
                         << unstash.getIndex()
                         << ", which no earlier function of pipeline stage "
                         << s << " keeps";
                if (slots[it->second].type != memrefOf(unstash.getType()))
                  return unstash.emitOpError("reads kept value ")
                         << unstash.getIndex() << " as " << unstash.getType()
                         << ", but pipeline stage " << s << " keeps a "
                         << slots[it->second].type << " there";
                slotOf[unstash.getResult()] = it->second;
                return success();
              })
              .Case([&](pipe::StashOp stash) -> LogicalResult {
                if (!context.stash
                         .try_emplace(stash.getIndex(),
                                      slotOf.at(stash.getValue()))
                         .second)
                  return stash.emitOpError("keeps value ")
                         << stash.getIndex() << ", which pipeline stage " << s
                         << " keeps already";
                return success();
              })
              .Case([&](pipe::SendTensorOp send) {
                emit(f, OpCode::Send, {slotOf.at(send.getValue())}, {},
                     {peer, tag(s, send.getStage())});
                return success();
              })
              .Case([&](pipe::RecvTensorOp recv) {
                unsigned slot = temporary(recv.getType());
                emit(f, OpCode::Recv, {}, {slot},
                     {peer, tag(recv.getStage(), s)});
                slotOf[recv.getResult()] = slot;
                return success();
              })
              .Default([&](Operation *other) { return lowerOp(*other, f); });
      if (failed(result))
        return failure();
    }
    // Each gradient is accumulated right after the kernel that completes
    // it, the loss at the end.
    SmallVector<Update> updates;
    for (auto [index, value] :
         llvm::enumerate(block.getTerminator()->getOperands())) {
      unsigned slot = slotOf.at(value);
      if (auto param = function.getResultAttrOfType<FlatSymbolRefAttr>(
              index, "triad.grad")) {
        bool weighted = weightedCollectives.contains(value.getDefiningOp());
        updates.push_back({gradAccumulator.lookup(param.getValue()), slot,
                           weighted ? one : context.count});
        continue;
      }
      auto name =
          function.getResultAttrOfType<StringAttr>(index, "triad.output");
      if (!name || name.getValue() != "loss")
        return function.emitOpError("result ")
               << index << " is neither a gradient nor the loss";
      updates.push_back({lossSum, slot, context.count});
    }
    accumulateAfterLastWrite(f, bodyStart, updates);
    if (work == pipe::StageWork::forward && s == firstLocal)
      emit(f, OpCode::Accumulate, {tokenCount, context.count, one},
           {tokenCount});
    return success();
  };

  std::vector<Function> functions;
  SmallVector<Call> calls;
  scheduleInfo = {schedule.name, schedule.virtualStages};
  int64_t actionIndex = -1;
  auto call = [&](unsigned function, int64_t i) {
    calls.push_back({function, i});
    callActions.push_back(actionIndex);
  };
  auto add = [&](Function f, int64_t i) {
    functions.push_back(std::move(f));
    call(functions.size() - 1, i);
  };
  Function begin;
  begin.name = "begin_step";
  for (const Persistent &p : persistents)
    if (p.role == rt::Role::Accumulator)
      emit(begin, OpCode::Fill, {}, {p.slot}, {}, {0.0});
  add(std::move(begin), 0);
  // Each stage function is lowered at its first action and called for
  // every microbatch (nullopt: the stage has no such work).
  std::map<std::pair<int64_t, pipe::StageWork>, std::optional<unsigned>>
      lowered;
  // The last microbatch each stage sent or received in each direction:
  // one tag carries them in order.
  std::map<std::pair<int64_t, pipe::StageWork>, int64_t> lastTransferred;
  for (const schedule::Action &action : schedule.actions[rank]) {
    using schedule::ActionKind;
    actionIndex = actionTokens.size();
    actionTokens.push_back(schedule::format(action));
    int64_t s = action.stage, i = action.microbatch;
    if (action.kind == ActionKind::ReduceGradients)
      continue;
    if (action.kind == ActionKind::Optimizer) {
      Function f;
      f.name = "apply_step";
      if (failed(lowerApplyStep(f, &placement)))
        return failure();
      add(std::move(f), 0);
      continue;
    }
    pipe::StageWork work = *pipe::stageWorkOf(action);
    std::pair<int64_t, pipe::StageWork> key = {s, work};
    if (action.kind == ActionKind::Send || action.kind == ActionKind::Recv) {
      auto [last, inserted] = lastTransferred.try_emplace(key, i);
      if (!inserted && last->second >= i)
        return anchor()->emitOpError("schedule ")
               << schedule.name << " moves microbatch " << i
               << " of pipeline stage " << s << " after microbatch "
               << last->second << " in the same direction; transfers of one "
               << "stage and direction must go in microbatch order";
      last->second = i;
    }
    if (auto it = lowered.find(key); it != lowered.end()) {
      if (it->second)
        call(*it->second, i);
      continue;
    }
    std::optional<unsigned> &loweredIndex = lowered[key];
    func::FuncOp function = step.lookup(s, work);
    if (!function)
      continue;
    Function f;
    f.name = function.getSymName().str();
    f.stage = s;
    if (failed(lowerStageFunction(function, s, work, action.peer, f)))
      return failure();
    loweredIndex = functions.size();
    add(std::move(f), i);
  }
  // The rank's last call before its apply step all-reduces the gradients
  // it completes, and those every earlier call completed, at its end: a
  // bucket right after the kernel that completes it where that call
  // completes it (the first stage's last backward), otherwise after its
  // last transfer (a later stage's sending its last gradient), so that
  // they overlap what the other pipeline ranks still have to do without
  // queueing before any transfer. A call of a function called once holds
  // them itself; otherwise a copy of its function for it (`..._last`).
  auto applyCall = llvm::find_if(calls, [&](const Call &c) {
    return functions[c.function].name == "apply_step";
  });
  if (overlapGradReduce && applyCall != calls.end() &&
      applyCall != calls.begin() &&
      functions[(applyCall - 1)->function].name != "begin_step") {
    Function &apply = functions[applyCall->function];
    Call &target = *(applyCall - 1);
    Function &f = functions[target.function];
    if (llvm::count_if(calls, [&](const Call &c) {
          return c.function == target.function;
        }) == 1) {
      reduceInBackward(f, apply, /*completeBefore=*/true);
    } else {
      SmallVector<const Function *> all;
      for (const Function &g : functions)
        all.push_back(&g);
      if (std::optional<Function> last = reducingCopy(
              f, f.name + "_last", apply, all, /*completeBefore=*/true)) {
        target.function = functions.size();
        functions.push_back(std::move(*last));
      }
    }
  }
  for (Function &f : functions)
    bucketCollectives(f);
  if (failed(planMemoryWithSlots(functions, calls)))
    return failure();
  for (Function &f : functions)
    mergeBuckets(f);
  emitProgram(functions, calls);
  return success();
}

LogicalResult ProgramLowering::lower(int64_t microbatches) {
  declarePersistents();
  Function begin, step, applyStep;
  begin.name = "begin_step";
  for (const Persistent &p : persistents)
    if (p.role == rt::Role::Accumulator)
      emit(begin, OpCode::Fill, {}, {p.slot}, {}, {0.0});
  if (failed(lowerMicrobatchStep(step, microbatches)) ||
      failed(lowerApplyStep(applyStep)))
    return failure();
  // Evaluation's forward pass, called by the runtime in place of the
  // microbatch step (not by the step's calls).
  Function evalStep = forwardOnly(step);
  // Sampling's forward pass to the logits (where they are whole).
  std::optional<Function> logitsStep = logitsOnly(step);
  // The gradients are reduced in the backward of the step's last
  // microbatch: the microbatch step itself, or a copy of it called for the
  // last of several.
  std::optional<Function> lastStep;
  if (overlapGradReduce && microbatches == 1) {
    reduceInBackward(step, applyStep);
  } else if (overlapGradReduce) {
    // (Not for a tensor-parallel sum of norm weights alone.)
    SmallVector<const Function *> all = {&begin, &step, &applyStep, &evalStep};
    if (logitsStep)
      all.push_back(&*logitsStep);
    lastStep = reducingCopy(step, "last_microbatch_step", applyStep, all,
                            /*completeBefore=*/false);
  }
  std::vector<Function> functions = {begin, step, applyStep, evalStep};
  if (logitsStep)
    functions.push_back(std::move(*logitsStep));
  unsigned last = 1;
  if (lastStep) {
    last = functions.size();
    functions.push_back(std::move(*lastStep));
  }
  for (Function &f : functions)
    bucketCollectives(f);
  planMemory(functions);
  for (Function &f : functions)
    mergeBuckets(f);
  SmallVector<Call> calls = {{0, 0}};
  for (int64_t m = 0; m < microbatches; ++m)
    calls.push_back({m + 1 == microbatches ? last : 1u, m});
  calls.push_back({2, 0});
  emitProgram(functions, calls);
  return success();
}

/// The runtime holds static f32, bf16 and f16 tensors (i32 for token ids):
/// anything else in the step's functions is an error at the value's op.
LogicalResult checkRuntimeTypes(func::FuncOp func) {
  if (func.isExternal())
    return func.emitOpError("is only declared; lowering needs its body");
  auto check = [&](Value value, Operation *where) -> LogicalResult {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (type && type.hasStaticShape() &&
        (type.getElementType().isF32() || type.getElementType().isBF16() ||
         type.getElementType().isF16() || type.getElementType().isInteger(32)))
      return success();
    return where->emitOpError("has a value of type ")
           << value.getType()
           << "; the runtime runs static f32, bf16 and f16 tensors (and i32 "
              "token ids) only";
  };
  for (BlockArgument arg : func.getArguments())
    if (failed(check(arg, func)))
      return failure();
  WalkResult walk = func.walk([&](Operation *op) {
    for (Value result : op->getResults())
      if (failed(check(result, op)))
        return WalkResult::interrupt();
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

struct LowerToRtPass : triad::impl::LowerToRtBase<LowerToRtPass> {
  using LowerToRtBase::LowerToRtBase;

  /// Adds a program's counts to the statistics (the arena: the largest).
  void record(const ProgramLowering &lowering) {
    numKernels += lowering.kernels;
    numInPlace += lowering.inPlace;
    numCopies += lowering.copies;
    numFusedEpilogues += lowering.fused;
    arenaBytes = std::max<uint64_t>(arenaBytes, lowering.arenaBytes);
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!module.getOps<rt::ProgramOp>().empty()) {
      emitError(module.getLoc(), "the module already holds rt programs");
      return signalPassFailure();
    }
    if (bucketBytes < 1) {
      emitError(module.getLoc(), "bucket-bytes must be at least 1, not ")
          << bucketBytes.getValue();
      return signalPassFailure();
    }

    // The mesh the sharding passes partitioned for (or one from the
    // options when they did not run).
    FailureOr<dist::MeshOp> mesh =
        sharding::getOrCreateMesh(module, dp, tp, pp, order);
    if (failed(mesh))
      return signalPassFailure();
    auto applyStep = module.lookupSymbol<func::FuncOp>("apply_step");
    auto microbatchStep = module.lookupSymbol<func::FuncOp>("microbatch_step");
    int64_t ranks = mesh->getAxisSize("pp").value_or(1);
    if (!applyStep || (!microbatchStep && ranks == 1)) {
      emitError(module.getLoc(), "needs @microbatch_step and @apply_step; run "
                                 "--triad-autodiff first");
      return signalPassFailure();
    }
    if (failed(checkRuntimeTypes(applyStep)))
      return signalPassFailure();
    if (!dtype.empty()) {
      for (auto param : module.getOps<ParamOp>()) {
        std::string actual;
        llvm::raw_string_ostream os(actual);
        os << param.getTensorType().getElementType();
        if (actual != dtype) {
          param.emitOpError("is ")
              << actual
              << " but the pipeline asks for dtype=" << dtype.getValue()
              << "; generate the model with that dtype";
          return signalPassFailure();
        }
      }
    }

    std::vector<std::vector<std::string>> groups;
    if (ranks == 1) {
      if (failed(checkRuntimeTypes(microbatchStep)))
        return signalPassFailure();
      // --triad-split-microbatches records how many calls make the step.
      int64_t microbatches = 1;
      if (auto count =
              microbatchStep->getAttrOfType<IntegerAttr>("triad.microbatches"))
        microbatches = count.getInt();
      if (microbatches < 1) {
        microbatchStep.emitOpError("triad.microbatches must be at least 1");
        return signalPassFailure();
      }
      ProgramLowering lowering(module, *mesh, microbatchStep, {microbatchStep},
                               applyStep, groups);
      lowering.bucketBytes = bucketBytes;
      lowering.fuseEpilogues = fuseEpilogues;
      lowering.overlapGradReduce = overlapGradReduce;
      if (failed(lowering.lower(microbatches)))
        return signalPassFailure();
      lowering.emitPlan(microbatches);
      record(lowering);
    } else {
      FailureOr<schedule::Schedule> schedule = pipe::readSchedule(module);
      if (failed(schedule))
        return signalPassFailure();
      if (schedule->ranks != ranks) {
        emitError(module.getLoc(), "the pipeline schedule is for ")
            << schedule->ranks << " ranks, but the mesh has pp=" << ranks;
        return signalPassFailure();
      }
      if (microbatchStep) {
        microbatchStep.emitOpError(
            "is still whole; run --triad-pipeline-materialize to cut it into "
            "the schedule's stage functions");
        return signalPassFailure();
      }
      FailureOr<StagedStep> step =
          StagedStep::build(module, schedule->stages());
      if (failed(step))
        return signalPassFailure();
      for (func::FuncOp function : step->all)
        if (failed(checkRuntimeTypes(function)))
          return signalPassFailure();
      std::optional<ProgramLowering> last;
      for (int64_t rank = 0; rank < ranks; ++rank) {
        last.emplace(module, *mesh, func::FuncOp(), step->all, applyStep,
                     groups);
        last->bucketBytes = bucketBytes;
        last->fuseEpilogues = fuseEpilogues;
        last->overlapGradReduce = overlapGradReduce;
        if (failed(last->lowerPipelineRank(rank, *schedule, *step)))
          return signalPassFailure();
        record(*last);
      }
      last->emitPlan(schedule->microbatches);
    }

    // The rt program replaces the training step.
    for (Operation &op : llvm::make_early_inc_range(*module.getBody()))
      if (isa<func::FuncOp, ParamOp, StateOp, dist::MeshOp, pipe::StageOp,
              pipe::ScheduleOp>(op))
        op.erase();
  }
};

} // namespace
