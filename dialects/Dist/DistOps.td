//===- DistOps.td - the dist dialect: mesh, layouts, collectives -*- tablegen -*-===//
//
// The `dist` dialect (L2): the device mesh, the layout of a tensor over it
// (which mesh axes split each dimension, over which axes it is a pending
// sum) and the collectives that change layouts.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_DIALECT_DIST_OPS_TD
#define TRIAD_DIALECT_DIST_OPS_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Dist_Dialect : Dialect {
  let name = "dist";
  let cppNamespace = "::triad::dist";
  let summary = "Device meshes, tensor layouts and collectives";
  let description = [{
    A module declares its device mesh with one `dist.mesh`. Values carry
    `#dist.layout`s (in the discardable attribute `dist.layouts` of the op
    that defines them, one per result, and `dist.layout` on function
    arguments, results and parameters). After partitioning, tensor types
    are local (a rank's piece) and the collectives move data between
    layouts: partial to replicated is an all_reduce, partial to split a
    reduce_scatter, split to replicated an all_gather, one split to another
    an all_to_all.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    /// The discardable attribute that holds the layouts of an op's results.
    static constexpr ::llvm::StringLiteral kLayoutsAttrName = "dist.layouts";
    /// The attribute that holds the layout of a function argument or
    /// result, or of a parameter.
    static constexpr ::llvm::StringLiteral kLayoutAttrName = "dist.layout";
    /// Why the sharding passes put a collective there (a string, for the
    /// communication report).
    static constexpr ::llvm::StringLiteral kReasonAttrName = "dist.reason";
    /// Marks what ZeRO splits over dp: a unit attribute on a triad.state
    /// (stage 1) or triad.param (stage 3), or on a gradient a function
    /// returns (stage 2); shard-propagate chooses the dimension.
    static constexpr ::llvm::StringLiteral kZeroAttrName = "dist.zero";
  }];
}

class Dist_Op<string mnemonic, list<Trait> traits = []>
    : Op<Dist_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

def Dist_LayoutAttr : AttrDef<Dist_Dialect, "Layout"> {
  let mnemonic = "layout";
  let summary = "How a tensor is laid out over the mesh";
  let description = [{
    For every dimension of the tensor, the mesh axes that split it (the
    first listed axis outermost: a dimension split over `{dp, tp}` has its
    piece `dp_index * tp_size + tp_index` on a rank), and the axes over
    which the value is partial: each rank holds a term of a sum over those
    axes that no one has taken yet. An axis appears at most once in a
    layout. A dimension without axes, and a layout without any, is
    replicated. A split need not divide its dimension where ZeRO chose it
    (a `triad.param` or `triad.state` marked `dist.zero`, and what the
    optimizer computes from it) and it is over one axis: a padded split,
    whose pieces have ceil(size / ranks) elements, the last ones zero past
    the end.

    Examples:

    ```mlir
    #dist.layout<{dp}, {}, {}>            // batch split over dp
    #dist.layout<{}, {tp}>                // a column-parallel weight
    #dist.layout<{}, {}, partial = {dp}>  // a gradient before its reduction
    #dist.layout<>                        // a replicated scalar
    ```
  }];
  let parameters = (ins
    ArrayRefParameter<"::mlir::ArrayAttr", "split axes of each dimension">:$dims,
    "::mlir::ArrayAttr":$partial
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// A replicated layout of a tensor of `rank` dimensions.
    static LayoutAttr getReplicated(::mlir::MLIRContext *context, int64_t rank);
    /// The layout with `axes` splitting dimension `dim` and nothing else.
    static LayoutAttr getSplit(::mlir::MLIRContext *context, int64_t rank,
                               int64_t dim,
                               ::llvm::ArrayRef<::llvm::StringRef> axes);
    int64_t getRank() const { return getDims().size(); }
    /// The axes splitting dimension `dim`.
    ::llvm::SmallVector<::llvm::StringRef> getSplitAxes(int64_t dim) const;
    ::llvm::SmallVector<::llvm::StringRef> getPartialAxes() const;
    bool isReplicated() const;
    bool isPartial() const { return !getPartial().empty(); }
    /// This layout with other partial axes.
    LayoutAttr withPartial(::llvm::ArrayRef<::llvm::StringRef> axes) const;
    /// This layout with dimension `dim` split over `axes` instead.
    LayoutAttr withSplit(int64_t dim, ::llvm::ArrayRef<::llvm::StringRef> axes) const;
  }];
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

def Dist_MeshOp : Dist_Op<"mesh", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "Declares the device mesh";
  let description = [{
    Named axes with their sizes, listed from the slowest to the fastest
    varying over consecutive ranks: rank r has, on axis i, the coordinate
    `(r / product of the sizes after i) % size_i`. The mesh of every layout
    and collective in the module is its one `dist.mesh`.

    Example:

    ```mlir
    dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrArrayAttr:$axes,
                       DenseI64ArrayAttr:$sizes);
  let assemblyFormat = "$sym_name `axes` $axes `=` $sizes attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The size of axis `name`, or nullopt when the mesh has no such axis.
    std::optional<int64_t> getAxisSize(::llvm::StringRef name);
    /// The number of ranks of the mesh.
    int64_t getNumRanks();
    /// The number of ranks of a group over `axes` (the product of their
    /// sizes).
    int64_t getGroupSize(::llvm::ArrayRef<::llvm::StringRef> axes);
    /// The module's mesh, or null when it has none.
    static MeshOp lookup(::mlir::Operation *from);
  }];
}

class Dist_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : Dist_Op<mnemonic, !listconcat(traits, [Pure])> {
  code collectiveClassDeclaration = [{
    ::llvm::SmallVector<::llvm::StringRef> getAxisNames() {
      ::llvm::SmallVector<::llvm::StringRef> names;
      for (::mlir::Attribute axis : getAxes())
        names.push_back(::llvm::cast<::mlir::StringAttr>(axis).getValue());
      return names;
    }
  }];
}

def Dist_AllReduceOp : Dist_CollectiveOp<"all_reduce", [AllTypesMatch<["inputs", "results"]>]> {
  let summary = "Sums partial values over mesh axes";
  let description = [{
    Every rank of a group over `axes` receives the sum of the group's
    inputs. Several tensors reduced together form one bucket: the runtime
    reduces them with one collective when they lie next to each other.

    Example:

    ```mlir
    %g:2 = dist.all_reduce %a, %b over ["dp"] : tensor<64x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs, StrArrayAttr:$axes);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let assemblyFormat = "$inputs `over` $axes attr-dict `:` type($inputs)";
  let hasVerifier = 1;
  let extraClassDeclaration = collectiveClassDeclaration;
}

def Dist_AllGatherOp : Dist_CollectiveOp<"all_gather"> {
  let summary = "Concatenates the pieces of a split dimension";
  let description = [{
    Every rank of a group over `axes` receives the group's inputs
    concatenated along `dim`, in the group's order. Padded pieces: where
    the result's `dim` is smaller than the group times the input's (the
    pieces of ceil(size / ranks) of a padded split), the concatenation is
    cut to the result's size, dropping the last pieces' padding.

    Example:

    ```mlir
    %w = dist.all_gather %piece dim 0 over ["dp"] : tensor<32x64xf32> -> tensor<64x64xf32>
    %v = dist.all_gather %padded dim 0 over ["dp"] : tensor<11xf32> -> tensor<32xf32>  // dp = 3
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$dim, StrArrayAttr:$axes);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `dim` $dim `over` $axes attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = collectiveClassDeclaration;
}

def Dist_ReduceScatterOp : Dist_CollectiveOp<"reduce_scatter"> {
  let summary = "Sums partial values and keeps this rank's piece";
  let description = [{
    The sum over a group of `axes`, split along `dim`: each rank receives
    the piece of its index in the group. Where the group does not divide
    `dim`, the pieces have ceil(size / ranks) elements and the last ones are
    zero past the input's end (a padded split).

    Example:

    ```mlir
    %g = dist.reduce_scatter %partial dim 0 over ["dp"] : tensor<64x64xf32> -> tensor<32x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$dim, StrArrayAttr:$axes);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `dim` $dim `over` $axes attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = collectiveClassDeclaration;
}

def Dist_AllSliceOp : Dist_CollectiveOp<"all_slice"> {
  let summary = "Keeps this rank's piece of a replicated dimension";
  let description = [{
    The inverse of all_gather, without communication: each rank of a group
    over `axes` keeps the piece of `dim` of its index in the group (the
    input is the same on every rank). ZeRO uses it to update a replicated
    parameter's shard. Where the group does not divide `dim`, the pieces
    have ceil(size / ranks) elements, zero past the input's end.

    Example:

    ```mlir
    %piece = dist.all_slice %w dim 0 over ["dp"] : tensor<64x64xf32> -> tensor<32x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$dim, StrArrayAttr:$axes);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `dim` $dim `over` $axes attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = collectiveClassDeclaration;
}

def Dist_AllToAllOp : Dist_CollectiveOp<"all_to_all"> {
  let summary = "Moves a split from one dimension to another";
  let description = [{
    Each rank cuts its input into as many pieces along `split_dim` as the
    group over `axes` has ranks, sends piece j to the group's rank j and
    concatenates what it receives along `concat_dim`.

    Example:

    ```mlir
    %y = dist.all_to_all %x split 1 concat 0 over ["tp"] : tensor<4x64xf32> -> tensor<8x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$split_dim,
                       I64Attr:$concat_dim, StrArrayAttr:$axes);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `split` $split_dim `concat` $concat_dim `over` $axes attr-dict `:`
    type($input) `->` type($result)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = collectiveClassDeclaration;
}

#endif // TRIAD_DIALECT_DIST_OPS_TD
