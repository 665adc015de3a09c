//===- Checkpoint.h - sharded, atomic, reslicing checkpoints -----*- C++
//-*-===//
//
// A checkpoint is a set of rectangular slices of global tensors: each rank
// writes the slices it owns to DIR/step-N/rank-R.safetensors (R in five
// digits; each slice's global shape and offsets in the file's metadata);
// one rank then commits: it checks that the slices of every tensor tile it
// exactly, writes DIR/step-N/index.json and finally points DIR/latest at
// step-N. Every file is written atomically and `latest` moves last, so a
// crash at any moment leaves the previous checkpoint intact and loadable.
//
// The index:
//   {"format": "triad-checkpoint", "version": 1, "step": N, "seed": S,
//    "data_position": samples consumed, "world_size": ranks,
//    "mesh": [["dp", 2], ["tp", 2]],            (optional)
//    "tensors": {NAME: {"dtype": "F32", "shape": [global shape],
//                       "slices": [{"file": "rank-00001.safetensors",
//                                   "offsets": [...], "sizes": [...]}]}}}
//
// Loading reads any slice of any tensor, assembling it from whatever slices
// were stored: a checkpoint saved under one mesh loads under another. A
// reader opens a shard only when a read needs one of its slices, so a rank
// reads the shards that hold its slices and no others.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_CHECKPOINT_CHECKPOINT_H
#define TRIAD_RUNTIME_CHECKPOINT_CHECKPOINT_H

#include "runtime/checkpoint/Safetensors.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace triad::rt {

struct TensorSlice {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> globalShape;
  /// The slice's position and extent in the global tensor.
  std::vector<int64_t> offsets, sizes;
  /// Row-major bytes of the slice.
  const void *data = nullptr;
};

/// What besides tensors a training run needs to resume exactly.
struct CheckpointInfo {
  uint64_t step = 0;
  uint64_t seed = 0;
  /// Samples of the corpus consumed so far (the data position).
  uint64_t dataPosition = 0;
  int64_t worldSize = 1;
  /// The mesh the checkpoint was saved under (axis name, size), slowest
  /// first; empty when unknown. For people: loading reslices to any mesh.
  std::vector<std::pair<std::string, int64_t>> mesh = {};
  /// The peak learning rate the run trained with; none when unknown.
  std::optional<double> peakLearningRate = std::nullopt;
  /// The plan's other training hyper-parameters (Executor::hyperparameters:
  /// warmup, decay_steps, min_lr, beta1, beta2, epsilon, weight_decay,
  /// clip_norm), for a resumed run to compare; empty when unknown.
  std::map<std::string, double> hyperparameters = {};
};

/// Copies the box of shape `extent` at `fromLow` in the row-major array
/// `from` (shape `fromShape`) to `toLow` in `to` (shape `toShape`), in runs
/// along the last dimension; elements of `elementBytes` bytes. Nothing for
/// an empty box; one element at rank 0.
void copyBox(const void *from, const std::vector<int64_t> &fromShape,
             const std::vector<int64_t> &fromLow, void *to,
             const std::vector<int64_t> &toShape,
             const std::vector<int64_t> &toLow,
             const std::vector<int64_t> &extent, int64_t elementBytes);

/// The folder of step `step` inside checkpoint folder `dir`.
std::string checkpointStepDir(const std::string &dir, uint64_t step);

/// What a shard is stamped with besides its step: the run's seed, data
/// position, world size and mesh, as far as known. The commit and the
/// reader compare each with the index.
struct ShardStamp {
  std::optional<uint64_t> seed;
  std::optional<uint64_t> dataPosition;
  std::optional<int64_t> worldSize;
  /// As CheckpointInfo::mesh; empty: not stamped.
  std::vector<std::pair<std::string, int64_t>> mesh = {};
};

/// The stamp of a shard of the run `info` describes.
ShardStamp stampOf(const CheckpointInfo &info);

/// Writes rank `rank`'s slices for step `step` (creating the folders). The
/// shard is stamped with its step and `stamp`, which the commit and the
/// reader compare with the index: a shard of another step, run, data
/// position or mesh is an error naming both values, not mixed in.
absl::Status writeCheckpointShard(const std::string &dir, uint64_t step,
                                  int64_t rank,
                                  const std::vector<TensorSlice> &slices,
                                  const ShardStamp &stamp = {});

/// Checks the shards of all `info.worldSize` ranks, writes the index and
/// makes the step the latest checkpoint. Call once, after every rank's
/// shard is written.
absl::Status commitCheckpoint(const std::string &dir,
                              const CheckpointInfo &info);

/// The steps of the committed checkpoints in `dir` (its step-N folders
/// that hold an index), newest first.
std::vector<uint64_t> checkpointSteps(const std::string &dir);

class CheckpointReader {
public:
  /// Opens the latest committed checkpoint of `dir`, or the one of `step`.
  static absl::StatusOr<CheckpointReader>
  open(const std::string &dir, std::optional<uint64_t> step = std::nullopt);

  /// Opens every shard the index names, which checks each one's stamps
  /// and every tensor's checksum: OK when the whole checkpoint is intact,
  /// else the first damage found.
  absl::Status verify() const;

  const CheckpointInfo &info() const { return checkpointInfo; }
  std::vector<std::string> tensorNames() const;

  /// Reads the slice (offsets, sizes) of tensor `name` into `out`
  /// (row-major). The tensor must exist with this dtype and global shape;
  /// the error names the tensor and what differs. A shard that is missing
  /// or does not hold what the index says is an error too.
  absl::Status read(const std::string &name, DType dtype,
                    const std::vector<int64_t> &globalShape,
                    const std::vector<int64_t> &offsets,
                    const std::vector<int64_t> &sizes, void *out) const;

private:
  struct StoredSlice {
    int64_t file;
    std::vector<int64_t> offsets, sizes;
  };
  struct StoredTensor {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<StoredSlice> slices;
  };
  CheckpointInfo checkpointInfo;
  std::string stepDir;
  /// The shards the index names, opened on first use.
  absl::StatusOr<const SafetensorsFile *> file(int64_t id) const;
  std::vector<std::string> fileNames;
  mutable std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, StoredTensor> tensors;
};

/// The newest checkpoint of `dir` that opens and verifies (see
/// CheckpointReader::verify), with a line in `skipped` ("step 12: why") for
/// each newer one that does not. NotFound when `dir` holds no intact
/// checkpoint.
absl::StatusOr<uint64_t>
newestIntactCheckpoint(const std::string &dir,
                       std::vector<std::string> &skipped);

/// A job's hold on its checkpoint folder: `DIR/.lock`, made exclusively
/// and holding the host and process that made it, removed when the lock is
/// destroyed. A second job saving into the folder is refused, naming the
/// holder; a lock whose process no longer runs on this host is stale and
/// taken over (`staleNote` says so); a lock of another host cannot be
/// checked and is refused, saying how to remove it.
class FolderLock {
public:
  static absl::StatusOr<FolderLock> acquire(const std::string &dir);
  FolderLock(FolderLock &&other) noexcept;
  FolderLock &operator=(FolderLock &&other) noexcept;
  FolderLock(const FolderLock &) = delete;
  FolderLock &operator=(const FolderLock &) = delete;
  ~FolderLock();

  /// What was taken over, or "" (a line for the user).
  const std::string &staleNote() const { return stale; }
  /// Removes the lock now (also done by the destructor).
  void release();

private:
  FolderLock() = default;
  std::string path, stale;
};

} // namespace triad::rt

#endif // TRIAD_RUNTIME_CHECKPOINT_CHECKPOINT_H
