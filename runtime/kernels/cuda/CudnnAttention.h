//===- CudnnAttention.h - attention through cuDNN's fused attention -*- C++
//-*-===//
//
// The CUDA backend's route for a 16-bit plan's attention and attention
// gradient through cuDNN's fused (flash) scaled-dot-product attention, with
// Triad's own tensor-core kernels (CudaAttention.h) as the fallback and the
// reference. cuDNN is loaded at run time (dlopen of libcudnn.so.9): the
// build needs only its headers and links nothing, and a machine without
// cuDNN runs Triad's kernels.
//
// The graphs are those of cuDNN's fused attention pattern, built with the
// backend API: scores Q K^T, the scale, the causal mask (row >= column, the
// top-left diagonal Triad's causal mask keeps), the softmax (max, exp, sum
// and division, and its log-sum-exp "Stats", stored when training), P V;
// and the gradient graph that reads Q, K, V, O, dO and Stats. Tensors keep
// Triad's packed layout: q, out and their gradients [batch, seq, heads *
// headDim], k, v and theirs [batch, seq, kvHeads * headDim], seen as
// cuDNN's (batch, head, seq, dim) through strides; grouped-query heads
// broadcast over the kv heads as cuDNN's graphs do. cuDNN's engines for
// these graphs compile their kernels with NVRTC when a plan is built (up to
// a second per plan), so libnvrtc must load beside cuDNN: where it does
// not, no plan is built and the call falls back.
//
// Triad's AttentionGrad has no saved statistics or output, so the gradient
// runs cuDNN's forward in training mode first, into context scratch: the
// output O (batch * querySeq * heads * headDim 16-bit values) and Stats (one
// f32 per (sample, head, query row)); then the gradient graph, which needs
// two buffers of its own, also from scratch: the sum of dO * O per row (one
// f32 per row) and dQ's f32 accumulator (batch * heads * querySeq *
// headDim f32), besides each plan's own workspace. All of it is one
// stream-ordered scratch allocation (CudaContext::scratch), asked for once
// per call, so nothing is freed while a step runs. cuDNN's gradient adds
// into dQ's accumulator with atomics: unlike Triad's kernels, dq may differ
// in its last bits from one run to the next.
//
// Execution plans are built the first time a shape is seen and kept for
// the router's life, one per (batch, sequences, heads, kv heads, head
// dimension, type, mask, pass); a shape cuDNN refuses is remembered too, so
// it is tried once. The scale is a by-value scalar of each execution, so
// one plan serves every scale. All work runs on the context's stream.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_CUDA_CUDNNATTENTION_H
#define TRIAD_RUNTIME_KERNELS_CUDA_CUDNNATTENTION_H

#include "runtime/kernels/AttentionKernel.h"
#include "runtime/kernels/cpu/CpuKernels.h"
#include "runtime/kernels/cuda/CudaContext.h"
#include "runtime/kernels/cuda/CudaKernels.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace triad::rt::cuda {

/// The library the route loads: cuDNN 9's, found on the loader's path
/// (LD_LIBRARY_PATH: the CUDA toolkit's lib folder, or the nvidia-cudnn
/// wheel's nvidia/cudnn/lib or nvidia/cu13/lib).
constexpr const char *kCudnnLibrary = "libcudnn.so.9";

/// Whether this build has the cuDNN route (cuDNN's headers were found when
/// it was built); without it every call runs Triad's kernels.
bool cudnnRouteBuilt();

/// The version of the cuDNN in `library` (cudnnGetVersion: 91900 for
/// 9.19.0), loading it: Unavailable, saying why, when it cannot be loaded
/// (the loader's error), lacks an entry point the route calls, is not
/// cuDNN 9, or this build has no cuDNN route. Needs no GPU.
absl::StatusOr<size_t>
cudnnLibraryVersion(const std::string &library = kCudnnLibrary);

/// What the route knows besides the call: cuDNN's version (0 while it is
/// not loaded: the checks that need it wait) and the GPU's compute
/// capability (90 for 9.0).
struct CudnnFacts {
  size_t version = 0;
  int computeCapability = 0;
};

/// One attention call as the route sees it.
struct CudnnAttentionCall {
  cpu::AttentionShape shape;
  /// The type of q, k, v, dout and the results (one type, else F32).
  DType type = DType::F32;
  bool hasSlopes = false;
  bool backward = false;
  /// Every tensor's address: cuDNN's plans are built for 16-byte aligned
  /// tensors.
  std::vector<const void *> tensors;
};

/// Why cuDNN's fused attention does not take `call` on a GPU and cuDNN of
/// `facts`, from what the host knows ("" when it may; building the plans
/// may still fail): f32 tensors, prefix masks and ALiBi slopes (not mapped
/// onto cuDNN's graphs), head dimensions that are not multiples of 8 or are
/// over 128 (256 on compute capability 9.x), empty calls, GPUs before
/// compute capability 8.0, misaligned tensors; with a version, cuDNN
/// 9.10.0 and 9.10.1 (known wrong results), and a gradient with a key
/// sequence that is not a multiple of 128 before cuDNN 9.15.1 (which
/// needed a padding mask there), or of one query and one key.
std::string cudnnRefusal(const CudnnAttentionCall &call,
                         const CudnnFacts &facts);

/// The graphs of the route: the forward without and with its statistics
/// (the gradient's first half), and the gradient.
enum class CudnnPass { Forward, ForwardTraining, Backward };

/// What a plan is built for (the scale is not part of it: see above).
struct CudnnPlanKey {
  int64_t batch = 0, querySeq = 0, keySeq = 0, heads = 0, kvHeads = 0,
          headDim = 0;
  DType type = DType::BF16;
  bool causal = false;
  CudnnPass pass = CudnnPass::Forward;

  auto tie() const {
    return std::tie(batch, querySeq, keySeq, heads, kvHeads, headDim, type,
                    causal, pass);
  }
  bool operator==(const CudnnPlanKey &other) const {
    return tie() == other.tie();
  }
  bool operator<(const CudnnPlanKey &other) const {
    return tie() < other.tie();
  }
};

/// The key of a call of `shape` on tensors of `type` for `pass`.
CudnnPlanKey cudnnPlanKey(const cpu::AttentionShape &shape, DType type,
                          CudnnPass pass);

/// Builds and finalizes the backend descriptors of the tensors and
/// operations of `key`'s graph with the cuDNN of `library`, and returns how
/// many operations it has: every attribute the route sets, checked by
/// cuDNN, on a machine without a GPU (the operation graph and the plan,
/// which need a handle and so a GPU, are not built).
absl::StatusOr<int>
cudnnOperationCount(const CudnnPlanKey &key,
                    const std::string &library = kCudnnLibrary);

/// Which kernels ran a call.
enum class AttentionRoute { Cudnn, Triad };

/// The route of a call for which the route gave `refusal` ("" when cuDNN
/// takes it) under `kernel`: cuDNN when it takes the call, unless `kernel`
/// is Triad; Triad's kernels otherwise, but under AttentionKernel::Cudnn,
/// where a refusal is a FailedPrecondition error that gives it.
absl::StatusOr<AttentionRoute> chooseAttentionRoute(AttentionKernel kernel,
                                                    absl::string_view refusal);

/// The attention calls the calling thread's routers ran, by route and pass
/// (never reset: read differences), as issueCounts counts work.
struct AttentionRouteCounts {
  int64_t cudnnForward = 0, cudnnBackward = 0, triadForward = 0,
          triadBackward = 0;
};
AttentionRouteCounts &attentionRouteCounts();

class CudnnAttention;

/// Routes one executor's attention calls by an AttentionKernel choice:
/// 16-bit calls cuDNN takes run through it (loaded, given a handle on the
/// first such call, its plans built per key), everything else through
/// Triad's kernels. Each cuDNN execution counts as a kernel launch in
/// issueCounts (cuDNN may launch more than one).
class AttentionRouter {
public:
  explicit AttentionRouter(AttentionKernel kernel,
                           std::string library = kCudnnLibrary);
  ~AttentionRouter();
  AttentionRouter(const AttentionRouter &) = delete;
  AttentionRouter &operator=(const AttentionRouter &) = delete;

  AttentionKernel kernel() const { return choice; }

  /// CudaAttention.h's typed attention and attentionGrad, through cuDNN
  /// where it takes the call.
  absl::Status attention(CudaContext &context, Operand q, Operand k, Operand v,
                         const int32_t *prefixLengths, const float *alibiSlopes,
                         Result out, const cpu::AttentionShape &shape);
  absl::Status attentionGrad(CudaContext &context, Operand q, Operand k,
                             Operand v, const int32_t *prefixLengths,
                             const float *alibiSlopes, Operand dout, Result dq,
                             Result dk, Result dv,
                             const cpu::AttentionShape &shape);

  /// For a call only Triad's kernels can run (`why` says why, such as f32
  /// values): an error under AttentionKernel::Cudnn, else counted as
  /// Triad's (the caller runs it).
  absl::Status triadOnly(bool backward, absl::string_view why);

  /// Why cuDNN did not take the last call it was asked about ("" when it
  /// did).
  const std::string &lastRefusal() const { return last; }
  /// The plans built or refused so far.
  size_t cachedPlans() const;

private:
  /// Why cuDNN does not take `call` on `context` ("" when it does: its
  /// plans are then built).
  std::string refusal(CudaContext &context, const CudnnAttentionCall &call);
  /// The route of `call` (with `choice` not Triad): cuDNN where it takes
  /// the call, else as chooseAttentionRoute says; notes `last`.
  absl::StatusOr<AttentionRoute> routeOf(CudaContext &context,
                                         const CudnnAttentionCall &call);

  AttentionKernel choice;
  std::string library;
  std::unique_ptr<CudnnAttention> cudnn;
  /// Why cuDNN could not be set up, once that was tried.
  std::string unavailable;
  bool triedCudnn = false;
  int computeCapability = -1;
  std::string last;
};

} // namespace triad::rt::cuda

#endif // TRIAD_RUNTIME_KERNELS_CUDA_CUDNNATTENTION_H
