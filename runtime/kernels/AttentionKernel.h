//===- AttentionKernel.h - which kernel runs attention on CUDA ----*- C++
//-*-===//
//
// The CUDA backend runs a 16-bit plan's attention and attention gradient
// either through cuDNN's fused (flash) attention or through Triad's own
// tensor-core kernels (kernels/cuda/CudaAttention.h), which stay the
// fallback and the reference. `auto` takes cuDNN where the installed cuDNN
// supports the call and Triad's kernel elsewhere; `cudnn` makes a call cuDNN
// does not take an error instead; `triad` never uses cuDNN. No CUDA here,
// so that tools parse the name without the toolkit.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_ATTENTIONKERNEL_H
#define TRIAD_RUNTIME_KERNELS_ATTENTIONKERNEL_H

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace triad::rt {

enum class AttentionKernel { Auto, Cudnn, Triad };

/// "auto", "cudnn" or "triad".
inline const char *attentionKernelName(AttentionKernel kernel) {
  switch (kernel) {
  case AttentionKernel::Auto:
    return "auto";
  case AttentionKernel::Cudnn:
    return "cudnn";
  case AttentionKernel::Triad:
    return "triad";
  }
  return "auto";
}

/// The choice named `name`, or InvalidArgument naming the choices.
inline absl::StatusOr<AttentionKernel>
parseAttentionKernel(absl::string_view name) {
  for (AttentionKernel kernel :
       {AttentionKernel::Auto, AttentionKernel::Cudnn, AttentionKernel::Triad})
    if (name == attentionKernelName(kernel))
      return kernel;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown attention kernel '", name, "' (expected auto, cudnn or triad)"));
}

} // namespace triad::rt

#endif // TRIAD_RUNTIME_KERNELS_ATTENTIONKERNEL_H
