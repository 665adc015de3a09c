//===- TriadInterfaces.td - interfaces of the triad ops ----*- tablegen -*-===//
//
// The gradient rule of an op (autodiff), its sharding rule (the sharding
// passes) and its cost (the pipeline split).
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

def Triad_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::triad";
  let description = [{
    How the op's computation splits over a device mesh (see
    ShardingRule.h): the factors of its iteration space, which dimension
    of each operand and result each factor is, which factors must stay
    whole, and in which operands the op is linear (so that a partial
    operand can pass its pending sum on). The sharding passes read only
    this: they never switch over op names. `buildLocal` builds the op on
    one rank's pieces; ops whose attributes depend on split sizes (heads,
    slice sizes) override it.
  }];
  let methods = [
    InterfaceMethod<"The op's sharding rule.", "::triad::ShardingRule",
      "getShardingRule">,
    InterfaceMethod<[{
        Builds the op's computation on local pieces: `operands` are the
        local operands, `resultTypes` the local result types,
        `factorParts[f]` the number of pieces factor f is split into and
        `factorAxes[f]` the mesh axes that split it (for a local form that
        depends on the rank's piece, such as the vocabulary rows of a
        vocab-parallel embedding). A local form that communicates within
        its computation (the factors of the rule's `combinedFactors`)
        builds its collectives through `collectives`. Returns the op whose
        results replace the op's.
      }],
      "::mlir::Operation *", "buildLocal",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::ValueRange":$operands,
           "::mlir::TypeRange":$resultTypes,
           "::llvm::ArrayRef<int64_t>":$factorParts,
           "::llvm::ArrayRef<::llvm::SmallVector<::llvm::StringRef>>":$factorAxes,
           "::triad::LocalCollectives &":$collectives),
      /*methodBody=*/"",
      /*defaultImplementation=*/[{
        return ::triad::cloneWithTypes(builder, $_op, operands, resultTypes);
      }]>
  ];
}

def Triad_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::triad";
  let description = [{
    The cost model of an op, from its IR alone: the floating-point
    operations it performs and the bytes it reads and writes (its tensor
    operands and results, once each). The pipeline split balances stages
    by the sum over their layers' ops; ops without this interface
    (parameter reads, constants, structure) cost nothing. The defaults
    count one operation per result element, which suits the elementwise
    ops and normalizations within a small factor; contractions override
    the FLOPs and describe their products' shape (`getContraction`), by
    which a cost model sets their efficiency (--triad-cost-report lists
    them for the planner).
  }];
  let methods = [
    InterfaceMethod<"Floating-point operations of one execution.",
      "double", "getFlops", (ins), /*methodBody=*/"",
      /*defaultImplementation=*/[{
        return ::triad::resultElements($_op);
      }]>,
    InterfaceMethod<"Bytes of the tensors the op reads and writes.",
      "double", "getBytes", (ins), /*methodBody=*/"",
      /*defaultImplementation=*/[{
        return ::triad::tensorBytes($_op);
      }]>,
    InterfaceMethod<[{
        The products on matrix units whose shape sets the op's efficiency
        (a cost model's curve by shape), or none for an op whose time is
        its bytes.
      }],
      "std::optional<::triad::Contraction>", "getContraction", (ins),
      /*methodBody=*/"",
      /*defaultImplementation=*/[{
        return std::nullopt;
      }]>
  ];
}

#endif // TRIAD_DIALECT_TRIAD_INTERFACES_TD
