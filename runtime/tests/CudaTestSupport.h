//===- CudaTestSupport.h - helpers of the CUDA kernel tests ------*- C++
//-*-===//
//
// What the tests of the CUDA kernels share: a fixture that skips without a
// GPU (with the message ctest's SKIP_REGULAR_EXPRESSION looks for, "no
// CUDA device on this machine") and otherwise creates a context, device
// copies of host vectors, outputs poisoned with NaN (so that an element a
// kernel fails to write fails the comparison), downloads that first check
// the context's error flags, and the element-wise comparison against the
// CPU kernels' results.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_TESTS_CUDATESTSUPPORT_H
#define TRIAD_RUNTIME_TESTS_CUDATESTSUPPORT_H

#include "runtime/kernels/cuda/CudaContext.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

/// Fails the test (and returns) unless `expr`, an absl::Status, is OK.
#define ASSERT_OK(expr)                                                        \
  do {                                                                         \
    absl::Status assertOkStatus_ = (expr);                                     \
    ASSERT_TRUE(assertOkStatus_.ok()) << #expr << ": " << assertOkStatus_;     \
  } while (false)

namespace triad::rt::cuda::test {

/// `n` normal deviates of standard deviation `scale`, from `seed`.
inline std::vector<float> randomFloats(size_t n, uint32_t seed,
                                       float scale = 1.0f) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(n);
  for (float &v : values)
    v = normal(generator);
  return values;
}

/// The largest magnitude in `values` (0 for none).
inline double maxAbs(const std::vector<float> &values) {
  double largest = 0.0;
  for (float v : values)
    largest = std::max(largest, std::fabs(static_cast<double>(v)));
  return largest;
}

/// Every element within rel * |want| + abs of `want` (NaN never is).
inline void expectNear(const std::vector<float> &got,
                       const std::vector<float> &want, double rel, double abs,
                       const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double error = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(error <= rel * std::fabs(want[i]) + abs)) {
      if (++bad <= 5)
        ADD_FAILURE() << what << ": element " << i << " is " << got[i]
                      << ", the CPU kernel's " << want[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements differ";
}

/// A fixture with a CUDA context; every test skips without a GPU.
class CudaTest : public ::testing::Test {
protected:
  void SetUp() override {
    absl::StatusOr<int> devices = deviceCount();
    ASSERT_TRUE(devices.ok()) << devices.status();
    if (*devices == 0)
      GTEST_SKIP() << "no CUDA device on this machine";
    absl::StatusOr<std::unique_ptr<CudaContext>> created =
        CudaContext::create(contextOptions());
    ASSERT_TRUE(created.ok()) << created.status();
    context = std::move(*created);
  }

  /// The options of the test's context (a fixture may change them).
  virtual ContextOptions contextOptions() const { return {}; }

  /// A device copy of `values`.
  template <typename T> DeviceBuffer upload(const std::vector<T> &values) {
    absl::StatusOr<DeviceBuffer> buffer =
        DeviceBuffer::allocate(values.size() * sizeof(T));
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (!buffer.ok())
      return {};
    absl::Status copied = context->copyToDevice(buffer->data(), values.data(),
                                                values.size() * sizeof(T));
    EXPECT_TRUE(copied.ok()) << copied;
    return std::move(*buffer);
  }

  /// `n` elements of `elementBytes` with every byte 0xff (NaN for floats)
  /// on the device.
  DeviceBuffer poisoned(size_t n, size_t elementBytes = sizeof(float)) {
    absl::StatusOr<DeviceBuffer> buffer =
        DeviceBuffer::allocate(n * elementBytes);
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (!buffer.ok())
      return {};
    EXPECT_EQ(cudaMemsetAsync(buffer->data(), 0xff, n * elementBytes,
                              context->stream()),
              cudaSuccess);
    return std::move(*buffer);
  }

  /// Waits for the kernels (their error flags must be clear) and copies
  /// `n` elements back.
  template <typename T = float>
  std::vector<T> download(const DeviceBuffer &buffer, size_t n) {
    std::vector<T> values(n);
    absl::Status synced = context->synchronize();
    EXPECT_TRUE(synced.ok()) << synced;
    absl::Status copied =
        context->copyToHost(values.data(), buffer.data(), n * sizeof(T));
    EXPECT_TRUE(copied.ok()) << copied;
    return values;
  }

  std::unique_ptr<CudaContext> context;
};

} // namespace triad::rt::cuda::test

#endif // TRIAD_RUNTIME_TESTS_CUDATESTSUPPORT_H
