//===- Bf16Products.h - bf16 matrix products on the CPU's bf16 units -*- C++
//-*-===//
//
// The CPU backend stores a 16-bit plan's values in 16 bits and runs its
// kernels in f32 on widened copies. For products of two bf16 operands
// that costs the f32 product plus the widening, where CPUs with bf16
// instructions (AVX512-BF16, AMX) multiply bf16 directly, 2 to 4 times
// faster than OpenBLAS's f32 product on the same cores. Debian's OpenBLAS
// has no bf16 product (no `sbgemm`); oneDNN's matmul has one, built here
// when libdnnl-dev is installed (runtime/CMakeLists.txt).
//
// The arithmetic is the widened kernel's: bf16 operands multiplied exactly
// (a product of two bf16 values fits f32), sums in f32, a bf16 result
// rounded once to nearest even. Only the order of the f32 sums differs, as
// it does between BLAS builds. oneDNN is not in this header.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_CPU_BF16PRODUCTS_H
#define TRIAD_RUNTIME_KERNELS_CPU_BF16PRODUCTS_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <memory>
#include <string>

namespace triad::rt::cpu {

/// Which kernel runs the CPU backend's products of bf16 operands.
enum class Bf16ProductKernel {
  /// oneDNN where this build has it and the CPU has bf16 instructions;
  /// OpenBLAS on widened copies otherwise.
  Auto,
  /// oneDNN, or an error when the build or the CPU lacks it.
  OneDnn,
  /// OpenBLAS's f32 product on widened copies (the reference).
  Blas,
};

/// "auto", "onednn" or "blas".
const char *bf16ProductKernelName(Bf16ProductKernel kernel);
/// The kernel named `name`, or InvalidArgument naming the choices.
absl::StatusOr<Bf16ProductKernel>
parseBf16ProductKernel(absl::string_view name);

/// Whether oneDNN's bf16 products run here: this build has oneDNN and the
/// CPU has bf16 instructions. When not, `whyNot` (if given) says why.
bool bf16ProductsAvailable(std::string *whyNot = nullptr);

/// One product c = op(a) op(b) of row-major bf16 matrices: `batch`
/// products of [m x k] by [k x n] (op transposes when asked; b is shared
/// by the batch unless `rhsBatched`), c in f32 or bf16.
struct Bf16ProductShape {
  int64_t batch, m, n, k;
  bool transposeA, transposeB, rhsBatched;
  bool resultBf16;
};

/// oneDNN's bf16 products, each shape's primitive made once and kept (a
/// plan has a few dozen shapes). One per executor: not thread-safe.
class Bf16Products {
public:
  /// The products, or FailedPrecondition when they cannot run here (see
  /// bf16ProductsAvailable).
  static absl::StatusOr<std::unique_ptr<Bf16Products>> create();
  ~Bf16Products();
  Bf16Products(const Bf16Products &) = delete;
  Bf16Products &operator=(const Bf16Products &) = delete;

  /// c = op(a) op(b); a, b and a bf16 c are bf16 bit patterns.
  absl::Status run(const Bf16ProductShape &shape, const uint16_t *a,
                   const uint16_t *b, void *c);

  /// How many shapes have their primitive (for tests).
  size_t cachedShapes() const;

private:
  Bf16Products();
  struct State;
  std::unique_ptr<State> state;
};

} // namespace triad::rt::cpu

#endif // TRIAD_RUNTIME_KERNELS_CPU_BF16PRODUCTS_H
