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

namespace triad {

/// A product and the ops one fused matmul kernel computes with it.
struct FusedEpilogue {
  MatmulOp product;
  /// The add of the bias (triad.add or triad.bias_add): its lhs is the
  /// product, its rhs the bias vector.
  mlir::Operation *biasAdd = nullptr;
  /// The activation of the biased sum (triad.gelu approximate = tanh or
  /// triad.relu), or null.
  mlir::Operation *activation = nullptr;
  plan::EpilogueCode code = plan::EpilogueCode::Bias;
  /// Whether something besides the activation reads the biased sum (an
  /// activation's gradient, a later stage): the kernel then writes it as
  /// its second result.
  bool keepsPreActivation = false;

  /// The op whose place the kernel takes: the last of the group, where the
  /// bias (read by the add) is defined.
  mlir::Operation *last() const { return activation ? activation : biasAdd; }
  mlir::Value bias() const { return biasAdd->getOperand(1); }
  /// The value the kernel's first result holds.
  mlir::Value result() const { return last()->getResult(0); }
  mlir::Value preActivation() const { return biasAdd->getResult(0); }
};

/// The products of `func` (in its layers too) to lower with their epilogue:
/// a matmul whose single use is an add, in the same block, of a bias vector
/// of the product's last dimension and element type; with the activation
/// of that sum when it is triad.gelu's tanh approximation or triad.relu
/// (the only activations cuBLASLt's epilogues compute with the formula of
/// the unfused kernels: not the erf GELU, SiLU or the fast GELU) and in
/// the same block. The kernel runs where the last op of its group was, so
/// a group is not formed across an op for which `writesInPlace` holds
/// (one that writes storage an earlier value may live in: the product's
/// operands would be read after it).
llvm::SmallVector<FusedEpilogue>
findFusedEpilogues(mlir::func::FuncOp func,
                   llvm::function_ref<bool(mlir::Operation *)> writesInPlace);

} // namespace triad

#endif // TRIAD_PASSES_LOWERING_EPILOGUEFUSION_H
