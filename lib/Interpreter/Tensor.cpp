//===- Tensor.cpp - dense float64 tensors ---------------------------------===//

#include "triad/Interpreter/Tensor.h"

#include <cassert>

namespace triad::interp {

int64_t numElements(llvm::ArrayRef<int64_t> shape) {
  int64_t count = 1;
  for (int64_t size : shape)
    count *= size;
  return count;
}

Tensor::Tensor(std::vector<int64_t> shape, double value)
    : shape(std::move(shape)),
      data(static_cast<size_t>(interp::numElements(this->shape)), value) {}

Tensor::Tensor(std::vector<int64_t> shape, std::vector<double> values)
    : shape(std::move(shape)), data(std::move(values)) {
  assert(static_cast<int64_t>(data.size()) == interp::numElements(shape) &&
         "data does not fill the shape");
}

int64_t Tensor::numElements() const { return interp::numElements(shape); }

std::vector<int64_t> Tensor::strides() const {
  std::vector<int64_t> result(shape.size(), 1);
  for (int64_t i = rank() - 2; i >= 0; --i)
    result[i] = result[i + 1] * shape[i + 1];
  return result;
}

std::string Tensor::shapeString() const {
  std::string result;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      result += "x";
    result += std::to_string(shape[i]);
  }
  return result;
}

} // namespace triad::interp
