//===- TriadInterfaces.td - interfaces of the triad ops ----*- tablegen -*-===//
//
// The gradient rule of an op, used by the autodiff pass.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_DIALECT_TRIAD_INTERFACES_TD
#define TRIAD_DIALECT_TRIAD_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Triad_VjpOpInterface : OpInterface<"VjpOpInterface"> {
  let cppNamespace = "::triad";
  let description = [{
    The reverse-mode gradient rule (vector-Jacobian product) of an op: given
    the gradients of its results, it builds, at the builder's insertion
    point, the gradients of its operands. The rule may read the op's
    operands and results (the autodiff pass makes them available in the
    backward code, saved or recomputed). Ops without this interface have no
    gradient: autodiff through them is an error that names them.
  }];
  let methods = [
    InterfaceMethod<[{
        Appends to `operandGrads` one value per operand: its gradient, or a
        null value when the operand has none (integer tensors, constants
        such as ALiBi slopes, masks). `resultGrads` holds one gradient per
        result, null for results the loss does not depend on.
      }],
      "::llvm::LogicalResult", "buildVjp",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::ValueRange":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>
  ];
}

#endif // TRIAD_DIALECT_TRIAD_INTERFACES_TD
