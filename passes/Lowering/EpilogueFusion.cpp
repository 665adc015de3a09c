//===- EpilogueFusion.cpp - products lowered with their epilogue ----------===//
//
// See EpilogueFusion.h.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/EpilogueFusion.h"

#include <optional>

using namespace mlir;

namespace triad {

namespace {

/// Whether `writesInPlace` holds for an op strictly between `first` and
/// `last` (of one block, `first` before `last`) or for one nested in them.
bool crossesInPlaceWrite(Operation *first, Operation *last,
                         llvm::function_ref<bool(Operation *)> writesInPlace) {
  for (Operation *op = first->getNextNode(); op && op != last;
       op = op->getNextNode()) {
    WalkResult walk = op->walk([&](Operation *nested) {
      return writesInPlace(nested) ? WalkResult::interrupt()
                                   : WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return true;
  }
  return false;
}

/// The epilogue that adds the bias and applies activation `op`, if the
/// runtime fuses that activation.
std::optional<plan::EpilogueCode> activationEpilogue(Operation *op) {
  if (auto gelu = dyn_cast<GeluOp>(op))
    return gelu.getApproximate() == GeluApproximation::tanh
               ? std::optional(plan::EpilogueCode::BiasGeluTanh)
               : std::nullopt;
  if (isa<ReluOp>(op))
    return plan::EpilogueCode::BiasRelu;
  return std::nullopt;
}

/// The group `product` heads, if it has one.
std::optional<FusedEpilogue>
groupOf(MatmulOp product, llvm::function_ref<bool(Operation *)> writesInPlace) {
  Value c = product.getResult();
  if (!c.hasOneUse())
    return std::nullopt;
  OpOperand &use = *c.getUses().begin();
  Operation *add = use.getOwner();
  if (!isa<AddOp, BiasAddOp>(add) || use.getOperandNumber() != 0 ||
      add->getBlock() != product->getBlock())
    return std::nullopt;
  // A bias vector of the product's last dimension (an add of anything
  // else, such as a residual or a position table, stays an add).
  auto type = cast<RankedTensorType>(c.getType());
  auto bias = dyn_cast<RankedTensorType>(add->getOperand(1).getType());
  if (!bias || bias.getRank() != 1 ||
      bias.getDimSize(0) != type.getShape().back() ||
      bias.getElementType() != type.getElementType() ||
      add->getResult(0).getType() != type)
    return std::nullopt;
  if (crossesInPlaceWrite(product, add, writesInPlace))
    return std::nullopt;

  FusedEpilogue group;
  group.product = product;
  group.biasAdd = add;
  // The first activation of the sum the runtime fuses (any other reader,
  // an activation's gradient included, reads the kept pre-activation).
  Value sum = add->getResult(0);
  for (Operation *user : sum.getUsers()) {
    std::optional<plan::EpilogueCode> code = activationEpilogue(user);
    if (!code || user->getBlock() != add->getBlock() ||
        (group.activation && group.activation->isBeforeInBlock(user)) ||
        crossesInPlaceWrite(add, user, writesInPlace))
      continue;
    group.activation = user;
    group.code = *code;
  }
  // The kernel writes the sum where the activation was: a reader of it
  // before that would find nothing there yet.
  Block *block = add->getBlock();
  if (group.activation && llvm::any_of(sum.getUsers(), [&](Operation *user) {
        Operation *reader = block->findAncestorOpInBlock(*user);
        return user != group.activation &&
               (!reader || !group.activation->isBeforeInBlock(reader));
      })) {
    group.activation = nullptr;
    group.code = plan::EpilogueCode::Bias;
  }
  group.keepsPreActivation =
      group.activation && llvm::any_of(sum.getUsers(), [&](Operation *user) {
        return user != group.activation;
      });
  return group;
}

/// Whether `sum` adds its operand over every dimension but the last into a
/// vector of that dimension (a bias gradient).
bool sumsRows(SumOp sum) {
  auto x = cast<RankedTensorType>(sum.getOperand().getType());
  auto result = cast<RankedTensorType>(sum.getResult().getType());
  ArrayRef<int64_t> dims = sum.getDims();
  if (x.getRank() < 2 || result.getRank() != 1 ||
      result.getDimSize(0) != x.getShape().back() ||
      result.getElementType() != x.getElementType() ||
      static_cast<int64_t>(dims.size()) != x.getRank() - 1)
    return false;
  for (auto [index, dim] : llvm::enumerate(dims))
    if (dim != static_cast<int64_t>(index))
      return false;
  return true;
}

/// The gradient group `product` heads, if it has one.
std::optional<FusedEpilogue>
gradientGroupOf(MatmulOp product,
                llvm::function_ref<bool(Operation *)> writesInPlace) {
  Value dy = product.getResult();
  if (!dy.hasOneUse())
    return std::nullopt;
  auto grad = dyn_cast<ActivationGradOp>(dy.getUses().begin()->getOwner());
  if (!grad || grad.getDy() != dy || grad.getX() == dy ||
      grad.getKind() != ActivationKind::gelu_tanh ||
      grad->getBlock() != product->getBlock() ||
      crossesInPlaceWrite(product, grad, writesInPlace))
    return std::nullopt;
  FusedEpilogue group;
  group.product = product;
  group.activationGrad = grad;
  group.code = plan::EpilogueCode::GeluTanhGrad;
  // The sum moves up to the kernel: its operand is the kernel's result, and
  // its own result must be a buffer of its own, written by nothing else.
  for (Operation *user : grad.getResult().getUsers()) {
    auto sum = dyn_cast<SumOp>(user);
    if (sum && sum->getBlock() == grad->getBlock() && sumsRows(sum) &&
        !writesInPlace(sum)) {
      group.biasGrad = sum;
      break;
    }
  }
  return group;
}

} // namespace

llvm::SmallVector<FusedEpilogue>
findFusedEpilogues(func::FuncOp func,
                   llvm::function_ref<bool(Operation *)> writesInPlace) {
  llvm::SmallVector<FusedEpilogue> groups;
  func.walk([&](MatmulOp product) {
    std::optional<FusedEpilogue> group = groupOf(product, writesInPlace);
    if (!group)
      group = gradientGroupOf(product, writesInPlace);
    if (group)
      groups.push_back(*group);
  });
  return groups;
}

} // namespace triad
