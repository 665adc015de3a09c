//===- DistDialect.cpp - the dist mesh and layout dialect -----------------===//
//
// The layout attribute's syntax and checks, the mesh, and the verifiers of
// the collectives (their shapes against the sizes of the mesh axes).
//
//===----------------------------------------------------------------------===//

#include "dialects/Dist/DistDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace triad::dist;

#include "dialects/Dist/DistDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Dist/DistAttrs.cpp.inc"

#define GET_OP_CLASSES
#include "dialects/Dist/DistOps.cpp.inc"

void DistDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Dist/DistOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Dist/DistAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// LayoutAttr
//===----------------------------------------------------------------------===//

namespace {

SmallVector<StringRef> namesOf(ArrayAttr axes) {
  SmallVector<StringRef> names;
  for (Attribute axis : axes)
    names.push_back(cast<StringAttr>(axis).getValue());
  return names;
}

ArrayAttr axesAttr(MLIRContext *context, ArrayRef<StringRef> names) {
  SmallVector<Attribute> axes;
  for (StringRef name : names)
    axes.push_back(StringAttr::get(context, name));
  return ArrayAttr::get(context, axes);
}

/// `{}` or `{a, b}`.
ParseResult parseAxisSet(AsmParser &parser, ArrayAttr &axes) {
  SmallVector<StringRef> names;
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Braces,
                                     [&]() -> ParseResult {
                                       StringRef name;
                                       if (parser.parseKeyword(&name))
                                         return failure();
                                       names.push_back(name);
                                       return success();
                                     }))
    return failure();
  axes = axesAttr(parser.getContext(), names);
  return success();
}

void printAxisSet(AsmPrinter &printer, ArrayAttr axes) {
  printer << '{';
  llvm::interleaveComma(namesOf(axes), printer);
  printer << '}';
}

} // namespace

Attribute LayoutAttr::parse(AsmParser &parser, Type) {
  SmallVector<ArrayAttr> dims;
  ArrayAttr partial = ArrayAttr::get(parser.getContext(), {});
  if (parser.parseLess())
    return {};
  if (failed(parser.parseOptionalGreater())) {
    do {
      if (succeeded(parser.parseOptionalKeyword("partial"))) {
        if (parser.parseEqual() || parseAxisSet(parser, partial))
          return {};
        break;
      }
      if (parseAxisSet(parser, dims.emplace_back()))
        return {};
    } while (succeeded(parser.parseOptionalComma()));
    if (parser.parseGreater())
      return {};
  }
  return parser.getChecked<LayoutAttr>(parser.getContext(), dims, partial);
}

void LayoutAttr::print(AsmPrinter &printer) const {
  printer << '<';
  llvm::interleaveComma(getDims(), printer,
                        [&](ArrayAttr axes) { printAxisSet(printer, axes); });
  if (isPartial()) {
    printer << (getDims().empty() ? "partial = " : ", partial = ");
    printAxisSet(printer, getPartial());
  }
  printer << '>';
}

LogicalResult LayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 ArrayRef<ArrayAttr> dims, ArrayAttr partial) {
  llvm::StringSet<> seen;
  auto check = [&](ArrayAttr axes) -> LogicalResult {
    for (Attribute axis : axes) {
      auto name = dyn_cast<StringAttr>(axis);
      if (!name || name.getValue().empty())
        return emitError() << "mesh axes are named by non-empty strings";
      if (!seen.insert(name.getValue()).second)
        return emitError() << "mesh axis '" << name.getValue()
                           << "' is used twice in one layout";
    }
    return success();
  };
  for (ArrayAttr axes : dims)
    if (failed(check(axes)))
      return failure();
  return check(partial);
}

LayoutAttr LayoutAttr::getReplicated(MLIRContext *context, int64_t rank) {
  SmallVector<ArrayAttr> dims(rank, ArrayAttr::get(context, {}));
  return get(context, dims, ArrayAttr::get(context, {}));
}

LayoutAttr LayoutAttr::getSplit(MLIRContext *context, int64_t rank, int64_t dim,
                                ArrayRef<StringRef> axes) {
  return getReplicated(context, rank).withSplit(dim, axes);
}

SmallVector<StringRef> LayoutAttr::getSplitAxes(int64_t dim) const {
  return namesOf(getDims()[dim]);
}

SmallVector<StringRef> LayoutAttr::getPartialAxes() const {
  return namesOf(getPartial());
}

bool LayoutAttr::isReplicated() const {
  return !isPartial() &&
         llvm::all_of(getDims(), [](ArrayAttr axes) { return axes.empty(); });
}

LayoutAttr LayoutAttr::withPartial(ArrayRef<StringRef> axes) const {
  return get(getContext(), getDims(), axesAttr(getContext(), axes));
}

LayoutAttr LayoutAttr::withSplit(int64_t dim, ArrayRef<StringRef> axes) const {
  SmallVector<ArrayAttr> dims(getDims());
  dims[dim] = axesAttr(getContext(), axes);
  return get(getContext(), dims, getPartial());
}

//===----------------------------------------------------------------------===//
// Layout checks and local types
//===----------------------------------------------------------------------===//

LogicalResult triad::dist::verifyLayout(
    LayoutAttr layout, MeshOp mesh, RankedTensorType globalType,
    function_ref<InFlightDiagnostic()> emitError, bool allowPadded) {
  if (!mesh)
    return emitError() << "has a layout but the module declares no dist.mesh";
  auto checkAxes = [&](ArrayRef<StringRef> axes) -> LogicalResult {
    for (StringRef axis : axes)
      if (!mesh.getAxisSize(axis))
        return emitError() << "layout names mesh axis '" << axis
                           << "', which mesh @" << mesh.getSymName()
                           << " does not have";
    return success();
  };
  for (int64_t dim = 0; dim < layout.getRank(); ++dim)
    if (failed(checkAxes(layout.getSplitAxes(dim))))
      return failure();
  if (failed(checkAxes(layout.getPartialAxes())))
    return failure();
  if (!globalType)
    return success();
  if (globalType.getRank() != layout.getRank())
    return emitError() << "layout has " << layout.getRank()
                       << " dimensions but the tensor " << globalType << " has "
                       << globalType.getRank();
  for (int64_t dim = 0; dim < layout.getRank(); ++dim) {
    SmallVector<StringRef> axes = layout.getSplitAxes(dim);
    int64_t parts = mesh.getGroupSize(axes);
    if (globalType.isDynamicDim(dim))
      return emitError() << "dimension " << dim << " of " << globalType
                         << " is dynamic";
    // A padded split pads at its innermost axis only: the axes before it
    // divide the dimension.
    if (globalType.getDimSize(dim) % parts == 0 ||
        (allowPadded && !axes.empty() &&
         globalType.getDimSize(dim) %
                 mesh.getGroupSize(ArrayRef<StringRef>(axes).drop_back()) ==
             0))
      continue;
    return emitError() << "dimension " << dim << " of " << globalType
                       << " is not divisible by the " << parts
                       << " ranks of its split axes"
                       << (allowPadded ? " (only the innermost axis of a split "
                                         "may pad)"
                                       : "");
  }
  return success();
}

int64_t triad::dist::pieceSize(int64_t size, int64_t parts) {
  return (size + parts - 1) / parts;
}

RankedTensorType triad::dist::localType(RankedTensorType globalType,
                                        LayoutAttr layout, MeshOp mesh) {
  SmallVector<int64_t> shape(globalType.getShape());
  for (int64_t dim = 0; dim < layout.getRank(); ++dim)
    shape[dim] =
        pieceSize(shape[dim], mesh.getGroupSize(layout.getSplitAxes(dim)));
  return globalType.clone(shape);
}

SmallVector<LayoutAttr> triad::dist::getResultLayouts(Operation *op) {
  SmallVector<LayoutAttr> layouts;
  if (auto list = op->getAttrOfType<ArrayAttr>(DistDialect::kLayoutsAttrName))
    for (Attribute layout : list)
      layouts.push_back(cast<LayoutAttr>(layout));
  return layouts;
}

void triad::dist::setResultLayouts(Operation *op,
                                   ArrayRef<LayoutAttr> layouts) {
  SmallVector<Attribute> list(layouts.begin(), layouts.end());
  op->setAttr(DistDialect::kLayoutsAttrName,
              ArrayAttr::get(op->getContext(), list));
}

//===----------------------------------------------------------------------===//
// Attributes on ops, arguments and results
//===----------------------------------------------------------------------===//

namespace {

/// The type a layout describes: global before partitioning. Layouts on ops
/// are checked against their result types only for rank and axes; the
/// divisibility of global shapes is checked where they are declared (a
/// parameter) and by the passes that choose layouts.
LogicalResult verifyLayoutOn(Operation *op, Attribute attr, Type type,
                             bool global, const Twine &what,
                             bool allowPadded = false) {
  auto layout = dyn_cast<LayoutAttr>(attr);
  if (!layout)
    return op->emitOpError() << what << " must be a #dist.layout";
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return op->emitOpError() << what << " lays out a non-tensor " << type;
  if (tensor.getRank() != layout.getRank())
    return op->emitOpError()
           << what << " has " << layout.getRank() << " dimensions but "
           << tensor << " has " << tensor.getRank();
  return verifyLayout(
      layout, MeshOp::lookup(op), global ? tensor : nullptr,
      [&] { return op->emitOpError() << what << ": "; }, allowPadded);
}

} // namespace

LogicalResult DistDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  if (attr.getName() == kLayoutsAttrName) {
    auto list = dyn_cast<ArrayAttr>(attr.getValue());
    if (!list || list.size() != op->getNumResults())
      return op->emitOpError()
             << "'" << kLayoutsAttrName << "' must list one layout per result";
    for (auto [index, layout] : llvm::enumerate(list))
      if (failed(verifyLayoutOn(op, layout, op->getResult(index).getType(),
                                /*global=*/false,
                                "layout of result " + Twine(index))))
        return failure();
    return success();
  }
  if (attr.getName() == kLayoutAttrName) {
    // A parameter's layout, on its global type.
    auto type = op->getAttrOfType<TypeAttr>("type");
    if (!type)
      return op->emitOpError() << "'" << kLayoutAttrName
                               << "' belongs on ops that declare a tensor "
                                  "type (parameters, state)";
    // What ZeRO splits may be padded.
    return verifyLayoutOn(op, attr.getValue(), type.getValue(),
                          /*global=*/true, "layout",
                          op->hasAttr(kZeroAttrName));
  }
  if (attr.getName() == kZeroAttrName) {
    if (!isa<UnitAttr>(attr.getValue()) || !op->getAttrOfType<TypeAttr>("type"))
      return op->emitOpError()
             << "'" << kZeroAttrName
             << "' is a unit attribute of ops that declare a tensor type";
    return success();
  }
  if (attr.getName() == kReasonAttrName) {
    if (!isa<StringAttr>(attr.getValue()))
      return op->emitOpError()
             << "'" << kReasonAttrName << "' must be a string";
    return success();
  }
  return op->emitOpError() << "has unknown dist attribute '"
                           << attr.getName().getValue() << "'";
}

LogicalResult DistDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                    unsigned argIndex,
                                                    NamedAttribute attr) {
  auto func = dyn_cast<FunctionOpInterface>(op);
  if (!func || attr.getName() != kLayoutAttrName)
    return op->emitOpError() << "has unknown dist argument attribute '"
                             << attr.getName().getValue() << "'";
  return verifyLayoutOn(op, attr.getValue(), func.getArgumentTypes()[argIndex],
                        /*global=*/false,
                        "layout of argument " + Twine(argIndex));
}

LogicalResult DistDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                       unsigned resultIndex,
                                                       NamedAttribute attr) {
  auto func = dyn_cast<FunctionOpInterface>(op);
  if (func && attr.getName() == kZeroAttrName) {
    if (!isa<UnitAttr>(attr.getValue()) ||
        !isa<RankedTensorType>(func.getResultTypes()[resultIndex]))
      return op->emitOpError()
             << "'" << kZeroAttrName << "' on result " << resultIndex
             << " is a unit attribute of a tensor result (a gradient)";
    return success();
  }
  if (!func || attr.getName() != kLayoutAttrName)
    return op->emitOpError() << "has unknown dist result attribute '"
                             << attr.getName().getValue() << "'";
  return verifyLayoutOn(op, attr.getValue(), func.getResultTypes()[resultIndex],
                        /*global=*/false,
                        "layout of result " + Twine(resultIndex));
}

//===----------------------------------------------------------------------===//
// MeshOp
//===----------------------------------------------------------------------===//

LogicalResult MeshOp::verify() {
  if (getAxes().size() != getSizes().size())
    return emitOpError("has ")
           << getAxes().size() << " axes but " << getSizes().size() << " sizes";
  if (getAxes().empty())
    return emitOpError("needs at least one axis");
  llvm::StringSet<> names;
  int64_t ranks = 1;
  for (auto [axis, size] : llvm::zip(getAxes(), getSizes())) {
    StringRef name = cast<StringAttr>(axis).getValue();
    if (name.empty() || !names.insert(name).second)
      return emitOpError("axis '") << name << "' is empty or repeated";
    if (size < 1)
      return emitOpError("axis '")
             << name << "' has size " << size << "; sizes are at least 1";
    if (ranks > (int64_t{1} << 31) / size)
      return emitOpError("has more than 2^31 ranks");
    ranks *= size;
  }
  for (Operation *other = (*this)->getPrevNode(); other;
       other = other->getPrevNode())
    if (isa<MeshOp>(other))
      return emitOpError("is the module's second mesh; a module has one");
  return success();
}

std::optional<int64_t> MeshOp::getAxisSize(StringRef name) {
  for (auto [axis, size] : llvm::zip(getAxes(), getSizes()))
    if (cast<StringAttr>(axis).getValue() == name)
      return size;
  return std::nullopt;
}

int64_t MeshOp::getNumRanks() {
  int64_t ranks = 1;
  for (int64_t size : getSizes())
    ranks *= size;
  return ranks;
}

int64_t MeshOp::getGroupSize(ArrayRef<StringRef> axes) {
  int64_t size = 1;
  for (StringRef axis : axes)
    size *= getAxisSize(axis).value_or(1);
  return size;
}

MeshOp MeshOp::lookup(Operation *from) {
  auto module = isa<ModuleOp>(from) ? cast<ModuleOp>(from)
                                    : from->getParentOfType<ModuleOp>();
  if (!module)
    return {};
  auto meshes = module.getOps<MeshOp>();
  return meshes.empty() ? MeshOp() : *meshes.begin();
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

namespace {

/// The group size of a collective's axes, after checking them against the
/// module's mesh.
FailureOr<int64_t> groupSize(Operation *op, ArrayAttr axes) {
  MeshOp mesh = MeshOp::lookup(op);
  if (!mesh)
    return op->emitOpError("needs a dist.mesh in its module");
  if (axes.empty())
    return op->emitOpError("needs at least one mesh axis");
  llvm::StringSet<> seen;
  for (StringRef axis : namesOf(axes)) {
    if (!mesh.getAxisSize(axis))
      return op->emitOpError("names mesh axis '")
             << axis << "', which mesh @" << mesh.getSymName()
             << " does not have";
    if (!seen.insert(axis).second)
      return op->emitOpError("names mesh axis '") << axis << "' twice";
  }
  return mesh.getGroupSize(namesOf(axes));
}

LogicalResult checkDim(Operation *op, RankedTensorType type, int64_t dim,
                       StringRef what) {
  if (dim < 0 || dim >= type.getRank())
    return op->emitOpError()
           << what << " " << dim << " is not a dimension of " << type;
  return success();
}

/// `whole` is `piece` with dimension `dim` `parts` times larger, or, for a
/// padded split, of a size whose pieces of ceil(size / parts) are `piece`.
LogicalResult checkScaled(Operation *op, RankedTensorType piece,
                          RankedTensorType whole, int64_t dim, int64_t parts,
                          StringRef pieceName, StringRef wholeName) {
  if (piece.getElementType() != whole.getElementType() ||
      piece.getRank() != whole.getRank())
    return op->emitOpError()
           << pieceName << " " << piece << " and " << wholeName << " " << whole
           << " differ in element type or rank";
  for (int64_t d = 0; d < piece.getRank(); ++d) {
    int64_t expected = piece.getDimSize(d) * (d == dim ? parts : 1);
    if (d == dim && !whole.isDynamicDim(d) && !piece.isDynamicDim(d) &&
        whole.getDimSize(d) > 0 &&
        triad::dist::pieceSize(whole.getDimSize(d), parts) ==
            piece.getDimSize(d))
      continue;
    if (whole.getDimSize(d) != expected)
      return op->emitOpError()
             << "dimension " << d << " of the " << wholeName << " must be "
             << expected << " (the " << pieceName << "'s"
             << (d == dim ? " times the " + std::to_string(parts) +
                                " ranks of the group"
                          : std::string())
             << "), not " << whole.getDimSize(d);
  }
  return success();
}

} // namespace

LogicalResult AllReduceOp::verify() {
  if (getInputs().empty())
    return emitOpError("reduces at least one tensor");
  return groupSize(*this, getAxes());
}

LogicalResult AllGatherOp::verify() {
  FailureOr<int64_t> parts = groupSize(*this, getAxes());
  auto input = cast<RankedTensorType>(getInput().getType());
  if (failed(parts) || failed(checkDim(*this, input, getDim(), "dim")))
    return failure();
  return checkScaled(*this, input, cast<RankedTensorType>(getType()), getDim(),
                     *parts, "input", "result");
}

LogicalResult ReduceScatterOp::verify() {
  FailureOr<int64_t> parts = groupSize(*this, getAxes());
  auto input = cast<RankedTensorType>(getInput().getType());
  if (failed(parts) || failed(checkDim(*this, input, getDim(), "dim")))
    return failure();
  return checkScaled(*this, cast<RankedTensorType>(getType()), input, getDim(),
                     *parts, "result", "input");
}

LogicalResult AllSliceOp::verify() {
  FailureOr<int64_t> parts = groupSize(*this, getAxes());
  auto input = cast<RankedTensorType>(getInput().getType());
  if (failed(parts) || failed(checkDim(*this, input, getDim(), "dim")))
    return failure();
  return checkScaled(*this, cast<RankedTensorType>(getType()), input, getDim(),
                     *parts, "result", "input");
}

LogicalResult AllToAllOp::verify() {
  FailureOr<int64_t> parts = groupSize(*this, getAxes());
  auto input = cast<RankedTensorType>(getInput().getType());
  auto result = cast<RankedTensorType>(getType());
  if (failed(parts) ||
      failed(checkDim(*this, input, getSplitDim(), "split dim")) ||
      failed(checkDim(*this, input, getConcatDim(), "concat dim")))
    return failure();
  if (input.getElementType() != result.getElementType() ||
      input.getRank() != result.getRank())
    return emitOpError("input ") << input << " and result " << result
                                 << " differ in element type or rank";
  if (input.getDimSize(getSplitDim()) % *parts)
    return emitOpError("split dimension ")
           << getSplitDim() << " of " << input << " is not divisible by the "
           << *parts << " ranks of the group";
  for (int64_t d = 0; d < input.getRank(); ++d) {
    int64_t expected = input.getDimSize(d);
    if (d == static_cast<int64_t>(getSplitDim()))
      expected /= *parts;
    if (d == static_cast<int64_t>(getConcatDim()))
      expected *= *parts;
    if (result.getDimSize(d) != expected)
      return emitOpError("dimension ")
             << d << " of the result must be " << expected << ", not "
             << result.getDimSize(d);
  }
  return success();
}
