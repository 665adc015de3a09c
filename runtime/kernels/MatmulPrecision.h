//===- MatmulPrecision.h - the arithmetic of f32 matrix products -*- C++
//-*-===//
//
// How a backend may compute a matrix product of f32 operands, as PyTorch's
// float32 matmul precision does: exactly in f32 (the default, and the only
// choice that keeps the CUDA backend within 1e-5 of the CPU), or on tensor
// cores with the operands rounded to TF32 (10-bit mantissa) or to bf16
// (7-bit mantissa, as bf16 autocast rounds them), accumulating in f32
// either way. Storage stays f32: only the products' inputs are rounded.
// No CUDA here, so that tools parse the name without the toolkit.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_MATMULPRECISION_H
#define TRIAD_RUNTIME_KERNELS_MATMULPRECISION_H

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace triad::rt {

enum class MatmulPrecision { F32, Tf32, Bf16 };

/// "f32", "tf32" or "bf16".
inline const char *matmulPrecisionName(MatmulPrecision precision) {
  switch (precision) {
  case MatmulPrecision::F32:
    return "f32";
  case MatmulPrecision::Tf32:
    return "tf32";
  case MatmulPrecision::Bf16:
    return "bf16";
  }
  return "f32";
}

/// The precision named `name`, or InvalidArgument naming the choices.
inline absl::StatusOr<MatmulPrecision>
parseMatmulPrecision(absl::string_view name) {
  for (MatmulPrecision precision :
       {MatmulPrecision::F32, MatmulPrecision::Tf32, MatmulPrecision::Bf16})
    if (name == matmulPrecisionName(precision))
      return precision;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown matmul precision '", name, "' (expected f32, tf32 or bf16)"));
}

} // namespace triad::rt

#endif // TRIAD_RUNTIME_KERNELS_MATMULPRECISION_H
