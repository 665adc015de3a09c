//===- CudaContext.cpp - device, stream and memory of the CUDA backend ----===//

#include "runtime/kernels/cuda/CudaContext.h"

#include "runtime/kernels/cuda/CudaCheck.h"

#include "absl/strings/str_cat.h"

#include <algorithm>

namespace triad::rt::cuda {

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

absl::Status cudaStatus(cudaError_t error, const char *call) {
  if (error == cudaSuccess)
    return absl::OkStatus();
  std::string message = absl::StrCat(call, " failed: ", cudaGetErrorName(error),
                                     " (", cudaGetErrorString(error), ")");
  switch (error) {
  case cudaErrorMemoryAllocation:
    return absl::ResourceExhaustedError(message);
  case cudaErrorNoDevice:
  case cudaErrorInsufficientDriver:
    return absl::FailedPreconditionError(message);
  case cudaErrorInvalidValue:
  case cudaErrorInvalidConfiguration:
    return absl::InvalidArgumentError(message);
  default:
    return absl::InternalError(message);
  }
}

absl::Status cublasStatus(cublasStatus_t status, const char *call) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return absl::OkStatus();
  std::string message =
      absl::StrCat(call, " failed: ", cublasLtGetStatusName(status), " (",
                   cublasLtGetStatusString(status), ")");
  switch (status) {
  case CUBLAS_STATUS_ALLOC_FAILED:
    return absl::ResourceExhaustedError(message);
  case CUBLAS_STATUS_INVALID_VALUE:
    return absl::InvalidArgumentError(message);
  case CUBLAS_STATUS_NOT_SUPPORTED:
  case CUBLAS_STATUS_ARCH_MISMATCH:
    return absl::UnimplementedError(message);
  default:
    return absl::InternalError(message);
  }
}

IssueCounts &issueCounts() {
  thread_local IssueCounts counts;
  return counts;
}

absl::Status launchStatus(const char *kernel) {
  ++issueCounts().kernels;
  cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess)
    return absl::OkStatus();
  return cudaStatus(error, absl::StrCat("the launch of ", kernel).c_str());
}

std::string cudaVersionName(int version) {
  return absl::StrCat(version / 1000, ".", version % 1000 / 10);
}

absl::StatusOr<int> deviceCount() {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaErrorInsufficientDriver) {
    cudaGetLastError();
    // No driver at all (its version reads 0) is a machine without a GPU; a
    // driver older than the runtime is not, and says what to do.
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    if (driver == 0)
      return 0;
    return absl::FailedPreconditionError(absl::StrCat(
        "the NVIDIA driver supports CUDA up to ", cudaVersionName(driver),
        ", older than the CUDA runtime ", cudaVersionName(runtime),
        " Triad was built with: update the driver, or build Triad with a "
        "CUDA toolkit no newer than ",
        cudaVersionName(driver)));
  }
  if (error == cudaErrorNoDevice) {
    // Clear the sticky "last error" for later launches.
    cudaGetLastError();
    return 0;
  }
  TRIAD_CUDA_RETURN_IF_ERROR(error);
  return count;
}

//===----------------------------------------------------------------------===//
// DeviceBuffer
//===----------------------------------------------------------------------===//

absl::StatusOr<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  DeviceBuffer buffer;
  if (bytes == 0)
    return buffer;
  TRIAD_CUDA_RETURN_IF_ERROR(cudaMalloc(&buffer.pointer, bytes));
  buffer.bytes = bytes;
  return buffer;
}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    reset();
    pointer = other.pointer;
    bytes = other.bytes;
    other.pointer = nullptr;
    other.bytes = 0;
  }
  return *this;
}

void DeviceBuffer::reset() {
  // A destructor cannot report: cudaFree fails only on a broken context,
  // which the next checked call reports.
  if (pointer)
    cudaFree(pointer);
  pointer = nullptr;
  bytes = 0;
}

//===----------------------------------------------------------------------===//
// CudaContext
//===----------------------------------------------------------------------===//

absl::StatusOr<std::unique_ptr<CudaContext>>
CudaContext::create(const ContextOptions &options) {
  absl::StatusOr<int> devices = deviceCount();
  if (!devices.ok())
    return devices.status();
  if (options.device < 0 || options.device >= *devices)
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", options.device, " does not exist: ",
        *devices == 0
            ? "this machine has no GPU"
            : absl::StrCat("this machine has ", *devices, " GPU(s)")));
  std::unique_ptr<CudaContext> context(new CudaContext());
  context->settings = options;
  TRIAD_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  TRIAD_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&context->cudaStream, cudaStreamNonBlocking));
  TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&context->cublasLtHandle));
  absl::StatusOr<DeviceBuffer> workspace =
      DeviceBuffer::allocate(options.matmulWorkspaceBytes);
  if (!workspace.ok())
    return workspace.status();
  context->workspace = std::move(*workspace);
  absl::StatusOr<DeviceBuffer> flags = DeviceBuffer::allocate(sizeof(uint32_t));
  if (!flags.ok())
    return flags.status();
  context->flags = std::move(*flags);
  absl::StatusOr<DeviceBuffer> calls =
      DeviceBuffer::allocate(2 * sizeof(uint64_t));
  if (!calls.ok())
    return calls.status();
  context->calls = std::move(*calls);
  absl::StatusOr<DeviceBuffer> constants =
      DeviceBuffer::allocate(2 * sizeof(float));
  if (!constants.ok())
    return constants.status();
  context->constants = std::move(*constants);
  static const float kConstants[2] = {1.0f, 0.0f};
  TRIAD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(context->constants.data(), kConstants, sizeof(kConstants),
                      cudaMemcpyHostToDevice, context->cudaStream));
  // On the work stream, which does not wait for the legacy default one.
  TRIAD_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      context->flags.data(), 0, sizeof(uint32_t), context->cudaStream));
  TRIAD_CUDA_RETURN_IF_ERROR(cudaMallocHost(
      reinterpret_cast<void **>(&context->hostFlags), sizeof(uint32_t)));
  return context;
}

CudaContext::~CudaContext() {
  // Nothing may be in flight on memory freed below.
  if (cudaStream)
    cudaStreamSynchronize(cudaStream);
  if (scratchPointer)
    cudaFree(scratchPointer);
  for (void *retired : retiredScratch)
    cudaFree(retired);
  workspace.reset();
  flags.reset();
  if (hostFlags)
    cudaFreeHost(hostFlags);
  if (cublasLtHandle)
    cublasLtDestroy(cublasLtHandle);
  if (cudaStream)
    cudaStreamDestroy(cudaStream);
}

absl::StatusOr<void *> CudaContext::scratch(size_t bytes) {
  bytes = alignScratch(bytes == 0 ? 1 : bytes);
  if (bytes <= scratchBytes)
    return scratchPointer;
  // Grow by at least half again, so that a run of growing requests
  // allocates a few times, not every time.
  if (recording())
    return absl::FailedPreconditionError(
        absl::StrCat("the kernels' scratch would grow to ", bytes,
                     " bytes while a call is recorded"));
  size_t grown = alignScratch(std::max(bytes, scratchBytes + scratchBytes / 2));
  // Recordings hold the address of the one it replaces.
  if (scratchPointer && holding)
    retiredScratch.push_back(scratchPointer);
  else if (scratchPointer)
    TRIAD_CUDA_RETURN_IF_ERROR(cudaFreeAsync(scratchPointer, cudaStream));
  scratchPointer = nullptr;
  scratchBytes = 0;
  TRIAD_CUDA_RETURN_IF_ERROR(
      cudaMallocAsync(&scratchPointer, grown, cudaStream));
  scratchBytes = grown;
  return scratchPointer;
}

absl::StatusOr<const void *> CudaContext::resident(const void *host,
                                                   size_t bytes) {
  absl::StatusOr<const DeviceBuffer *> copy = residentCopies.get(
      host, bytes,
      [&](const void *data, size_t size) -> absl::StatusOr<DeviceBuffer> {
        if (recording())
          return absl::FailedPreconditionError(
              "a device table would be uploaded while a call is recorded");
        absl::StatusOr<DeviceBuffer> buffer =
            DeviceBuffer::allocate(std::max<size_t>(size, 1));
        if (!buffer.ok())
          return buffer.status();
        // Once per table, on the work stream: a plain cudaMemcpy runs on
        // the legacy default stream, which the (non-blocking) work stream
        // does not wait for, and from pageable memory it may return before
        // the data has arrived, so the first kernel could read part of an
        // old table. Pageable sources are staged, so `data` may go when
        // this returns.
        ++issueCounts().copies;
        TRIAD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
            buffer->data(), data, size, cudaMemcpyHostToDevice, cudaStream));
        return buffer;
      },
      [&]() -> absl::Status {
        // Kernels enqueued earlier may still read the copies.
        TRIAD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cudaStream));
        return absl::OkStatus();
      });
  if (!copy.ok())
    return copy.status();
  return (*copy)->data();
}

bool CudaContext::recording() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(cudaStream, &status) == cudaSuccess &&
         status != cudaStreamCaptureStatusNone;
}

void CudaContext::holdForRecordings() {
  holding = true;
  residentCopies.keepAll();
}

absl::Status CudaContext::setCall(uint64_t step, uint64_t microbatch) {
  if (callHeld == std::pair{step, microbatch})
    return absl::OkStatus();
  // Pageable: staged before the copy returns, so the words may go.
  const uint64_t words[2] = {step, microbatch};
  if (absl::Status status = copyToDevice(calls.data(), words, sizeof(words));
      !status.ok())
    return status;
  callHeld = std::pair{step, microbatch};
  return absl::OkStatus();
}

absl::Status CudaContext::synchronize() {
  issueCounts().copies += 2;
  TRIAD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(hostFlags, flags.data(), sizeof(uint32_t),
                      cudaMemcpyDeviceToHost, cudaStream));
  TRIAD_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(flags.data(), 0, sizeof(uint32_t), cudaStream));
  TRIAD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cudaStream));
  uint32_t raised = *hostFlags;
  if (raised & kBadTokenId)
    return absl::InvalidArgumentError("a token id is outside the vocabulary");
  if (raised & kBadLabel)
    return absl::InvalidArgumentError("a label is outside the vocabulary");
  if (raised & kBadPrefixLength)
    return absl::InvalidArgumentError(
        "a prefix length is outside [0, the attention's key sequence]");
  return absl::OkStatus();
}

absl::Status CudaContext::copyToDevice(void *device, const void *host,
                                       size_t bytes) {
  ++issueCounts().copies;
  TRIAD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, cudaStream));
  return absl::OkStatus();
}

absl::Status CudaContext::copyToHost(void *host, const void *device,
                                     size_t bytes) {
  ++issueCounts().copies;
  TRIAD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, cudaStream));
  TRIAD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cudaStream));
  return absl::OkStatus();
}

} // namespace triad::rt::cuda
