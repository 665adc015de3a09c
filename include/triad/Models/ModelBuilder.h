//===- ModelBuilder.h - builds triad model IR from a config ------*- C++
//-*-===//
//
// Turns a ModelConfig into the forward model IR of the `triad` dialect: one
// `triad.param` per weight and a function `@forward(tokens, labels
// [, prefix_lengths]) -> loss` made of `triad.layer` parts.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_MODELS_MODELBUILDER_H
#define TRIAD_MODELS_MODELBUILDER_H

#include "triad/Models/ModelConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace triad {

/// Builds the model of a configuration that `validate()` accepted. The
/// module verifies; shapes only, no weights, so even the largest presets
/// build in well under a second.
mlir::OwningOpRef<mlir::ModuleOp> buildModel(mlir::MLIRContext &context,
                                             const ModelConfig &config);

/// The ALiBi slopes of Press et al. for `heads` heads, as BLOOM computes
/// them (geometric for a power of two, interleaved otherwise).
std::vector<float> alibiSlopes(int64_t heads);

} // namespace triad

#endif // TRIAD_MODELS_MODELBUILDER_H
