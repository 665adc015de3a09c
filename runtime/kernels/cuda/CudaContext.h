//===- CudaContext.h - device, stream and memory of the CUDA backend -*- C++
//-*-===//
//
// What every CUDA kernel of the runtime runs with: one device, one stream
// (every kernel and copy of a context is ordered on it), a cuBLASLt handle
// and its workspace, a growable scratch buffer for the kernels' partial
// results, and a word of error flags that kernels raise on data-dependent
// errors (a token id outside the vocabulary) for the host to read at its
// next check: a kernel cannot return a status, and checking after every
// launch would synchronize the stream.
//
// Nothing here needs nvcc: the host code compiles with the C++ compiler and
// links the CUDA runtime.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_CUDA_CUDACONTEXT_H
#define TRIAD_RUNTIME_KERNELS_CUDA_CUDACONTEXT_H

#include "runtime/kernels/AttentionKernel.h"
#include "runtime/kernels/GeluGradRoute.h"
#include "runtime/kernels/MatmulPrecision.h"
#include "runtime/kernels/cuda/ContentCache.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace triad::rt::cuda {

/// The GPUs the CUDA runtime sees: 0, not an error, when the machine has no
/// GPU or no driver; other failures are errors, a driver older than the
/// runtime among them (FailedPrecondition, naming both versions).
absl::StatusOr<int> deviceCount();

/// "13.0" for CUDA's version number 13000.
std::string cudaVersionName(int version);

/// The work the calling thread has enqueued on a GPU, by kind, counted
/// where each piece is issued: kernel launches (at their launch check,
/// launchStatus in CudaCheck.h, which every launch goes through),
/// cuBLASLt products, asynchronous copies and memsets, NCCL calls, and
/// launches of recorded calls (CUDA graphs; the work a recording holds is
/// not counted while it records: it is not issued then). The
/// counts are the thread's, not a context's: a launch check sees no
/// context, and an executor issues everything from the thread that runs
/// it, so the difference of total() across a call is the call's work.
struct IssueCounts {
  int64_t kernels = 0, matmuls = 0, copies = 0, ncclCalls = 0, graphs = 0;
  int64_t total() const {
    return kernels + matmuls + copies + ncclCalls + graphs;
  }
};
/// The calling thread's counts (never reset: read differences).
IssueCounts &issueCounts();

/// Device memory (cudaMalloc), freed when destroyed.
class DeviceBuffer {
public:
  static absl::StatusOr<DeviceBuffer> allocate(size_t bytes);

  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer &&other) noexcept { *this = std::move(other); }
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() { reset(); }

  void *data() const { return pointer; }
  template <typename T> T *as() const { return static_cast<T *>(pointer); }
  size_t size() const { return bytes; }
  void reset();

private:
  void *pointer = nullptr;
  size_t bytes = 0;
};

/// Data-dependent errors found on the device, one bit each.
enum ErrorFlag : uint32_t {
  kBadTokenId = 1u << 0,      // an embedding's id outside the vocabulary
  kBadLabel = 1u << 1,        // a cross entropy's label outside the vocabulary
  kBadPrefixLength = 1u << 2, // a prefix LM's prefix outside [0, keys]
};

struct ContextOptions {
  /// The CUDA device ordinal.
  int device = 0;
  /// How f32 matrix products compute: exactly (the default), or on tensor
  /// cores with TF32 or bf16 inputs, faster and no longer within 1e-5 of
  /// the CPU backend.
  MatmulPrecision matmulPrecision = MatmulPrecision::F32;
  /// What runs a 16-bit plan's attention and its gradient: cuDNN's fused
  /// attention where it takes the call (Auto), always (Cudnn: a call it
  /// does not take is an error) or never (Triad's own kernels, the
  /// default: cuDNN's gradient sums dq with atomics, so its results depend
  /// on timing, and it has yet to run on a GPU); see CudnnAttention.h.
  AttentionKernel attention = AttentionKernel::Triad;
  /// cuBLASLt's workspace (Hopper kernels want 32 MiB).
  size_t matmulWorkspaceBytes = size_t{32} << 20;
  /// Whether products run their bias, activation and gradient epilogues,
  /// and their adds to c or to an addend, in cuBLASLt where it takes them
  /// (false: always the product and then Triad's kernels, the path taken
  /// where cuBLASLt refuses one; for tests).
  bool fuseEpilogues = true;
  /// How a product with the tanh GELU's gradient epilogue runs where
  /// epilogues are fused (see MatmulOptions::biasGrad).
  GeluGradRoute geluGrad = GeluGradRoute::Fused;
  /// How many of cuBLASLt's algorithms for a product shape are tried: 1
  /// takes its heuristic's first; more times up to that many of them on
  /// the shape's first call and keeps the fastest (not while the stream
  /// records; a product that adds to c or to an addend is timed into a
  /// temporary of c's size). Timing picks by the clock, so two runs may
  /// choose differently, and their results then differ by the products'
  /// rounding.
  int matmulCandidates = 1;
};

class CudaContext {
public:
  /// Selects the device and creates the stream, the cuBLASLt handle and
  /// the buffers.
  static absl::StatusOr<std::unique_ptr<CudaContext>>
  create(const ContextOptions &options = {});
  ~CudaContext();
  CudaContext(const CudaContext &) = delete;
  CudaContext &operator=(const CudaContext &) = delete;

  const ContextOptions &options() const { return settings; }
  cudaStream_t stream() const { return cudaStream; }
  cublasLtHandle_t cublasLt() const { return cublasLtHandle; }
  void *matmulWorkspace() const { return workspace.data(); }
  size_t matmulWorkspaceBytes() const { return workspace.size(); }

  /// Device scratch of at least `bytes` (256-byte aligned). It stays valid
  /// for the work enqueued on the stream until the next call of scratch,
  /// which may replace it (stream-ordered, so earlier kernels still see the
  /// old one): a kernel entry point asks once and carves its pieces. While
  /// the stream records (CUDA graphs) it must not grow (a
  /// FailedPrecondition error, which refuses the recording); once
  /// recordings are held (holdForRecordings), a replaced one is kept
  /// until the context goes, for the recordings still read it.
  absl::StatusOr<void *> scratch(size_t bytes);

  /// A device copy of the `bytes` bytes at `host` that stays as long as
  /// the context (a table a kernel reads every step): uploaded the first
  /// time, then the same copy for the same content (ContentCache). A new
  /// copy while the stream records is a FailedPrecondition error (an
  /// upload from pageable memory cannot be recorded); once recordings are
  /// held, no copy is dropped for room.
  absl::StatusOr<const void *> resident(const void *host, size_t bytes);

  /// Whether work enqueued on the stream now is recorded (a CUDA graph's
  /// capture) rather than run.
  bool recording() const;
  /// From now on, keeps every device buffer a recorded call may read
  /// (scratch, resident copies) for the context's life: the executor
  /// calls it before its first recording.
  void holdForRecordings();

  /// The device words a recorded call reads its step and microbatch from
  /// (dropout's), and writes them on the stream (an asynchronous copy from
  /// pageable memory, staged before it returns, as the arguments are;
  /// nothing when they hold these values already).
  const uint64_t *callWords() const { return calls.as<uint64_t>(); }
  absl::Status setCall(uint64_t step, uint64_t microbatch);

  /// cuBLASLt's descriptors and chosen algorithm per product shape
  /// (CudaMatmul.cpp's, type-erased), kept for the context's life.
  ContentCache<std::shared_ptr<void>> &matmulPlans() { return productPlans; }

  /// The device word kernels raise ErrorFlag bits in (atomicOr).
  uint32_t *errorFlags() const { return flags.as<uint32_t>(); }

  /// Device f32s holding 1 and 0 for the context's life (cuBLASLt's
  /// scalars where they are device pointers).
  const float *one() const { return constants.as<float>(); }
  const float *zero() const { return constants.as<float>() + 1; }

  /// Waits for everything enqueued on the stream, then returns (and clears)
  /// the error flags raised since the last check as a status.
  absl::Status synchronize();

  /// Copies between host and device, ordered on the stream. The host side
  /// need not be pinned: copyToDevice may reuse its host buffer when it
  /// returns, and copyToHost returns once the data is on the host.
  absl::Status copyToDevice(void *device, const void *host, size_t bytes);
  absl::Status copyToHost(void *host, const void *device, size_t bytes);

private:
  CudaContext() = default;

  ContextOptions settings;
  cudaStream_t cudaStream = nullptr;
  cublasLtHandle_t cublasLtHandle = nullptr;
  DeviceBuffer workspace;
  DeviceBuffer flags;
  /// Stream-ordered (cudaMallocAsync) scratch, and those it replaced while
  /// recordings were held.
  void *scratchPointer = nullptr;
  size_t scratchBytes = 0;
  std::vector<void *> retiredScratch;
  bool holding = false;
  /// callWords() and what they hold (none before the first setCall).
  DeviceBuffer calls;
  std::optional<std::pair<uint64_t, uint64_t>> callHeld;
  /// one() and zero().
  DeviceBuffer constants;
  /// Pinned host word the flags are read into.
  uint32_t *hostFlags = nullptr;
  /// resident()'s copies (64 MiB at most).
  ContentCache<DeviceBuffer> residentCopies{size_t{64} << 20};
  /// matmulPlans(), by their keys' bytes (1 MiB of keys: some ten
  /// thousand shapes, more than a plan has).
  ContentCache<std::shared_ptr<void>> productPlans{size_t{1} << 20};
};

/// Rounds `bytes` up to the scratch alignment (256), for carving one
/// scratch allocation into pieces.
constexpr size_t alignScratch(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

} // namespace triad::rt::cuda

#endif // TRIAD_RUNTIME_KERNELS_CUDA_CUDACONTEXT_H
