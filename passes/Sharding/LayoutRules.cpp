//===- LayoutRules.cpp - layouts of an op's values from its rule ----------===//

#include "passes/Sharding/LayoutRules.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/Sequence.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace triad;
using namespace triad::dist;

namespace triad::sharding {

LayoutAttr replicatedFor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return LayoutAttr::getReplicated(type.getContext(),
                                   tensor ? tensor.getRank() : 0);
}

bool isDistributed(LayoutAttr layout, MeshOp mesh) {
  for (int64_t dim = 0; dim < layout.getRank(); ++dim)
    if (mesh.getGroupSize(layout.getSplitAxes(dim)) > 1)
      return true;
  return mesh.getGroupSize(layout.getPartialAxes()) > 1;
}

bool splitsOver(LayoutAttr layout, StringRef axis) {
  return llvm::any_of(
      llvm::seq<int64_t>(0, layout.getRank()), [&](int64_t dim) {
        return llvm::is_contained(layout.getSplitAxes(dim), axis);
      });
}

LayoutAttr zeroShardedLayout(LayoutAttr layout, RankedTensorType type,
                             MeshOp mesh) {
  if (mesh.getAxisSize("dp").value_or(1) <= 1 || splitsOver(layout, "dp"))
    return layout;
  for (int64_t dim = 0; dim < layout.getRank(); ++dim) {
    SmallVector<StringRef> axes = layout.getSplitAxes(dim);
    axes.push_back("dp");
    if (!type.isDynamicDim(dim) &&
        type.getDimSize(dim) % mesh.getGroupSize(axes) == 0)
      return layout.withSplit(dim, axes);
  }
  // No dimension divides: a padded split of the largest dimension no other
  // axis splits (its pieces of ceil(size / dp), the last ones zero past the
  // end), so that ZeRO shards every tensor as a flat buffer would.
  std::optional<int64_t> padded;
  for (int64_t dim = 0; dim < layout.getRank(); ++dim)
    if (!type.isDynamicDim(dim) && layout.getSplitAxes(dim).empty() &&
        type.getDimSize(dim) > 1 &&
        (!padded || type.getDimSize(dim) > type.getDimSize(*padded)))
      padded = dim;
  if (padded)
    return layout.withSplit(*padded, {"dp"});
  // Every dimension another axis splits (a column-parallel bias over tp):
  // dp splits the largest of those pieces further, padded (each piece of
  // the other axes into pieces of ceil(piece / dp)).
  int64_t largest = 1;
  for (int64_t dim = 0; dim < layout.getRank(); ++dim) {
    SmallVector<StringRef> axes = layout.getSplitAxes(dim);
    int64_t parts = mesh.getGroupSize(axes);
    if (type.isDynamicDim(dim) || type.getDimSize(dim) % parts != 0)
      continue;
    if (int64_t piece = type.getDimSize(dim) / parts; piece > largest) {
      largest = piece;
      padded = dim;
    }
  }
  if (!padded)
    return layout; // nothing left to split: pieces of one element
  SmallVector<StringRef> axes = layout.getSplitAxes(*padded);
  axes.push_back("dp");
  return layout.withSplit(*padded, axes);
}

LayoutAttr withoutZeroSplit(LayoutAttr layout) {
  for (int64_t dim = 0; dim < layout.getRank(); ++dim) {
    SmallVector<StringRef> axes = layout.getSplitAxes(dim);
    if (llvm::is_contained(axes, "dp"))
      return layout.withSplit(
          dim, llvm::to_vector(llvm::make_filter_range(
                   axes, [](StringRef axis) { return axis != "dp"; })));
  }
  return layout;
}

bool readsParameter(Value value) {
  while (Operation *op = value.getDefiningOp()) {
    if (isa<GetParamOp>(op))
      return true;
    if (!isa<DistDialect>(op->getDialect()) || op->getNumOperands() != 1)
      return false;
    value = op->getOperand(0);
  }
  return false;
}

LayoutDecision decideLayouts(const ShardingRule &rule,
                             ArrayRef<LayoutAttr> operandLayouts, MeshOp mesh,
                             MLIRContext *context, ArrayRef<bool> parameters,
                             std::optional<int64_t> scatterDim,
                             ArrayRef<FactorSplit> resultSplits) {
  size_t factors = rule.sizes.size();
  SmallVector<SmallVector<StringRef>> factorAxes(factors);
  llvm::StringSet<> used;
  auto axesFree = [&](ArrayRef<StringRef> axes) {
    return llvm::none_of(axes, [&](StringRef a) { return used.contains(a); });
  };
  // A factor may be split over `axes` when they divide it, or, for an op
  // that computes on zero-padded pieces, when their innermost axis pads the
  // pieces of the others, which divide it.
  auto divides = [&](int64_t factor, ArrayRef<StringRef> axes) {
    return rule.sizes[factor] % mesh.getGroupSize(axes) == 0 ||
           (rule.acceptsPadding && !axes.empty() &&
            rule.sizes[factor] % mesh.getGroupSize(axes.drop_back()) == 0);
  };
  auto inOperand = [&](int64_t factor) {
    return llvm::any_of(rule.operands, [&](ArrayRef<int64_t> dims) {
      return llvm::is_contained(dims, factor);
    });
  };
  for (const auto &[factor, axes] : resultSplits)
    if (factor >= 0 && factor < (int64_t)factors && !inOperand(factor) &&
        !rule.wholeFactors[factor] && !axes.empty() && axesFree(axes) &&
        divides(factor, axes)) {
      factorAxes[factor] = axes;
      for (StringRef axis : axes)
        used.insert(axis);
    }

  std::optional<std::tuple<unsigned, int64_t, int64_t>> indivisible;
  // Splits, the parameters' first (a weight is never gathered for an
  // activation), then those of factors the results keep before reduced
  // ones (splitting a reduced factor leaves a pending sum to communicate),
  // then in operand order.
  auto kept = [&](int64_t factor) {
    return llvm::any_of(rule.results, [&](ArrayRef<int64_t> dims) {
      return llvm::is_contained(dims, factor);
    });
  };
  SmallVector<std::pair<unsigned, int64_t>> candidates;
  for (auto [operand, layout] : llvm::enumerate(operandLayouts))
    for (int64_t dim = 0; dim < layout.getRank(); ++dim)
      if (dim < (int64_t)rule.operands[operand].size() &&
          rule.operands[operand][dim] != ShardingRule::kNoFactor)
        candidates.push_back({(unsigned)operand, dim});
  auto rank = [&](std::pair<unsigned, int64_t> candidate) {
    auto [operand, dim] = candidate;
    bool parameter = operand < parameters.size() && parameters[operand];
    return std::make_tuple(!parameter, !kept(rule.operands[operand][dim]),
                           operand, dim);
  };
  llvm::stable_sort(candidates,
                    [&](auto a, auto b) { return rank(a) < rank(b); });
  for (auto [operand, dim] : candidates) {
    SmallVector<StringRef> axes = operandLayouts[operand].getSplitAxes(dim);
    if (axes.empty())
      continue;
    int64_t factor = rule.operands[operand][dim];
    if (rule.wholeFactors[factor])
      continue;
    // A finer split of a factor that extends the one taken wins: the
    // coarser operands are sliced (no communication) rather than the finer
    // one gathered (ZeRO state split {tp, dp} next to its {tp} parameter).
    ArrayRef<StringRef> taken = factorAxes[factor];
    if (!taken.empty() && axes.size() > taken.size() &&
        ArrayRef<StringRef>(axes).take_front(taken.size()) == taken &&
        axesFree(ArrayRef<StringRef>(axes).drop_front(taken.size())) &&
        divides(factor, axes)) {
      for (StringRef axis : ArrayRef<StringRef>(axes).drop_front(taken.size()))
        used.insert(axis);
      factorAxes[factor] = axes;
      continue;
    }
    if (!taken.empty() || !axesFree(axes))
      continue;
    if (!divides(factor, axes)) {
      if (!indivisible)
        indivisible = std::make_tuple(operand, dim, mesh.getGroupSize(axes));
      continue;
    }
    factorAxes[factor] = axes;
    for (StringRef axis : axes)
      used.insert(axis);
  }

  // Pending sums that pass through.
  SmallVector<SmallVector<StringRef>> partial;
  for (LayoutAttr layout : operandLayouts)
    partial.push_back(layout.getPartialAxes());
  SmallVector<StringRef> passed;
  SmallVector<bool> keepsPartial(operandLayouts.size(), false);
  auto anyPartial = llvm::any_of(partial, [](auto &p) { return !p.empty(); });
  if (anyPartial) {
    using Linearity = ShardingRule::Linearity;
    // Jointly linear: the sums pending in every operand stay pending in
    // the result; an operand reduces only the axes the others lack (a
    // gradient partial over dp and tp added to one partial over dp keeps
    // dp pending, so that the step's token weighting still applies to
    // each data-parallel rank's own sum).
    SmallVector<StringRef> common;
    if (rule.linearity == Linearity::Joint)
      for (StringRef axis : partial.front())
        if (llvm::all_of(partial,
                         [&](auto &p) { return llvm::is_contained(p, axis); }))
          common.push_back(axis);
    if (!common.empty() && axesFree(common)) {
      passed = common;
      keepsPartial.assign(operandLayouts.size(), true);
    } else if (rule.linearity == Linearity::Each) {
      SmallVector<unsigned> partialOperands;
      for (auto [i, p] : llvm::enumerate(partial))
        if (!p.empty())
          partialOperands.push_back(i);
      if (partialOperands.size() == 1 &&
          llvm::is_contained(rule.linearOperands, partialOperands.front()) &&
          axesFree(partial[partialOperands.front()])) {
        passed = partial[partialOperands.front()];
        keepsPartial[partialOperands.front()] = true;
      }
    }
  }

  // A pending sum of activations ([batch, seq, hidden]) that the op must
  // reduce is reduce-scattered along the factor of its dimension
  // `scatterDim` where that factor is free.
  if (scatterDim)
    for (auto [operand, pending] : llvm::enumerate(partial)) {
      if (pending.empty() || keepsPartial[operand] || !axesFree(pending) ||
          operandLayouts[operand].getRank() != 3)
        continue;
      int64_t factor = rule.operands[operand][*scatterDim];
      if (factor == ShardingRule::kNoFactor || rule.wholeFactors[factor] ||
          !factorAxes[factor].empty() || !kept(factor) ||
          rule.sizes[factor] % mesh.getGroupSize(pending) != 0)
        continue;
      factorAxes[factor] = pending;
      for (StringRef axis : pending)
        used.insert(axis);
    }

  LayoutDecision decision;
  auto layoutOf = [&](ArrayRef<int64_t> dims, ArrayRef<StringRef> partialAxes) {
    SmallVector<ArrayAttr> split;
    for (int64_t factor : dims) {
      SmallVector<Attribute> axes;
      if (factor != ShardingRule::kNoFactor)
        for (StringRef axis : factorAxes[factor])
          axes.push_back(StringAttr::get(context, axis));
      split.push_back(ArrayAttr::get(context, axes));
    }
    SmallVector<Attribute> pending;
    for (StringRef axis : partialAxes)
      pending.push_back(StringAttr::get(context, axis));
    return LayoutAttr::get(context, split, ArrayAttr::get(context, pending));
  };
  for (auto [operand, dims] : llvm::enumerate(rule.operands))
    decision.operands.push_back(layoutOf(dims, keepsPartial[operand]
                                                   ? ArrayRef<StringRef>(passed)
                                                   : ArrayRef<StringRef>()));
  for (ArrayRef<int64_t> dims : rule.results) {
    llvm::SetVector<StringRef> pending(passed.begin(), passed.end());
    for (size_t factor = 0; factor < factors; ++factor)
      if (!llvm::is_contained(dims, (int64_t)factor) &&
          !llvm::is_contained(rule.combinedFactors, (int64_t)factor))
        pending.insert(factorAxes[factor].begin(), factorAxes[factor].end());
    decision.results.push_back(layoutOf(dims, pending.getArrayRef()));
  }
  for (ArrayRef<StringRef> axes : factorAxes)
    decision.factorParts.push_back(mesh.getGroupSize(axes));
  decision.factorAxes = factorAxes;
  decision.indivisible = indivisible;
  return decision;
}

SmallVector<FactorSplit> resultOnlySplits(const ShardingRule &rule,
                                          ArrayRef<LayoutAttr> resultLayouts) {
  SmallVector<FactorSplit> splits;
  for (auto [dims, layout] : llvm::zip(rule.results, resultLayouts))
    for (auto [dim, factor] : llvm::enumerate(dims)) {
      if (factor == ShardingRule::kNoFactor ||
          (int64_t)dim >= layout.getRank() ||
          layout.getSplitAxes(dim).empty() ||
          llvm::any_of(rule.operands, [&](ArrayRef<int64_t> operand) {
            return llvm::is_contained(operand, factor);
          }))
        continue;
      splits.push_back(
          {factor, SmallVector<StringRef>(layout.getSplitAxes(dim))});
    }
  return splits;
}

FailureOr<MeshOp> getOrCreateMesh(ModuleOp module, int64_t dp, int64_t tp,
                                  int64_t pp, StringRef order) {
  SmallVector<StringRef> names;
  order.split(names, ',');
  llvm::StringMap<int64_t> sizeOf = {{"dp", dp}, {"tp", tp}, {"pp", pp}};
  SmallVector<StringRef> axes;
  SmallVector<int64_t> sizes;
  for (StringRef name : names) {
    name = name.trim();
    auto it = sizeOf.find(name);
    if (it == sizeOf.end() || llvm::is_contained(axes, name))
      return emitError(module.getLoc(), "order '")
             << order << "' must list dp, tp and pp once each";
    axes.push_back(it->first());
    sizes.push_back(it->second);
  }
  if (axes.size() != 3)
    return emitError(module.getLoc(), "order '")
           << order << "' must list dp, tp and pp once each";
  if (dp < 1 || tp < 1 || pp < 1)
    return emitError(module.getLoc(), "dp, tp and pp must be at least 1");
  if (MeshOp mesh = MeshOp::lookup(module)) {
    for (auto [name, size] : llvm::zip(axes, sizes))
      if (size != 1 && mesh.getAxisSize(name).value_or(1) != size)
        return emitError(module.getLoc(), "the module's mesh has ")
               << name << "=" << mesh.getAxisSize(name).value_or(1)
               << " but the options ask for " << name << "=" << size;
    return mesh;
  }
  OpBuilder builder = OpBuilder::atBlockBegin(module.getBody());
  return MeshOp::create(builder, module.getLoc(), "mesh",
                        builder.getStrArrayAttr(axes),
                        builder.getDenseI64ArrayAttr(sizes));
}

} // namespace triad::sharding
