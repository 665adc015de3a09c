//===- Tensor.h - dense float64 tensors of the reference interpreter -*- C++
//-*-===//
//
// The value type of the reference interpreter: a row-major array of doubles
// with a static shape. Integer tensors (token ids, labels) hold exact
// integers as doubles. Written for clarity, not speed.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_INTERPRETER_TENSOR_H
#define TRIAD_INTERPRETER_TENSOR_H

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace triad::interp {

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> data;

  Tensor() = default;
  /// A tensor of the given shape filled with `value`.
  explicit Tensor(std::vector<int64_t> shape, double value = 0.0);
  Tensor(std::vector<int64_t> shape, std::vector<double> data);
  /// A rank-0 tensor.
  static Tensor scalar(double value) { return Tensor({}, {value}); }

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numElements() const;
  int64_t dim(int64_t i) const { return shape[i]; }
  /// Row-major strides of the shape.
  std::vector<int64_t> strides() const;
  /// The shape written like MLIR's: "8x64x64" ("" for a scalar).
  std::string shapeString() const;
};

/// Product of `shape`.
int64_t numElements(llvm::ArrayRef<int64_t> shape);

} // namespace triad::interp

#endif // TRIAD_INTERPRETER_TENSOR_H
