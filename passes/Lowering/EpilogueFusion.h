//===- EpilogueFusion.h - products lowered with their epilogue ---*- C++
//-*-===//
//
// Which matrix products --triad-lower-to-rt emits as one matmul kernel with
// a fused epilogue (runtime/plan/KernelContract.h, MatmulAttrs) instead of
// a matmul, an add and an activation: a linear layer's product, its bias
// and, where the runtime's epilogues compute it with the same formula, its
// activation. The fused kernel has no buffer for the product (nor for the
// biased sum where only the activation reads it), so the memory plan has
// fewer temporaries to place.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_PASSES_LOWERING_EPILOGUEFUSION_H
#define TRIAD_PASSES_LOWERING_EPILOGUEFUSION_H

#include "dialects/Triad/TriadOps.h"
#include "runtime/plan/KernelCodes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace triad {

/// A product and the ops one fused matmul kernel computes with it: a
/// forward group (its bias add and activation) or a gradient group (the
/// activation's gradient and the bias gradient).
struct FusedEpilogue {
  MatmulOp product;
  /// The add of the bias (triad.add or triad.bias_add): its lhs is the
  /// product, its rhs the bias vector. Null in a gradient group.
  mlir::Operation *biasAdd = nullptr;
  /// The activation of the biased sum (triad.gelu approximate = tanh or
  /// triad.relu), or null.
  mlir::Operation *activation = nullptr;
  /// A gradient group's triad.activation_grad (of the tanh GELU) whose dy
  /// is the product: the kernel computes its result, reading its x.
  ActivationGradOp activationGrad;
  /// The triad.sum of that gradient over every dimension but the last (the
  /// bias gradient), which the kernel writes as its second result, or null.
  SumOp biasGrad;
  plan::EpilogueCode code = plan::EpilogueCode::Bias;
  /// Whether something besides the activation reads the biased sum (an
  /// activation's gradient, a later stage): the kernel then writes it as
  /// its second result.
  bool keepsPreActivation = false;

  bool isGradient() const { return static_cast<bool>(activationGrad); }
  /// The op whose place the kernel takes: in a forward group the last (the
  /// bias, read by the add, is defined before it), in a gradient group the
  /// activation's gradient (its result is read before the bias gradient's
  /// sum, which then reads it from the kernel: nothing else does).
  mlir::Operation *anchor() const {
    if (isGradient())
      return activationGrad;
    return activation ? activation : biasAdd;
  }
  /// The ops of the group besides the product.
  llvm::SmallVector<mlir::Operation *, 2> epilogueOps() const {
    llvm::SmallVector<mlir::Operation *, 2> ops;
    for (mlir::Operation *op :
         {biasAdd, activation, ActivationGradOp(activationGrad).getOperation(),
          SumOp(biasGrad).getOperation()})
      if (op)
        ops.push_back(op);
    return ops;
  }
  /// A forward group's bias vector.
  mlir::Value bias() const { return biasAdd->getOperand(1); }
  /// The kernel's third operand: the bias, or the activation's input its
  /// gradient reads.
  mlir::Value thirdOperand() const {
    return isGradient() ? ActivationGradOp(activationGrad).getX() : bias();
  }
  /// The value the kernel's first result holds.
  mlir::Value result() const { return anchor()->getResult(0); }
  mlir::Value preActivation() const { return biasAdd->getResult(0); }
  /// The value its second result holds, if it has one: the pre-activation
  /// it keeps, or the bias gradient.
  std::optional<mlir::Value> secondResult() const {
    if (isGradient())
      return biasGrad ? std::optional<mlir::Value>(SumOp(biasGrad).getResult())
                      : std::nullopt;
    return keepsPreActivation ? std::optional<mlir::Value>(preActivation())
                              : std::nullopt;
  }
};

/// The products of `func` (in its layers too) to lower with their epilogue.
///
/// A forward group: a matmul whose single use is an add, in the same
/// block, of a bias vector of the product's last dimension and element
/// type; with the activation of that sum when it is triad.gelu's tanh
/// approximation or triad.relu (the only activations cuBLASLt's epilogues
/// compute with the formula of the unfused kernels: not the erf GELU, SiLU
/// or the fast GELU), in the same block, and no other reader of the sum
/// before it. The kernel runs where the last op of its group was.
///
/// A gradient group: a matmul whose single use is the dy of a
/// triad.activation_grad of the tanh GELU, in the same block; with a
/// triad.sum of that gradient over every dimension but its last (the bias
/// gradient), in the same block, where `writesInPlace` does not hold for
/// the sum. The kernel runs where the activation's gradient was: the sum
/// moves up to it. (ReLU's gradient stays its own kernel: cuBLASLt's reads
/// a bit mask its forward writes, not the ReLU's input the plan keeps.)
///
/// A group is not formed across an op for which `writesInPlace` holds (one
/// that writes storage an earlier value may live in: the product's
/// operands would be read after it).
llvm::SmallVector<FusedEpilogue>
findFusedEpilogues(mlir::func::FuncOp func,
                   llvm::function_ref<bool(mlir::Operation *)> writesInPlace);

} // namespace triad

#endif // TRIAD_PASSES_LOWERING_EPILOGUEFUSION_H
