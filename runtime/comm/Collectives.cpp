//===- Collectives.cpp - the plan's collectives on whole tensors ----------===//

#include "runtime/comm/Collectives.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <climits>
#include <cstring>

namespace triad::rt {

namespace {

int64_t volume(const TensorShape &shape) {
  int64_t count = 1;
  for (int64_t size : shape)
    count *= size;
  return count;
}

std::string text(const TensorShape &shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

} // namespace

void resizeDim(const float *source, const TensorShape &shape, int64_t dim,
               int64_t size, float *target) {
  int64_t outer = outerElements(shape, dim);
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d)
    inner *= shape[d];
  int64_t from = shape[dim] * inner, to = size * inner;
  int64_t kept = std::min(from, to);
  for (int64_t i = 0; i < outer; ++i) {
    std::memcpy(target + i * to, source + i * from,
                static_cast<size_t>(kept) * sizeof(float));
    std::fill(target + i * to + kept, target + (i + 1) * to, 0.0f);
  }
}

absl::StatusOr<TensorShape> resultShape(const TensorCollective &c,
                                        int64_t members) {
  auto invalid = [&](const std::string &what) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective over group ", c.group, " of ", members,
                     " members on x ", text(c.xShape), ": ", what));
  };
  int64_t rank = static_cast<int64_t>(c.xShape.size());
  for (int64_t size : c.xShape)
    if (size < 0)
      return invalid("negative size");
  auto inside = [&](int64_t dim) { return dim >= 0 && dim < rank; };
  TensorShape expected = c.xShape;
  switch (c.kind) {
  case CollectiveKind::AllReduce:
    break;
  case CollectiveKind::AllGather:
    if (!inside(c.dim))
      return invalid(absl::StrCat("dimension ", c.dim, " is outside x"));
    if (expected[c.dim] > INT64_MAX / members)
      return invalid("the result is too large");
    // Padded pieces gather to the size they pad (c.outShape's, when its
    // pieces of ceil(size / members) are x's).
    if (c.outShape.size() == c.xShape.size() && c.outShape[c.dim] > 0 &&
        paddedPiece(c.outShape[c.dim], members) == expected[c.dim])
      expected[c.dim] = c.outShape[c.dim];
    else
      expected[c.dim] *= members;
    break;
  case CollectiveKind::ReduceScatter:
    if (!inside(c.dim))
      return invalid("a dimension is outside x");
    // Pieces of ceil(size / members), the last ones zero past x's end.
    expected[c.dim] = paddedPiece(expected[c.dim], members);
    break;
  case CollectiveKind::AllToAll:
    if (!inside(c.dim) ||
        (c.kind == CollectiveKind::AllToAll && !inside(c.concatDim)))
      return invalid("a dimension is outside x");
    if (expected[c.dim] % members != 0)
      return invalid(absl::StrCat("dimension ", c.dim, " does not split into ",
                                  members, " pieces"));
    expected[c.dim] /= members;
    if (c.kind == CollectiveKind::AllToAll) {
      if (expected[c.concatDim] > INT64_MAX / members)
        return invalid("the result is too large");
      expected[c.concatDim] *= members;
    }
    break;
  }
  if (expected != c.outShape)
    return invalid(absl::StrCat("the result must have shape ", text(expected),
                                ", not ", text(c.outShape)));
  return expected;
}

void swapBlocks(const float *source, float *target, int64_t a, int64_t b,
                int64_t c) {
  size_t bytes = static_cast<size_t>(c) * sizeof(float);
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      std::memcpy(target + (j * a + i) * c, source + (i * b + j) * c, bytes);
}

int64_t outerElements(const TensorShape &shape, int64_t dim) {
  int64_t outer = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  return outer;
}

PackedStaging packedStaging(const TensorCollective &collective,
                            int64_t members) {
  int64_t count = 1;
  for (int64_t size : collective.xShape)
    count *= size;
  PackedStaging staging;
  switch (collective.kind) {
  case CollectiveKind::AllReduce:
    break;
  case CollectiveKind::AllGather:
    if (outerElements(collective.outShape, collective.dim) > 1)
      staging.first = count * members;
    break;
  case CollectiveKind::ReduceScatter:
  case CollectiveKind::AllToAll:
    if (outerElements(collective.xShape, collective.dim) > 1)
      staging.first = count;
    if (collective.kind == CollectiveKind::AllToAll &&
        outerElements(collective.outShape, collective.concatDim) > 1)
      staging.second = count;
    break;
  }
  return staging;
}

PackedStaging widenedStaging(const TensorCollective &collective) {
  PackedStaging staging;
  staging.first = volume(collective.xShape);
  if (collective.kind != CollectiveKind::AllReduce)
    staging.second = volume(collective.outShape);
  return staging;
}

void packPieces(const float *tensor, const TensorShape &shape, int64_t dim,
                int64_t pieces, float *packed) {
  int64_t outer = outerElements(shape, dim);
  int64_t run = outer == 0 ? 0 : volume(shape) / outer / pieces;
  swapBlocks(tensor, packed, outer, pieces, run);
}

void unpackPieces(const float *packed, const TensorShape &shape, int64_t dim,
                  int64_t pieces, float *tensor) {
  int64_t outer = outerElements(shape, dim);
  int64_t run = outer == 0 ? 0 : volume(shape) / outer / pieces;
  swapBlocks(packed, tensor, pieces, outer, run);
}

absl::Status PendingCollective::wait() {
  if (!request)
    return absl::FailedPreconditionError("the collective was already waited");
  absl::Status status = request->wait();
  request.reset();
  if (!status.ok())
    return status;
  if (!received.empty()) {
    if (paddedSize >= 0 && paddedSize != outShape[joinDim]) {
      // Join the padded pieces, then cut the padding off.
      TensorShape shape = outShape;
      shape[joinDim] = paddedSize;
      std::vector<float> joined(received.size());
      unpackPieces(received.data(), shape, joinDim, pieces, joined.data());
      resizeDim(joined.data(), shape, joinDim, outShape[joinDim], out);
    } else {
      unpackPieces(received.data(), outShape, joinDim, pieces, out);
    }
  }
  sent = {};
  received = {};
  padded = {};
  return absl::OkStatus();
}

absl::StatusOr<PendingCollective> startCollective(Communicator &comm,
                                                  const TensorCollective &c) {
  if (c.group >= comm.groupCount())
    return absl::InvalidArgumentError(
        absl::StrCat("group ", c.group, " is not one of the communicator's ",
                     comm.groupCount(), " groups"));
  int64_t members = comm.groupSize(c.group);
  if (members < 1)
    return absl::InternalError(
        absl::StrCat("group ", c.group, " has ", members, " members"));
  absl::StatusOr<TensorShape> shape = resultShape(c, members);
  if (!shape.ok())
    return shape.status();
  PendingCollective pending;
  pending.out = c.out;
  pending.outShape = c.outShape;
  pending.pieces = members;
  int64_t count = volume(c.xShape);
  absl::StatusOr<std::unique_ptr<CommRequest>> request;
  switch (c.kind) {
  case CollectiveKind::AllReduce:
    request = comm.startAllReduceSum(c.group, c.x, c.out, count);
    break;
  case CollectiveKind::AllGather: {
    float *target = c.out;
    // Padded pieces: the whole padded tensor first, cut to out's size in
    // wait().
    bool padded = c.outShape[c.dim] != c.xShape[c.dim] * members;
    if ((padded || outerElements(c.outShape, c.dim) > 1) && count > 0) {
      pending.received.resize(static_cast<size_t>(count * members));
      pending.joinDim = c.dim;
      pending.paddedSize = c.xShape[c.dim] * members;
      target = pending.received.data();
    }
    request = comm.startAllGather(c.group, c.x, target, count);
    break;
  }
  case CollectiveKind::ReduceScatter: {
    const float *source = c.x;
    // Padded pieces: x zero-padded to a whole number of pieces first.
    TensorShape shape = c.xShape;
    shape[c.dim] = c.outShape[c.dim] * members;
    int64_t padded = volume(shape);
    if (shape != c.xShape && padded > 0) {
      pending.padded.resize(static_cast<size_t>(padded));
      resizeDim(c.x, c.xShape, c.dim, shape[c.dim], pending.padded.data());
      source = pending.padded.data();
    }
    if (outerElements(shape, c.dim) > 1 && padded > 0) {
      pending.sent.resize(static_cast<size_t>(padded));
      packPieces(source, shape, c.dim, members, pending.sent.data());
      source = pending.sent.data();
    }
    request = comm.startReduceScatter(c.group, source, c.out, padded / members);
    break;
  }
  case CollectiveKind::AllToAll: {
    const float *source = c.x;
    if (outerElements(c.xShape, c.dim) > 1 && count > 0) {
      pending.sent.resize(static_cast<size_t>(count));
      packPieces(c.x, c.xShape, c.dim, members, pending.sent.data());
      source = pending.sent.data();
    }
    float *target = c.out;
    if (outerElements(c.outShape, c.concatDim) > 1 && count > 0) {
      pending.received.resize(static_cast<size_t>(count));
      pending.joinDim = c.concatDim;
      target = pending.received.data();
    }
    request = comm.startAllToAll(c.group, source, target, count / members);
    break;
  }
  }
  if (!request.ok())
    return request.status();
  pending.request = std::move(*request);
  return pending;
}

absl::Status runCollective(Communicator &comm, const TensorCollective &c) {
  absl::StatusOr<PendingCollective> pending = startCollective(comm, c);
  if (!pending.ok())
    return pending.status();
  return pending->wait();
}

absl::Status runBucket(Communicator &comm,
                       const std::vector<TensorCollective> &bucket) {
  if (bucket.empty())
    return absl::OkStatus();
  if (bucket.size() == 1)
    return runCollective(comm, bucket.front());
  const TensorCollective &first = bucket.front();
  if (first.kind != CollectiveKind::AllGather &&
      first.kind != CollectiveKind::ReduceScatter)
    return absl::InvalidArgumentError(
        "only all-gathers and reduce-scatters run in buckets");
  if (first.group >= comm.groupCount())
    return absl::InvalidArgumentError(absl::StrCat("group ", first.group,
                                                   " is not one of the "
                                                   "communicator's ",
                                                   comm.groupCount(),
                                                   " groups"));
  int64_t members = comm.groupSize(first.group);
  bool gather = first.kind == CollectiveKind::AllGather;
  // Each tensor's piece, and where it starts in a member's block.
  std::vector<int64_t> piece, offset;
  int64_t block = 0;
  for (const TensorCollective &c : bucket) {
    if (c.kind != first.kind || c.group != first.group)
      return absl::InvalidArgumentError(
          "a bucket's collectives are of one kind over one group");
    if (absl::StatusOr<TensorShape> shape = resultShape(c, members);
        !shape.ok())
      return shape.status();
    offset.push_back(block);
    piece.push_back(volume(gather ? c.xShape : c.outShape));
    block += piece.back();
  }
  // The shape whose `members` pieces along c.dim tile it: x padded to a
  // whole number of pieces.
  auto tiled = [&](const TensorCollective &c) {
    TensorShape shape = gather ? c.outShape : c.xShape;
    shape[c.dim] = (gather ? c.xShape : c.outShape)[c.dim] * members;
    return shape;
  };
  // Along the leading dimension (no sizes before it) a piece is one run of
  // the tensor: it moves straight between the tensor and the blocks, the
  // padding past the tensor's end zero.
  auto leading = [](const TensorCollective &c) {
    return outerElements(c.xShape, c.dim) <= 1;
  };
  std::vector<float> packed, whole;
  if (!gather) {
    // Member m's block: piece m of every tensor, in order.
    std::vector<float> sent(static_cast<size_t>(block * members)), mine(block);
    for (size_t t = 0; t < bucket.size(); ++t) {
      const TensorCollective &c = bucket[t];
      if (leading(c)) {
        int64_t size = volume(c.xShape);
        for (int64_t m = 0; m < members; ++m) {
          int64_t from = std::min(m * piece[t], size);
          int64_t valid = std::min(piece[t], size - from);
          float *to = sent.data() + m * block + offset[t];
          std::copy_n(c.x + from, valid, to);
          std::fill(to + valid, to + piece[t], 0.0f);
        }
        continue;
      }
      TensorShape shape = tiled(c);
      whole.resize(static_cast<size_t>(volume(shape)));
      packed.resize(whole.size());
      resizeDim(c.x, c.xShape, c.dim, shape[c.dim], whole.data());
      packPieces(whole.data(), shape, c.dim, members, packed.data());
      for (int64_t m = 0; m < members; ++m)
        std::copy_n(packed.data() + m * piece[t], piece[t],
                    sent.data() + m * block + offset[t]);
    }
    if (absl::Status status =
            comm.reduceScatter(first.group, sent.data(), mine.data(), block);
        !status.ok())
      return status;
    for (size_t t = 0; t < bucket.size(); ++t)
      std::copy_n(mine.data() + offset[t], piece[t], bucket[t].out);
    return absl::OkStatus();
  }
  std::vector<float> mine(static_cast<size_t>(block)),
      received(static_cast<size_t>(block * members));
  for (size_t t = 0; t < bucket.size(); ++t)
    std::copy_n(bucket[t].x, piece[t], mine.data() + offset[t]);
  if (absl::Status status =
          comm.allGather(first.group, mine.data(), received.data(), block);
      !status.ok())
    return status;
  for (size_t t = 0; t < bucket.size(); ++t) {
    const TensorCollective &c = bucket[t];
    if (leading(c)) {
      int64_t size = volume(c.outShape);
      for (int64_t m = 0; m < members; ++m) {
        int64_t from = std::min(m * piece[t], size);
        std::copy_n(received.data() + m * block + offset[t],
                    std::min(piece[t], size - from), c.out + from);
      }
      continue;
    }
    TensorShape shape = tiled(c);
    packed.resize(static_cast<size_t>(volume(shape)));
    whole.resize(packed.size());
    for (int64_t m = 0; m < members; ++m)
      std::copy_n(received.data() + m * block + offset[t], piece[t],
                  packed.data() + m * piece[t]);
    unpackPieces(packed.data(), shape, c.dim, members, whole.data());
    // Padded pieces: the padding is cut off.
    resizeDim(whole.data(), shape, c.dim, c.outShape[c.dim], c.out);
  }
  return absl::OkStatus();
}

} // namespace triad::rt
