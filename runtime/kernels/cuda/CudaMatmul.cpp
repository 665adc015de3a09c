//===- CudaMatmul.cpp - matrix products through cuBLASLt ------------------===//
//
// cuBLAS is column-major and the plan's tensors are row-major. A row-major
// [r x c] matrix is the column-major [c x r] matrix of the same bytes, its
// transpose, so the row-major c = op(a) op(b) is computed as the
// column-major c^T = op(b)^T op(a)^T: cuBLASLt's "A" is our b and its "B"
// our a, each with its own transpose flag, and the result is [n x m]
// column-major, which is c row-major. A bias of n values is then a vector
// over the rows of cuBLASLt's result, as its bias epilogues want, and the
// GELU's input it keeps (its auxiliary output) has c's layout, n apart, as
// has the GELU's input its gradient epilogue reads (its auxiliary input);
// the bias gradient is the matching sum over cuBLASLt's columns (our rows).
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cuda/CudaCheck.h"
#include "runtime/kernels/cuda/CudaKernels.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace triad::rt::cuda {

namespace {

struct OperationDeleter {
  void operator()(cublasLtMatmulDesc_t d) const {
    cublasLtMatmulDescDestroy(d);
  }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayout_t l) const {
    cublasLtMatrixLayoutDestroy(l);
  }
};
struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreference_t p) const {
    cublasLtMatmulPreferenceDestroy(p);
  }
};
using Operation = std::unique_ptr<cublasLtMatmulDescOpaque_t, OperationDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using Preference =
    std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDeleter>;

cudaDataType_t cudaType(DType type) {
  switch (type) {
  case DType::F32:
    return CUDA_R_32F;
  case DType::BF16:
    return CUDA_R_16BF;
  case DType::F16:
    return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

int64_t elementBytes(DType type) { return type == DType::F32 ? 4 : 2; }

/// The largest power of two up to 256 that divides the address.
uint32_t alignmentOf(const void *pointer) {
  auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0)
    alignment /= 2;
  return alignment;
}

/// A column-major [rows x cols] layout, `batch` matrices `stride` elements
/// apart.
absl::StatusOr<Layout> makeLayout(DType type, int64_t rows, int64_t cols,
                                  int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t raw = nullptr;
  TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(
      &raw, cudaType(type), static_cast<uint64_t>(rows),
      static_cast<uint64_t>(cols), rows));
  Layout layout(raw);
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(
        raw, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(
        raw, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
        sizeof(stride)));
  }
  return layout;
}

/// What decides a product's descriptors and algorithm (every byte set: it
/// is the plan cache's key).
struct ProductKey {
  int32_t compute, opA, opB, epilogue, inputType, outputType, biasType;
  /// Whether cuBLASLt writes the GELU's input (GELU_AUX_BIAS) or reads it
  /// (DGELU).
  int32_t auxiliary;
  /// Whether the gradient epilogue writes the bias gradient (DGELU_BGRAD).
  int32_t biasGradient;
  /// Whether alpha and beta are device pointers (a weighted accumulate).
  int32_t deviceScalars;
  /// Whether the product adds to c or to an addend (beta 1): such a
  /// product cuBLASLt has no algorithm for runs as the plain product and
  /// kernels (unfusedAdding), so its refusal is kept like an epilogue's.
  int32_t adds;
  /// Zero: the key is compared as bytes, so it has no padding.
  int32_t unused;
  int64_t m, n, k, batch, bStride;
  /// Of our b, a, c (twice: C and D), the bias (or bias gradient) and the
  /// auxiliary operand.
  uint32_t alignments[6];
  uint64_t workspaceBytes;
};
static_assert(sizeof(ProductKey) == 12 * 4 + 5 * 8 + 6 * 4 + 8,
              "ProductKey has padding, which its byte comparison would read");

/// cuBLASLt's descriptors of one product shape and the algorithm its
/// heuristic chose, kept for the context's life (CudaContext::matmulPlans):
/// building them and running the heuristic cost more than the product
/// itself for the plan's small shapes. The bias and auxiliary pointers are
/// set per call (the heuristic saw pointers of the key's alignments). A
/// product with an epilogue cuBLASLt refused keeps why instead, so that
/// later calls go to the kernels at once.
struct ProductPlan {
  Operation operation;
  Layout a, b, c;
  cublasLtMatmulAlgo_t algo = {};
  std::optional<std::string> refusal;
};

/// Whether `status`, of a cuBLASLt call on a product with an epilogue or
/// one that adds, is cuBLASLt refusing the combination (not supported, or
/// an invalid value: how it rejects a type it does not take) rather than a
/// failure: such a product has the kernels to fall back on.
bool refused(const ProductKey &key, const absl::Status &status) {
  return (key.epilogue != static_cast<int32_t>(Epilogue::None) || key.adds) &&
         (absl::IsUnimplemented(status) || absl::IsInvalidArgument(status));
}

/// Why a product falls back on the kernels, kept in its plan.
std::string refusal(const ProductKey &key, const absl::Status &status) {
  return absl::StrCat("cuBLASLt refuses the ",
                      key.epilogue != static_cast<int32_t>(Epilogue::None)
                          ? "epilogue"
                          : "product that adds",
                      ": ", status.message());
}

/// Device memory for the kernels of one call, stream-ordered: allocated on
/// the stream, freed on it after them.
struct Temporary {
  cudaStream_t stream;
  void *data = nullptr;
  ~Temporary() {
    if (data)
      cudaFreeAsync(data, stream);
  }
};

/// A CUDA event, destroyed with it.
struct Event {
  cudaEvent_t event = nullptr;
  Event() { cudaEventCreate(&event); }
  ~Event() {
    if (event)
      cudaEventDestroy(event);
  }
  Event(const Event &) = delete;
  Event &operator=(const Event &) = delete;
};

/// Of cuBLASLt's `found` candidate algorithms for `plan`'s product (its
/// descriptors built, its bias and auxiliary pointers set), the index of
/// the fastest on the context's stream: each runs once, then three times
/// between two events, computing the plain product (alpha 1, beta 0, as
/// device scalars where `deviceScalars`) into `out` (c, or a temporary
/// of c's size where the real call adds to c). Candidates that fail
/// to run are passed over; none running is the first one's error. The
/// runs write `out` (and the epilogue's outputs), which the caller's call
/// then writes again.
absl::StatusOr<int>
fastestCandidate(CudaContext &context, const ProductPlan &plan,
                 const cublasLtMatmulHeuristicResult_t *candidates, int found,
                 const void *a, const void *b, void *out, uint64_t workspace,
                 bool deviceScalars) {
  Event begin, end;
  if (!begin.event || !end.event)
    return absl::InternalError("matmul: could not create CUDA events to time "
                               "cuBLASLt's algorithms");
  float one = 1.0f, zero = 0.0f;
  const void *alpha =
      deviceScalars ? static_cast<const void *>(context.one()) : &one;
  const void *beta =
      deviceScalars ? static_cast<const void *>(context.zero()) : &zero;
  auto run = [&](int i) {
    return cublasStatus(
        cublasLtMatmul(context.cublasLt(), plan.operation.get(), alpha, b,
                       plan.a.get(), a, plan.b.get(), beta, out, plan.c.get(),
                       out, plan.c.get(), &candidates[i].algo,
                       context.matmulWorkspace(), workspace, context.stream()),
        "cublasLtMatmul");
  };
  int best = -1;
  float bestMs = 0;
  absl::Status firstError = absl::OkStatus();
  for (int i = 0; i < found; ++i) {
    if (candidates[i].state != CUBLAS_STATUS_SUCCESS ||
        candidates[i].workspaceSize > workspace)
      continue;
    absl::Status status = run(i);
    if (status.ok() &&
        cudaEventRecord(begin.event, context.stream()) != cudaSuccess)
      status = absl::InternalError("matmul: cudaEventRecord failed");
    for (int repeat = 0; repeat < 3 && status.ok(); ++repeat)
      status = run(i);
    float ms = 0;
    if (status.ok() &&
        (cudaEventRecord(end.event, context.stream()) != cudaSuccess ||
         cudaEventSynchronize(end.event) != cudaSuccess ||
         cudaEventElapsedTime(&ms, begin.event, end.event) != cudaSuccess))
      status = absl::InternalError(
          absl::StrCat("matmul: timing cuBLASLt's algorithms: ",
                       cudaGetErrorString(cudaGetLastError())));
    if (!status.ok()) {
      // (Whatever the candidate left pending is its, not the next
      // kernel's.)
      cudaGetLastError();
      if (firstError.ok())
        firstError = status;
      continue;
    }
    if (best < 0 || ms < bestMs) {
      best = i;
      bestMs = ms;
    }
  }
  if (best < 0)
    return firstError.ok() ? absl::UnimplementedError(
                                 "matmul: no algorithm of cuBLASLt's ran")
                           : firstError;
  return best;
}

absl::StatusOr<ProductPlan> makePlan(CudaContext &context,
                                     const ProductKey &key,
                                     const MatmulOptions &options,
                                     bool transposeA, bool transposeB,
                                     const void *a, const void *b, void *c) {
  int64_t m = key.m, n = key.n, k = key.k, batch = key.batch;
  ProductPlan plan;
  cublasLtMatmulDesc_t rawOperation = nullptr;
  TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(
      &rawOperation, static_cast<cublasComputeType_t>(key.compute),
      CUDA_R_32F));
  plan.operation.reset(rawOperation);
  // cuBLASLt's A is our b, its B our a (see the file comment).
  cublasOperation_t opA = transposeB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = transposeA ? CUBLAS_OP_T : CUBLAS_OP_N;
  TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      rawOperation, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
  TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      rawOperation, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
  if (key.deviceScalars) {
    cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_DEVICE;
    TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        rawOperation, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof(mode)));
  }
  if (options.epilogue != Epilogue::None) {
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    switch (options.epilogue) {
    case Epilogue::None:
    case Epilogue::Bias:
      break;
    case Epilogue::ReluBias:
      epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
      break;
    case Epilogue::GeluTanhBias:
      epilogue = key.auxiliary ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                               : CUBLASLT_EPILOGUE_GELU_BIAS;
      break;
    case Epilogue::GeluTanhGrad:
      epilogue = key.biasGradient ? CUBLASLT_EPILOGUE_DGELU_BGRAD
                                  : CUBLASLT_EPILOGUE_DGELU;
      break;
    }
    TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        rawOperation, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
        sizeof(epilogue)));
    // cuBLASLt's bias (and bias gradient) defaults to the output's type; a
    // 16-bit product may add an f32 bias or write an f32 bias gradient
    // (rounding once, after the sum).
    bool gradient = options.epilogue == Epilogue::GeluTanhGrad;
    if (!gradient || key.biasGradient) {
      cudaDataType_t biasType = cudaType(static_cast<DType>(key.biasType));
      const void *vector = gradient ? options.biasGrad : options.bias;
      TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
          rawOperation, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &biasType,
          sizeof(biasType)));
      TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
          rawOperation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector,
          sizeof(vector)));
    }
    if (key.auxiliary) {
      // The GELU's input in c's layout and type (the auxiliary operand's
      // default type is the output's), written by GELU_AUX_BIAS, read by
      // DGELU.
      const void *aux =
          gradient ? options.activationInput : options.preActivation;
      int64_t leading = n, stride = m * n;
      TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
          rawOperation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
          sizeof(aux)));
      TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
          rawOperation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &leading,
          sizeof(leading)));
      if (batch > 1)
        TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
            rawOperation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE,
            &stride, sizeof(stride)));
    }
  }
  // Stored shapes, column-major: our b is [n x k] (or [k x n] transposed),
  // our a [k x m] (or [m x k]), c [n x m].
  absl::StatusOr<Layout> layoutA =
      makeLayout(options.inputType, transposeB ? k : n, transposeB ? n : k,
                 batch, key.bStride);
  absl::StatusOr<Layout> layoutB = makeLayout(
      options.inputType, transposeA ? m : k, transposeA ? k : m, batch, m * k);
  absl::StatusOr<Layout> layoutC =
      makeLayout(options.outputType, n, m, batch, m * n);
  for (const auto *layout : {&layoutA, &layoutB, &layoutC})
    if (!layout->ok())
      return layout->status();
  plan.a = std::move(*layoutA);
  plan.b = std::move(*layoutB);
  plan.c = std::move(*layoutC);

  cublasLtMatmulPreference_t rawPreference = nullptr;
  TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&rawPreference));
  Preference preference(rawPreference);
  uint64_t workspaceBytes = key.workspaceBytes;
  TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      rawPreference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspaceBytes,
      sizeof(workspaceBytes)));
  // The arena's offsets need not be 256-byte aligned: tell the heuristic
  // what the pointers allow (A is our b, B our a, C and D our c).
  const cublasLtMatmulPreferenceAttributes_t alignments[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) {
    uint32_t bytes = key.alignments[i];
    TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        rawPreference, alignments[i], &bytes, sizeof(bytes)));
  }

  // The heuristic's first algorithm, or the fastest of its first few
  // (ContextOptions::matmulCandidates) where they may be timed: not while
  // the stream records.
  bool timed = context.options().matmulCandidates > 1 && !context.recording();
  std::vector<cublasLtMatmulHeuristicResult_t> candidates(
      timed ? context.options().matmulCandidates : 1);
  int found = 0;
  if (absl::Status status = cublasStatus(
          cublasLtMatmulAlgoGetHeuristic(
              context.cublasLt(), rawOperation, plan.a.get(), plan.b.get(),
              plan.c.get(), plan.c.get(), rawPreference,
              static_cast<int>(candidates.size()), candidates.data(), &found),
          "cublasLtMatmulAlgoGetHeuristic");
      !status.ok())
    return status;
  // (Each result has a state; only the successful ones are algorithms.)
  auto usable = std::find_if(
      candidates.begin(), candidates.begin() + found,
      [](const auto &result) { return result.state == CUBLAS_STATUS_SUCCESS; });
  if (usable == candidates.begin() + found)
    return absl::UnimplementedError(
        absl::StrCat("cuBLASLt has no algorithm for a ", m, "x", k, " by ", k,
                     "x", n, " product (batch ", batch, ")"));
  plan.algo = usable->algo;
  if (timed && found > 1) {
    // A product that adds to c, or to an addend (which may be c's very
    // bytes), is timed into a stream-ordered temporary, leaving them as
    // they are (not into the context's scratch, which would keep the size
    // for good: a large vocabulary's weight gradient is hundreds of
    // megabytes). Timing is optional: without the memory for it, the
    // heuristic's first algorithm stands.
    void *out = c;
    Temporary apart{context.stream()};
    if (options.accumulate || options.addend) {
      if (cudaMallocAsync(&apart.data,
                          static_cast<size_t>(batch * m * n *
                                              elementBytes(options.outputType)),
                          context.stream()) != cudaSuccess) {
        cudaGetLastError();
        apart.data = nullptr;
        return plan;
      }
      out = apart.data;
    }
    absl::StatusOr<int> fastest =
        fastestCandidate(context, plan, candidates.data(), found, a, b, out,
                         workspaceBytes, key.deviceScalars != 0);
    if (!fastest.ok())
      return fastest.status();
    plan.algo = candidates[*fastest].algo;
  }
  return plan;
}

/// One cuBLASLt call: `batch` products, b's stride `bStride` elements.
absl::Status product(CudaContext &context, const void *a, const void *b,
                     void *c, int64_t batch, int64_t m, int64_t n, int64_t k,
                     bool transposeA, bool transposeB, int64_t bStride,
                     const MatmulOptions &options) {
  // f32 operands may be rounded to TF32 or bf16 on the way into tensor
  // cores (cuBLAS's "fast" compute types); 16-bit ones always use them.
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (options.inputType == DType::F32)
    switch (context.options().matmulPrecision) {
    case MatmulPrecision::F32:
      break;
    case MatmulPrecision::Tf32:
      compute = CUBLAS_COMPUTE_32F_FAST_TF32;
      break;
    case MatmulPrecision::Bf16:
      compute = CUBLAS_COMPUTE_32F_FAST_16BF;
      break;
    }
  ProductKey key;
  std::memset(&key, 0, sizeof(key));
  key.compute = static_cast<int32_t>(compute);
  key.opA = transposeA;
  key.opB = transposeB;
  key.epilogue = static_cast<int32_t>(options.epilogue);
  key.inputType = static_cast<int32_t>(options.inputType);
  key.outputType = static_cast<int32_t>(options.outputType);
  // cuBLASLt's bias pointer: the bias, or the bias gradient it writes; its
  // auxiliary pointer: the GELU's input it writes, or the one it reads.
  bool gradient = options.epilogue == Epilogue::GeluTanhGrad;
  const void *vector = gradient ? options.biasGrad : options.bias;
  const void *aux = gradient ? options.activationInput : options.preActivation;
  key.biasType = vector ? static_cast<int32_t>(gradient ? options.biasGradType
                                                        : options.biasType)
                        : 0;
  key.auxiliary = aux != nullptr;
  key.biasGradient = gradient && vector != nullptr;
  key.deviceScalars = options.weight != nullptr;
  key.adds = options.accumulate || options.addend;
  key.m = m;
  key.n = n;
  key.k = k;
  key.batch = batch;
  key.bStride = batch > 1 ? bStride : 0;
  const void *pointers[] = {b, a,      options.addend ? options.addend : c,
                            c, vector, aux};
  for (int i = 0; i < 6; ++i)
    key.alignments[i] = pointers[i] ? alignmentOf(pointers[i]) : 0;
  key.workspaceBytes = context.matmulWorkspaceBytes();
  absl::StatusOr<const std::shared_ptr<void> *> cached =
      context.matmulPlans().get(
          &key, sizeof(key),
          [&](const void *, size_t) -> absl::StatusOr<std::shared_ptr<void>> {
            absl::StatusOr<ProductPlan> plan = makePlan(
                context, key, options, transposeA, transposeB, a, b, c);
            if (!plan.ok() && !refused(key, plan.status()))
              return plan.status();
            if (!plan.ok()) {
              ProductPlan kept;
              kept.refusal = refusal(key, plan.status());
              return std::shared_ptr<void>(
                  std::make_shared<ProductPlan>(std::move(kept)));
            }
            return std::shared_ptr<void>(
                std::make_shared<ProductPlan>(std::move(*plan)));
          },
          // Descriptors are host objects no enqueued work reads.
          [] { return absl::OkStatus(); });
  if (!cached.ok())
    return cached.status();
  ProductPlan &plan = *static_cast<ProductPlan *>((*cached)->get());
  if (plan.refusal)
    return absl::UnimplementedError(*plan.refusal);
  if (vector)
    TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.operation.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector,
        sizeof(vector)));
  if (aux)
    TRIAD_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.operation.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
        sizeof(aux)));
  // Host scalars, or device ones: the weight, and 1 (accumulate). C is c
  // (read where it accumulates), or the addend.
  float alpha = 1.0f, beta = options.accumulate || options.addend ? 1.0f : 0.0f;
  const void *alphaPointer = &alpha, *betaPointer = &beta;
  if (options.weight) {
    alphaPointer = options.weight;
    betaPointer = context.one();
  }
  const void *addend = options.addend ? options.addend : c;
  absl::Status ran = cublasStatus(
      cublasLtMatmul(context.cublasLt(), plan.operation.get(), alphaPointer, b,
                     plan.a.get(), a, plan.b.get(), betaPointer, addend,
                     plan.c.get(), c, plan.c.get(), &plan.algo,
                     context.matmulWorkspace(), key.workspaceBytes,
                     context.stream()),
      "cublasLtMatmul");
  if (refused(key, ran)) {
    // A type it does not take shows only here (an invalid value).
    plan.refusal = refusal(key, ran);
    return absl::UnimplementedError(*plan.refusal);
  }
  if (ran.ok())
    ++issueCounts().matmuls;
  return ran;
}

/// Whether `shape`'s products take one cuBLASLt call per batch element: a
/// transposed lhs over a shared rhs, whose blocks do not stack.
bool splitsPerBatch(const MatmulShape &shape) {
  return shape.batch > 1 && !shape.rhsBatched && shape.transposeA;
}

/// The products of `shape` with `options` as they are (one cuBLASLt call,
/// or one per batch element where a transposed lhs does not stack).
absl::Status products(CudaContext &context, const void *a, const void *b,
                      void *c, const MatmulShape &shape,
                      const MatmulOptions &options) {
  int64_t batch = shape.batch, m = shape.m;
  if (shape.rhsBatched || batch == 1)
    return product(context, a, b, c, batch, m, shape.n, shape.k,
                   shape.transposeA, shape.transposeB, shape.k * shape.n,
                   options);
  if (!splitsPerBatch(shape))
    // A shared rhs: one product of the stacked rows (as the CPU kernel).
    return product(context, a, b, c, 1, m * batch, shape.n, shape.k, false,
                   shape.transposeB, 0, options);
  // Transposed lhs blocks do not stack: one product per batch element.
  int64_t aBytes = m * shape.k * elementBytes(options.inputType);
  int64_t cBytes = m * shape.n * elementBytes(options.outputType);
  MatmulOptions piece = options;
  for (int64_t i = 0; i < batch; ++i) {
    if (options.preActivation)
      piece.preActivation =
          static_cast<char *>(options.preActivation) + i * cBytes;
    if (options.activationInput)
      piece.activationInput =
          static_cast<const char *>(options.activationInput) + i * cBytes;
    if (options.addend)
      piece.addend = static_cast<const char *>(options.addend) + i * cBytes;
    if (absl::Status status =
            product(context, static_cast<const char *>(a) + i * aBytes, b,
                    static_cast<char *>(c) + i * cBytes, 1, m, shape.n, shape.k,
                    true, shape.transposeB, 0, piece);
        !status.ok())
      return status;
  }
  return absl::OkStatus();
}

/// The products of `shape` with `options` (no epilogue, not adding) into
/// `out`: zeros where k is 0, as the CPU's product.
absl::Status plainProducts(CudaContext &context, const void *a, const void *b,
                           void *out, const MatmulShape &shape,
                           const MatmulOptions &options) {
  if (shape.k > 0)
    return products(context, a, b, out, shape, options);
  ++issueCounts().copies;
  TRIAD_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(out, 0,
                      static_cast<size_t>(shape.batch * shape.m * shape.n *
                                          elementBytes(options.outputType)),
                      context.stream()));
  return absl::OkStatus();
}

/// A product that adds, as the plain product in f32 (a temporary) and a
/// kernel after it, c rounded once: c += weight * product (accumulate; 1
/// without a weight), or c = product + addend.
absl::Status unfusedAdding(CudaContext &context, const void *a, const void *b,
                           void *c, const MatmulShape &shape,
                           const MatmulOptions &options) {
  int64_t count = shape.batch * shape.m * shape.n;
  MatmulOptions plain = options;
  plain.accumulate = false;
  plain.weight = nullptr;
  plain.addend = nullptr;
  plain.outputType = DType::F32;
  Temporary wide{context.stream()};
  TRIAD_CUDA_RETURN_IF_ERROR(cudaMallocAsync(
      &wide.data, static_cast<size_t>(count) * 4, context.stream()));
  if (absl::Status status =
          plainProducts(context, a, b, wide.data, shape, plain);
      !status.ok())
    return status;
  Operand product{wide.data, DType::F32};
  Result out{c, options.outputType};
  if (options.accumulate)
    return accumulate(context, out, product,
                      options.weight ? options.weight : context.one(), count);
  return addBroadcast(context, product,
                      Operand{options.addend, options.outputType}, out, count,
                      count);
}

/// A forward epilogue as the product and kernels: the product in f32 (c
/// itself when c is f32, else a temporary), then the bias and the
/// activation added to it and c rounded once, as cuBLASLt's epilogue does;
/// with a pre-activation kept, the biased product goes there in c's type
/// and the activation reads it back.
absl::Status unfusedForward(CudaContext &context, const void *a, const void *b,
                            void *c, const MatmulShape &shape,
                            const MatmulOptions &options) {
  int64_t rows = shape.batch * shape.m, n = shape.n, count = rows * n;
  MatmulOptions plain = options;
  plain.epilogue = Epilogue::None;
  plain.bias = nullptr;
  plain.preActivation = nullptr;
  plain.addend = nullptr;
  plain.outputType = DType::F32;
  Temporary wide{context.stream()};
  void *product = c;
  // (An addend may be c's very bytes: the product then goes apart too.)
  if (options.outputType != DType::F32 || options.addend == c) {
    TRIAD_CUDA_RETURN_IF_ERROR(cudaMallocAsync(
        &wide.data, static_cast<size_t>(count) * 4, context.stream()));
    product = wide.data;
  }
  if (absl::Status status = plainProducts(context, a, b, product, shape, plain);
      !status.ok())
    return status;
  Operand sum{product, DType::F32}, bias{options.bias, options.biasType};
  Result out{c, options.outputType};
  if (options.addend) {
    // (product + bias) in f32, then the addend, c rounded once.
    if (absl::Status status = addBroadcast(
            context, sum, bias, Result{product, DType::F32}, count, n);
        !status.ok())
      return status;
    return addBroadcast(context, sum,
                        Operand{options.addend, options.outputType}, out, count,
                        count);
  }
  std::optional<Activation> activation;
  if (options.epilogue == Epilogue::ReluBias)
    activation = Activation::Relu;
  if (options.epilogue == Epilogue::GeluTanhBias)
    activation = Activation::GeluTanh;
  if (!activation)
    return addBroadcast(context, sum, bias, out, count, n);
  if (!options.preActivation)
    return biasActivation(context, *activation, sum, bias, out, rows, n);
  if (absl::Status status = addBroadcast(
          context, sum, bias, Result{options.preActivation, options.outputType},
          count, n);
      !status.ok())
    return status;
  return cuda::activation(context, *activation,
                          Operand{options.preActivation, options.outputType},
                          out, count);
}

/// The GELU gradient epilogue (see MatmulOptions): cuBLASLt's DGELU_BGRAD
/// where the product is one call (its bias gradient then sums every row)
/// and the bias gradient has c's type, DGELU where n allows it (then
/// reduceSum for the bias gradient), else the product, then the activation
/// gradient kernel in place and reduceSum. The context's geluGrad route
/// may skip the first or both.
absl::Status gradientProducts(CudaContext &context, const void *a,
                              const void *b, void *c, const MatmulShape &shape,
                              const MatmulOptions &options) {
  bool oneCall = shape.batch == 1 || (!shape.rhsBatched && !shape.transposeA);
  GeluGradRoute route = context.options().geluGrad;
  if (context.options().fuseEpilogues && route != GeluGradRoute::Kernels &&
      shape.n % 8 == 0 && shape.k > 0) {
    MatmulOptions fused = options;
    if (!oneCall || options.biasGradType != options.outputType ||
        route == GeluGradRoute::Dgelu)
      fused.biasGrad = nullptr;
    absl::Status status = products(context, a, b, c, shape, fused);
    if (absl::IsUnimplemented(status) && fused.biasGrad) {
      // DGELU_BGRAD refused: DGELU alone, and reduceSum.
      fused.biasGrad = nullptr;
      status = products(context, a, b, c, shape, fused);
    }
    if (!absl::IsUnimplemented(status)) {
      if (!status.ok())
        return status;
      ++epilogueUse().fused;
      if (!options.biasGrad || fused.biasGrad)
        return absl::OkStatus();
      return reduceSum(context, Operand{c, options.outputType},
                       {shape.batch * shape.m, shape.n},
                       Result{options.biasGrad, options.biasGradType},
                       {shape.n}, 1.0);
    }
  }
  ++epilogueUse().unfused;
  MatmulOptions plain = options;
  plain.epilogue = Epilogue::None;
  plain.activationInput = nullptr;
  plain.biasGrad = nullptr;
  if (absl::Status status = plainProducts(context, a, b, c, shape, plain);
      !status.ok())
    return status;
  int64_t count = shape.batch * shape.m * shape.n;
  if (absl::Status status = activationGrad(
          context, Activation::GeluTanh,
          Operand{options.activationInput, options.outputType},
          Operand{c, options.outputType}, Result{c, options.outputType}, count);
      !status.ok() || !options.biasGrad)
    return status;
  return reduceSum(
      context, Operand{c, options.outputType}, {shape.batch * shape.m, shape.n},
      Result{options.biasGrad, options.biasGradType}, {shape.n}, 1.0);
}

} // namespace

EpilogueUse &epilogueUse() {
  thread_local EpilogueUse use;
  return use;
}

absl::Status matmul(CudaContext &context, const void *a, const void *b, void *c,
                    const MatmulShape &shape, const MatmulOptions &options) {
  auto isFloat = [](DType type) {
    return type == DType::F32 || type == DType::BF16 || type == DType::F16;
  };
  if (!isFloat(options.inputType) || !isFloat(options.outputType) ||
      (options.bias && !isFloat(options.biasType)) ||
      (options.biasGrad && !isFloat(options.biasGradType)))
    return absl::InvalidArgumentError(
        "matmul: operands, bias and bias gradient are f32, bf16 or f16");
  if (options.outputType != DType::F32 &&
      options.outputType != options.inputType)
    return absl::InvalidArgumentError(
        "matmul: the output is f32 or of the inputs' type");
  bool gradient = options.epilogue == Epilogue::GeluTanhGrad;
  if (options.epilogue != Epilogue::None && !gradient &&
      (!options.bias || (options.biasType != DType::F32 &&
                         options.biasType != options.outputType)))
    return absl::InvalidArgumentError(
        "matmul: an epilogue needs a bias, f32 or of the output's type");
  if (gradient && (!options.activationInput || options.activationInput == c))
    return absl::InvalidArgumentError(
        "matmul: the gradient epilogue reads the activation's input, which "
        "is not c");
  if (options.biasGrad &&
      (!gradient || (options.biasGradType != DType::F32 &&
                     options.biasGradType != options.outputType)))
    return absl::InvalidArgumentError(
        "matmul: only the gradient epilogue writes a bias gradient, f32 or "
        "of the output's type");
  if (!gradient && options.activationInput)
    return absl::InvalidArgumentError(
        "matmul: only the gradient epilogue reads an activation's input");
  if (options.epilogue != Epilogue::None && options.accumulate)
    return absl::InvalidArgumentError(
        "matmul: an epilogue does not accumulate into c");
  if (options.weight && !options.accumulate)
    return absl::InvalidArgumentError(
        "matmul: a weight scales the product only where it accumulates");
  if (options.addend &&
      (options.accumulate || (options.epilogue != Epilogue::None &&
                              options.epilogue != Epilogue::Bias)))
    return absl::InvalidArgumentError(
        "matmul: an addend goes with no epilogue or the bias alone, not "
        "accumulating");
  bool activation = options.epilogue == Epilogue::ReluBias ||
                    options.epilogue == Epilogue::GeluTanhBias;
  if (options.preActivation && !activation)
    return absl::InvalidArgumentError(
        "matmul: only an epilogue with an activation keeps its input");
  int64_t batch = shape.batch, m = shape.m;
  if (shape.k < 0)
    return absl::InvalidArgumentError("matmul: a negative k");
  if (batch <= 0 || m <= 0 || shape.n <= 0)
    return absl::OkStatus();
  if (batch > INT32_MAX)
    return absl::InvalidArgumentError("matmul: too many products in a batch");
  if (gradient)
    return gradientProducts(context, a, b, c, shape, options);
  // A product that adds to c or to an addend runs as the plain product and
  // kernels where k is 0, with the context's fusion off, and where it
  // splits into one cuBLASLt call per batch element (a transposed lhs over
  // a shared rhs): had cuBLASLt refused a later piece, the earlier ones
  // would already have added in place.
  bool adds = options.accumulate || options.addend;
  bool addsApart = adds && (shape.k == 0 || splitsPerBatch(shape) ||
                            !context.options().fuseEpilogues);
  if (options.epilogue == Epilogue::None) {
    if (addsApart)
      return unfusedAdding(context, a, b, c, shape, options);
    if (!adds)
      return plainProducts(context, a, b, c, shape, options);
    absl::Status status = products(context, a, b, c, shape, options);
    return absl::IsUnimplemented(status)
               ? unfusedAdding(context, a, b, c, shape, options)
               : status;
  }
  // cuBLASLt's bias is of c's type; it keeps the GELU's input where its
  // leading dimension (n) is a multiple of 8, and the ReLU's only as a bit
  // mask (which the plan's gradient does not read).
  bool fusable =
      context.options().fuseEpilogues && shape.k > 0 && !addsApart &&
      options.biasType == options.outputType &&
      (!options.preActivation ||
       (options.epilogue == Epilogue::GeluTanhBias && shape.n % 8 == 0));
  if (fusable) {
    absl::Status status = products(context, a, b, c, shape, options);
    if (!absl::IsUnimplemented(status)) {
      if (status.ok())
        ++epilogueUse().fused;
      return status;
    }
  }
  ++epilogueUse().unfused;
  return unfusedForward(context, a, b, c, shape, options);
}

} // namespace triad::rt::cuda
