//===- GeluGradRoute.h - how CUDA runs a product with the GELU's gradient -===//
//
// A product fused with the tanh GELU's gradient (and its bias gradient:
// the MLP's first layer in the backward) runs in cuBLASLt's epilogue with
// the bias gradient (DGELU_BGRAD), in the epilogue without it (DGELU, the
// bias gradient by Triad's column sum), or as the product and Triad's
// kernels. Which is fastest depends on cuBLASLt's algorithms for the
// shape: on an H100 in 2026-11, DGELU_BGRAD ran the 1.3 B model's product
// at 282 TFLOP/s where the plain product ran at about 790. No CUDA here,
// so that tools parse the name without the toolkit.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_GELUGRADROUTE_H
#define TRIAD_RUNTIME_KERNELS_GELUGRADROUTE_H

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace triad::rt {

enum class GeluGradRoute {
  /// The gradient and the bias gradient in the epilogue (DGELU_BGRAD)
  /// where cuBLASLt takes them.
  Fused,
  /// The gradient in the epilogue (DGELU), the bias gradient by reduceSum.
  Dgelu,
  /// The product, then the activation gradient kernel and reduceSum.
  Kernels,
};

/// "fused", "dgelu" or "kernels".
inline const char *geluGradRouteName(GeluGradRoute route) {
  switch (route) {
  case GeluGradRoute::Fused:
    return "fused";
  case GeluGradRoute::Dgelu:
    return "dgelu";
  case GeluGradRoute::Kernels:
    return "kernels";
  }
  return "fused";
}

/// The route named `name`, or InvalidArgument naming the routes.
inline absl::StatusOr<GeluGradRoute>
parseGeluGradRoute(absl::string_view name) {
  for (GeluGradRoute route :
       {GeluGradRoute::Fused, GeluGradRoute::Dgelu, GeluGradRoute::Kernels})
    if (name == geluGradRouteName(route))
      return route;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown route '", name, "' (expected fused, dgelu or kernels)"));
}

} // namespace triad::rt

#endif // TRIAD_RUNTIME_KERNELS_GELUGRADROUTE_H
