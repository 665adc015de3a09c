//===- Collectives.h - the plan's collectives on whole tensors --*- C++ -*-===//
//
// The plan's AllReduce, AllGather, ReduceScatter and AllToAll on row-major
// tensors, along any dimension, over any Communicator. A backend moves
// contiguous blocks, member after member; this layer cuts a tensor into its
// pieces along a dimension (packPieces: piece j becomes block j) before
// sending and joins received blocks along one (unpackPieces) after. Along
// the leading dimension (or any dimension whose leading sizes are all 1)
// the pieces already are the blocks, and nothing is copied.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_COMM_COLLECTIVES_H
#define TRIAD_RUNTIME_COMM_COLLECTIVES_H

#include "runtime/comm/Comm.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace triad::rt {

using TensorShape = std::vector<int64_t>;

/// Views `source` as the row-major array [a][b][c] and writes it to
/// `target` as [b][a][c]. The buffers must not overlap.
void swapBlocks(const float *source, float *target, int64_t a, int64_t b,
                int64_t c);

/// Elements before `dim` (the product of the leading sizes): the number of
/// separate runs that make up one piece of a tensor cut along `dim`.
int64_t outerElements(const TensorShape &shape, int64_t dim);

/// Writes the `pieces` equal pieces of `tensor` (of `shape`) along `dim`
/// one after the other into `packed`, each piece row-major as a tensor of
/// its own.
void packPieces(const float *tensor, const TensorShape &shape, int64_t dim,
                int64_t pieces, float *packed);

/// The inverse of packPieces: joins the `pieces` consecutive pieces of
/// `packed` along `dim` into `tensor`, whose shape (the joined one) is
/// `shape`.
void unpackPieces(const float *packed, const TensorShape &shape, int64_t dim,
                  int64_t pieces, float *tensor);

enum class CollectiveKind { AllReduce, AllGather, ReduceScatter, AllToAll };

/// One collective of a plan instruction (see plan.fbs): x -> out over the
/// members of group `group`.
struct TensorCollective {
  CollectiveKind kind = CollectiveKind::AllReduce;
  uint32_t group = 0;
  const float *x = nullptr;
  TensorShape xShape;
  float *out = nullptr;
  TensorShape outShape;
  /// AllGather, ReduceScatter: the dimension; AllToAll: the split one.
  int64_t dim = 0;
  /// AllToAll: the dimension the received pieces are joined along.
  int64_t concatDim = 0;
};

/// What a collective moving device blocks (NCCL) stages beside its tensors,
/// in floats: buffer 0 holds the pieces packed before sending (a
/// reduce-scatter's or all-to-all's) or the blocks gathered before joining
/// (an all-gather's); buffer 1 an all-to-all's received blocks before
/// joining. Both are 0 where the pieces already are the blocks (along the
/// leading dimension, or one whose leading sizes are all 1).
struct PackedStaging {
  int64_t first = 0, second = 0;
};
PackedStaging packedStaging(const TensorCollective &collective,
                            int64_t members);
/// What the same collective stages in f32 besides when its tensors are
/// 16-bit (bf16, f16): they are widened, moved and reduced in f32 and
/// rounded once, as over MPI. Buffer 0 holds x widened (an all-reduce
/// reduces it there, in place), buffer 1 the f32 result before it is
/// rounded (none for an all-reduce); the packing above comes on top.
PackedStaging widenedStaging(const TensorCollective &collective);

/// The piece of a dimension of `size` split `members` ways where the split
/// may pad (ZeRO's pieces): ceil(size / members), the last pieces
/// zero-padded past the end. All-gathers of such pieces cut the padding
/// off, reduce-scatters pad x with zeros, all-slices fill it with zeros.
inline int64_t paddedPiece(int64_t size, int64_t members) {
  return (size + members - 1) / members;
}

/// Copies `source` of `shape` into `target`, whose dimension `dim` has
/// `size` elements: cut, or padded with zeros.
void resizeDim(const float *source, const TensorShape &shape, int64_t dim,
               int64_t size, float *target);

/// The shape `out` of `collective` must have over a group of `members`,
/// or InvalidArgument saying why x's shape or the dimensions do not fit.
absl::StatusOr<TensorShape> resultShape(const TensorCollective &collective,
                                        int64_t members);

/// A tensor collective in flight.
class PendingCollective {
public:
  PendingCollective(PendingCollective &&) = default;
  PendingCollective &operator=(PendingCollective &&) = default;

  /// Completes the collective: waits for the backend and joins what it
  /// received into the output. Call once.
  absl::Status wait();

private:
  friend absl::StatusOr<PendingCollective>
  startCollective(Communicator &comm, const TensorCollective &collective);
  PendingCollective() = default;

  std::unique_ptr<CommRequest> request;
  /// The packed pieces sent, and the blocks received when they still need
  /// joining into `out`.
  std::vector<float> sent, received;
  /// A reduce-scatter's x zero-padded to a whole number of pieces.
  std::vector<float> padded;
  float *out = nullptr;
  TensorShape outShape;
  int64_t joinDim = 0, pieces = 1;
  /// An all-gather of padded pieces: the size of the joined dimension
  /// before it is cut to out's (-1: not padded).
  int64_t paddedSize = -1;
};

/// Checks the shapes against the kind, the group's size and the dimensions
/// (InvalidArgument when they do not fit), packs x's pieces when needed and
/// starts the collective. Until wait() returns, `out` must be neither read
/// nor written, nor `x` written.
absl::StatusOr<PendingCollective>
startCollective(Communicator &comm, const TensorCollective &collective);

/// startCollective, then wait.
absl::Status runCollective(Communicator &comm,
                           const TensorCollective &collective);

/// A bucket: all-gathers, or reduce-scatters, of several tensors over one
/// group, moved by one collective of the backend. Each member's block holds
/// its piece of every tensor, tensor after tensor (the rank-major packing
/// of Megatron's and DeepSpeed's buckets), so a bucket costs one call
/// whatever the number of tensors; each tensor's pieces are those of
/// startCollective (padded where the group does not divide its dimension).
/// Blocking. InvalidArgument when the collectives differ in kind or group
/// or a shape does not fit.
absl::Status runBucket(Communicator &comm,
                       const std::vector<TensorCollective> &bucket);

} // namespace triad::rt

#endif // TRIAD_RUNTIME_COMM_COLLECTIVES_H
