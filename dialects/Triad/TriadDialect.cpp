//===- TriadDialect.cpp - the triad model dialect -------------------------===//
//
// Registers the dialect and implements its attributes.
//
//===----------------------------------------------------------------------===//

#include "dialects/Triad/TriadDialect.h"
#include "dialects/Triad/TriadOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace triad;

#include "dialects/Triad/TriadDialect.cpp.inc"
#include "dialects/Triad/TriadEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Triad/TriadAttrs.cpp.inc"

void TriadDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Triad/TriadOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Triad/TriadAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// InitAttr
//===----------------------------------------------------------------------===//

static bool initKindHasStd(InitKind kind) {
  return kind == InitKind::normal || kind == InitKind::scaled_normal;
}

// Syntax: `<` kind (`,` `std` `=` float)? (`,` `layers` `=` int)? `>`
Attribute InitAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseLess() || parser.parseKeyword(&keyword))
    return {};
  std::optional<InitKind> kind = symbolizeInitKind(keyword);
  if (!kind) {
    parser.emitError(loc, "unknown init kind '")
        << keyword << "' (expected normal, scaled_normal, zeros or ones)";
    return {};
  }
  double stddev = 0.0;
  int64_t layers = 0;
  llvm::SmallDenseSet<StringRef, 2> seen;
  while (succeeded(parser.parseOptionalComma())) {
    StringRef field;
    SMLoc fieldLoc = parser.getCurrentLocation();
    if (parser.parseKeyword(&field) || parser.parseEqual())
      return {};
    if (!seen.insert(field).second) {
      parser.emitError(fieldLoc, "init field '") << field << "' repeats";
      return {};
    }
    if (field == "std" || field == "value") {
      if ((field == "value") != (*kind == InitKind::constant)) {
        parser.emitError(fieldLoc, "init '")
            << stringifyInitKind(*kind) << "' takes no field '" << field << "'";
        return {};
      }
      if (parser.parseFloat(stddev))
        return {};
    } else if (field == "layers") {
      if (parser.parseInteger(layers))
        return {};
    } else {
      parser.emitError(fieldLoc, "unknown init field '")
          << field << "' (expected std, value or layers)";
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<InitAttr>(loc, parser.getContext(), *kind,
                                     APFloat(stddev), layers);
}

void InitAttr::print(AsmPrinter &printer) const {
  printer << "<" << stringifyInitKind(getKind());
  if (initKindHasStd(getKind())) {
    printer << ", std = ";
    printer.printFloat(getStd());
  }
  if (getKind() == InitKind::constant) {
    printer << ", value = ";
    printer.printFloat(getStd());
  }
  if (getKind() == InitKind::scaled_normal)
    printer << ", layers = " << getLayers();
  printer << ">";
}

LogicalResult InitAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               InitKind kind, APFloat stddev, int64_t layers) {
  double value = stddev.convertToDouble();
  if (initKindHasStd(kind)) {
    if (!(value > 0.0) || !std::isfinite(value))
      return emitError() << "init '" << stringifyInitKind(kind)
                         << "' needs a positive finite std, got " << value;
  } else if (kind == InitKind::constant) {
    if (!std::isfinite(value))
      return emitError() << "init 'constant' needs a finite value, got "
                         << value;
  } else if (value != 0.0) {
    return emitError() << "init '" << stringifyInitKind(kind)
                       << "' takes no std";
  }
  if (kind == InitKind::scaled_normal) {
    if (layers <= 0)
      return emitError() << "init 'scaled_normal' needs layers > 0, got "
                         << layers;
  } else if (layers != 0) {
    return emitError() << "init '" << stringifyInitKind(kind)
                       << "' takes no layers";
  }
  return success();
}

double InitAttr::getConstantValue() const {
  switch (getKind()) {
  case InitKind::zeros:
    return 0.0;
  case InitKind::ones:
    return 1.0;
  case InitKind::constant:
    return getStd().convertToDouble();
  case InitKind::normal:
  case InitKind::scaled_normal:
    break;
  }
  return 0.0;
}

double InitAttr::getEffectiveStd() const {
  double stddev = getStd().convertToDouble();
  if (getKind() == InitKind::scaled_normal)
    return stddev / std::sqrt(2.0 * static_cast<double>(getLayers()));
  return stddev;
}
