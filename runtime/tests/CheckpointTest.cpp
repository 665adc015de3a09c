//===- CheckpointTest.cpp - safetensors and sharded checkpoints -----------===//

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/support/Files.h"
#include "runtime/support/JsonDepth.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>

#include <csignal>
#include <cstdlib>
#include <numeric>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace triad::rt;

namespace {

std::string freshDir(const std::string &name) {
  std::string dir = ::testing::TempDir() + "triad-ckpt-" + name + "-" +
                    std::to_string(getpid());
  std::string command = "rm -rf '" + dir + "'";
  EXPECT_EQ(std::system(command.c_str()), 0);
  return dir;
}

/// A fresh, existing folder.
std::string madeDir(const std::string &name) {
  std::string dir = freshDir(name);
  EXPECT_EQ(mkdir(dir.c_str(), 0755), 0);
  return dir;
}

/// The id of a process that has ended (a child that exited at once).
pid_t endedProcess() {
  pid_t child = fork();
  if (child == 0)
    _exit(0);
  int status;
  waitpid(child, &status, 0);
  return child;
}

std::vector<float> iota(int64_t count, float start = 0) {
  std::vector<float> values(count);
  std::iota(values.begin(), values.end(), start);
  return values;
}

TEST(Safetensors, RoundTrip) {
  std::string path = ::testing::TempDir() + "round.safetensors";
  std::vector<float> a = iota(6);
  std::vector<int32_t> b = {7, -8};
  ASSERT_TRUE(writeSafetensors(path,
                               {{"a", DType::F32, {2, 3}, a.data()},
                                {"b", DType::I32, {2}, b.data()}},
                               {{"note", "hello"}})
                  .ok());
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->entries().size(), 2u);
  const TensorEntry *entry = file->find("a");
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(reinterpret_cast<const float *>(file->bytes(*entry))[5], 5.0f);
  EXPECT_EQ(reinterpret_cast<const int32_t *>(file->bytes(*file->find("b")))[1],
            -8);
  EXPECT_EQ(file->metadata().at("note"), "hello");
}

TEST(Safetensors, CorruptFilesAreErrorsNotCrashes) {
  std::string path = ::testing::TempDir() + "valid.safetensors";
  std::vector<float> a = iota(64);
  ASSERT_TRUE(
      writeSafetensors(path, {{"a", DType::F32, {8, 8}, a.data()}}, {}).ok());
  std::string bytes = *readFile(path);
  std::string broken = ::testing::TempDir() + "broken.safetensors";
  // Every truncation, and every single-byte change of the header.
  for (size_t length = 0; length < bytes.size(); length += 7) {
    ASSERT_TRUE(writeFileAtomically(broken, bytes.substr(0, length)).ok());
    EXPECT_FALSE(SafetensorsFile::open(broken).ok()) << "length " << length;
  }
  size_t headerEnd = bytes.find("}") + 1;
  for (size_t i = 0; i < headerEnd; ++i) {
    for (char replacement : {'\0', '9', '"', '{', '\xff'}) {
      std::string copy = bytes;
      copy[i] = replacement;
      ASSERT_TRUE(writeFileAtomically(broken, copy).ok());
      // Either a clean error or a file whose entries lie inside the data.
      auto file = SafetensorsFile::open(broken);
      if (file.ok())
        for (const TensorEntry &entry : file->entries())
          EXPECT_LE(entry.end, copy.size());
    }
  }
  ASSERT_TRUE(writeFileAtomically(
                  broken, std::string("\x08\0\0\0\0\0\0\0{\"a\": 1}", 16))
                  .ok());
  auto file = SafetensorsFile::open(broken);
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("needs dtype, shape and data_offsets"),
            std::string::npos);
}

TEST(Safetensors, EveryChangedDataByteIsRefused) {
  // Each tensor's checksum is in the metadata: any change of its data is
  // an error naming the tensor, not wrong numbers.
  std::string path = ::testing::TempDir() + "checked.safetensors";
  std::vector<float> a = iota(64), b = iota(3, 7.0f);
  ASSERT_TRUE(writeSafetensors(path,
                               {{"a", DType::F32, {8, 8}, a.data()},
                                {"b", DType::F32, {3}, b.data()}},
                               {})
                  .ok());
  std::string bytes = *readFile(path);
  auto valid = SafetensorsFile::open(path);
  ASSERT_TRUE(valid.ok()) << valid.status();
  EXPECT_TRUE(valid->everyTensorChecked());
  std::string broken = ::testing::TempDir() + "changed.safetensors";
  size_t dataStart = bytes.size() - (64 + 3) * sizeof(float);
  int refused = 0;
  for (size_t i = dataStart; i < bytes.size(); ++i) {
    std::string copy = bytes;
    copy[i] = static_cast<char>(copy[i] ^ 0x10);
    ASSERT_TRUE(writeFileAtomically(broken, copy).ok());
    auto file = SafetensorsFile::open(broken);
    refused += !file.ok();
    if (!file.ok())
      EXPECT_NE(file.status().message().find("' is corrupt (its data does not "
                                             "match the checksum recorded "
                                             "with it)"),
                std::string::npos);
  }
  EXPECT_EQ(refused, static_cast<int>(bytes.size() - dataStart));
}

/// Two ranks each hold half the rows of `w` [4, 6]; rank 0 alone holds the
/// replicated `b` [6] and the scalar `s`.
void saveTwoRanks(const std::string &dir, uint64_t step, float base) {
  std::vector<float> w = iota(24, base), b = iota(6, base + 100);
  float s = base + 1000;
  ASSERT_TRUE(
      writeCheckpointShard(dir, step, 0,
                           {{"w", DType::F32, {4, 6}, {0, 0}, {2, 6}, w.data()},
                            {"b", DType::F32, {6}, {0}, {6}, b.data()},
                            {"s", DType::F32, {}, {}, {}, &s}})
          .ok());
  ASSERT_TRUE(writeCheckpointShard(
                  dir, step, 1,
                  {{"w", DType::F32, {4, 6}, {2, 0}, {2, 6}, w.data() + 12}})
                  .ok());
  CheckpointInfo info{step, 17, 4096, 2};
  absl::Status status = commitCheckpoint(dir, info);
  ASSERT_TRUE(status.ok()) << status;
}

/// Rank `rank`'s half (rows 2 rank, 2 rank + 1) of a 4 x 6 tensor "w" of
/// iota values, saved for `step` with `stamp`.
absl::Status writeHalfOfW(const std::string &dir, uint64_t step, int64_t rank,
                          const ShardStamp &stamp) {
  static const std::vector<float> w = iota(24);
  return writeCheckpointShard(
      dir, step, rank,
      {{"w", DType::F32, {4, 6}, {2 * rank, 0}, {2, 6}, w.data() + 12 * rank}},
      stamp);
}

TEST(Checkpoint, ReloadsUnderAnotherSlicing) {
  std::string dir = freshDir("reslice");
  saveTwoRanks(dir, 5, 0);
  auto reader = CheckpointReader::open(dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->info().step, 5u);
  EXPECT_EQ(reader->info().seed, 17u);
  EXPECT_EQ(reader->info().dataPosition, 4096u);
  EXPECT_EQ(reader->tensorNames(), (std::vector<std::string>{"b", "s", "w"}));
  // The whole tensor, on one rank.
  std::vector<float> whole(24);
  ASSERT_TRUE(
      reader->read("w", DType::F32, {4, 6}, {0, 0}, {4, 6}, whole.data()).ok());
  EXPECT_EQ(whole, iota(24));
  // A column split over three ranks instead of a row split over two.
  for (int64_t part = 0; part < 3; ++part) {
    std::vector<float> columns(8);
    ASSERT_TRUE(reader
                    ->read("w", DType::F32, {4, 6}, {0, 2 * part}, {4, 2},
                           columns.data())
                    .ok());
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t c = 0; c < 2; ++c)
        EXPECT_EQ(columns[r * 2 + c], static_cast<float>(r * 6 + 2 * part + c));
  }
  float s = 0;
  ASSERT_TRUE(reader->read("s", DType::F32, {}, {}, {}, &s).ok());
  EXPECT_EQ(s, 1000.0f);
}

TEST(Checkpoint, RefusesWhatDoesNotMatch) {
  std::string dir = freshDir("mismatch");
  saveTwoRanks(dir, 1, 0);
  auto reader = CheckpointReader::open(dir);
  ASSERT_TRUE(reader.ok());
  std::vector<float> buffer(64);
  absl::Status missing =
      reader->read("v", DType::F32, {4, 6}, {0, 0}, {4, 6}, buffer.data());
  EXPECT_EQ(missing.message(), "the checkpoint has no tensor 'v'");
  absl::Status shape =
      reader->read("w", DType::F32, {4, 8}, {0, 0}, {4, 8}, buffer.data());
  EXPECT_EQ(shape.message(), "tensor 'w' has shape [4, 6] in the checkpoint "
                             "but [4, 8] here");
  absl::Status dtype =
      reader->read("w", DType::BF16, {4, 6}, {0, 0}, {4, 6}, buffer.data());
  EXPECT_EQ(dtype.message(),
            "tensor 'w' is F32 in the checkpoint but BF16 here");
  absl::Status outside =
      reader->read("w", DType::F32, {4, 6}, {3, 0}, {2, 6}, buffer.data());
  EXPECT_FALSE(outside.ok());
  EXPECT_FALSE(CheckpointReader::open(freshDir("empty")).ok());
}

TEST(Checkpoint, CommitChecksTheShards) {
  std::string dir = freshDir("commit");
  std::vector<float> w = iota(24);
  // Rank 1's shard is missing.
  ASSERT_TRUE(
      writeCheckpointShard(
          dir, 1, 0, {{"w", DType::F32, {4, 6}, {0, 0}, {2, 6}, w.data()}})
          .ok());
  absl::Status status = commitCheckpoint(dir, {1, 0, 0, 2});
  EXPECT_NE(status.message().find("rank 1's shard"), std::string::npos)
      << status;
  // Two ranks store the same rows.
  ASSERT_TRUE(
      writeCheckpointShard(
          dir, 1, 1, {{"w", DType::F32, {4, 6}, {1, 0}, {2, 6}, w.data()}})
          .ok());
  status = commitCheckpoint(dir, {1, 0, 0, 2});
  EXPECT_NE(status.message().find("'w' is stored twice"), std::string::npos)
      << status;
  // Rows 2 and 3 are never stored.
  status = commitCheckpoint(dir, {1, 0, 0, 1});
  EXPECT_NE(
      status.message().find("is not fully stored: the slices hold 12 of 24"),
      std::string::npos)
      << status;
  // Nothing was committed.
  EXPECT_FALSE(CheckpointReader::open(dir).ok());
}

// A corrupt or hand-edited index is an error that names the problem, never
// a crash or an out-of-bounds read.
TEST(Checkpoint, CorruptIndexesAreRefused) {
  std::string dir = freshDir("index");
  saveTwoRanks(dir, 3, 0);
  std::string indexPath = checkpointStepDir(dir, 3) + "/index.json";
  std::string original = *readFile(indexPath);
  auto withIndex = [&](const std::string &text) {
    EXPECT_TRUE(writeFileAtomically(indexPath, text).ok());
    auto reader = CheckpointReader::open(dir);
    return reader.ok() ? std::string() : std::string(reader.status().message());
  };
  auto edited = [&](const std::function<void(nlohmann::json &)> &edit) {
    nlohmann::json index = nlohmann::json::parse(original);
    edit(index);
    return index.dump();
  };
  EXPECT_NE(withIndex("{").find("not a Triad checkpoint index"),
            std::string::npos);
  EXPECT_NE(withIndex(R"({"format": "triad-checkpoint", "version": 1, "step": 3,
      "seed": 0, "data_position": 0, "world_size": 1, "tensors": {"w": 5}})")
                .find("tensor 'w' is not an object"),
            std::string::npos);
  EXPECT_NE(withIndex(R"({"format": "triad-checkpoint", "version": 1, "step": 3,
      "seed": 0, "data_position": 0, "world_size": 1,
      "tensors": {"w": {"dtype": "F32", "shape": "big", "slices": []}}})")
                .find("invalid checkpoint index"),
            std::string::npos);
  // A slice whose sizes lack a dimension.
  EXPECT_NE(withIndex(edited([](nlohmann::json &index) {
              index["tensors"]["w"]["slices"][0]["sizes"] = {2};
            })).find("does not match the index"),
            std::string::npos);
  // Two slices claiming the same rows hide missing ones.
  EXPECT_NE(withIndex(edited([](nlohmann::json &index) {
              index["tensors"]["w"]["slices"][1]["offsets"] = {0, 0};
            })).find("overlap"),
            std::string::npos);
  // A shape of more elements than any file holds.
  EXPECT_NE(
      withIndex(edited([](nlohmann::json &index) {
        index["tensors"]["w"]["shape"] = {int64_t(1) << 40, int64_t(1) << 40};
      })).find("tensor 'w' has an invalid shape"),
      std::string::npos);
  // A slice reaching past the tensor.
  EXPECT_NE(withIndex(edited([](nlohmann::json &index) {
              index["tensors"]["w"]["slices"][1]["offsets"] = {3, 0};
            })).find("lies outside its shape"),
            std::string::npos);
  // A slice without a file (found by the index fuzzer: it read a key that
  // is not there).
  EXPECT_NE(withIndex(edited([](nlohmann::json &index) {
              index["tensors"]["w"]["slices"][0].erase("file");
            })).find("a slice of 'w' names no file"),
            std::string::npos);
  EXPECT_NE(withIndex(edited([](nlohmann::json &index) {
              index["peak_lr"] = -1;
            })).find("'peak_lr' is not a positive number"),
            std::string::npos);
  EXPECT_EQ(
      withIndex(edited([](nlohmann::json &index) { index["peak_lr"] = 3e-4; })),
      "");
  // The hyper-parameters: an object of numbers.
  EXPECT_NE(withIndex(edited([](nlohmann::json &index) {
              index["hyperparameters"] = 3;
            })).find("'hyperparameters' is not an object"),
            std::string::npos);
  EXPECT_NE(withIndex(edited([](nlohmann::json &index) {
              index["hyperparameters"] = {{"warmup", "ten"}};
            })).find("hyper-parameter 'warmup' is not a number"),
            std::string::npos);
  EXPECT_EQ(withIndex(edited([](nlohmann::json &index) {
              index["hyperparameters"] = {{"warmup", 10}, {"beta1", 0.9}};
            })),
            "");
  // The mesh and the world size disagree.
  EXPECT_NE(withIndex(edited([](nlohmann::json &index) {
              index["mesh"] =
                  nlohmann::json::array({nlohmann::json::array({"dp", 2}),
                                         nlohmann::json::array({"tp", 2})});
            }))
                .find("its mesh (dp=2,tp=2) has 4 ranks but 'world_size' "
                      "says 2"),
            std::string::npos);
  // A slice in the shard of a rank the world does not have.
  EXPECT_NE(
      withIndex(edited([](nlohmann::json &index) { index["world_size"] = 1; }))
          .find("is in 'rank-00001.safetensors', rank 1, but "
                "'world_size' says 1 ranks"),
      std::string::npos);
  EXPECT_NE(withIndex(edited([](nlohmann::json &index) {
              index["world_size"] = 0;
            })).find("'world_size' is not a count of ranks"),
            std::string::npos);
  EXPECT_EQ(withIndex(original), "");
}

// Two jobs of the same seed saving the same step into one folder under
// other meshes, or at other data positions: the shards' stamps disagree
// with the index, which names both values.
TEST(Checkpoint, ShardsOfAnotherMeshOrDataPositionAreRefused) {
  CheckpointInfo run{3, 7, 96, 2, {{"dp", 2}, {"tp", 1}}};
  auto shard = [&](const std::string &dir, int64_t rank,
                   const CheckpointInfo &info) {
    return writeHalfOfW(dir, info.step, rank, stampOf(info));
  };
  std::string dir = freshDir("stamps");
  ASSERT_TRUE(shard(dir, 0, run).ok());
  ASSERT_TRUE(shard(dir, 1, run).ok());
  ASSERT_TRUE(commitCheckpoint(dir, run).ok());

  // Rank `rank`'s shard from a run like `run` but for `change`, the other
  // rank's from `run`: committing `run` names the difference.
  auto mixed = [&](const char *name, int64_t rank,
                   const std::function<void(CheckpointInfo &)> &change) {
    CheckpointInfo other = run;
    change(other);
    std::string folder = freshDir(name);
    EXPECT_TRUE(shard(folder, rank, other).ok());
    EXPECT_TRUE(shard(folder, 1 - rank, run).ok());
    return std::string(commitCheckpoint(folder, run).message());
  };
  std::string message = mixed("stamps-mesh", 0, [](CheckpointInfo &info) {
    info.mesh = {{"dp", 1}, {"tp", 2}};
  });
  EXPECT_NE(message.find("rank-00000.safetensors' was saved with mesh "
                         "dp=1,tp=2, but the checkpoint's index says "
                         "dp=2,tp=1 (did two jobs save into this folder?)"),
            std::string::npos)
      << message;
  message = mixed("stamps-position", 1,
                  [](CheckpointInfo &info) { info.dataPosition = 48; });
  EXPECT_NE(message.find("rank-00001.safetensors' was saved with data "
                         "position 48, but the checkpoint's index says 96"),
            std::string::npos)
      << message;
  message = mixed("stamps-world", 0, [](CheckpointInfo &info) {
    info.worldSize = 4;
    info.mesh = {{"dp", 4}, {"tp", 1}};
  });
  EXPECT_NE(message.find("was saved with world size 4, but the checkpoint's "
                         "index says 2"),
            std::string::npos)
      << message;
}

// --load auto's choice: the committed steps newest first, and the newest
// one whose shards all open with intact tensors.
TEST(Checkpoint, FindsTheNewestIntactCheckpoint) {
  std::string dir = freshDir("newest");
  EXPECT_TRUE(checkpointSteps(dir).empty());
  std::vector<std::string> skipped;
  EXPECT_EQ(newestIntactCheckpoint(dir, skipped).status().code(),
            absl::StatusCode::kNotFound);
  saveTwoRanks(dir, 2, 0);
  saveTwoRanks(dir, 10, 1);
  saveTwoRanks(dir, 7, 2);
  // Not checkpoints: an uncommitted step, a name of another spelling.
  ASSERT_EQ(::mkdir((dir + "/step-00000011").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((dir + "/step-12").c_str(), 0755), 0);
  EXPECT_EQ(checkpointSteps(dir), (std::vector<uint64_t>{10, 7, 2}));
  absl::StatusOr<uint64_t> newest = newestIntactCheckpoint(dir, skipped);
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(*newest, 10u);
  EXPECT_TRUE(skipped.empty());
  // A changed data byte in step 10's rank 1 shard (its last tensor's).
  std::string shard = checkpointStepDir(dir, 10) + "/rank-00001.safetensors";
  std::string bytes = *readFile(shard);
  bytes[bytes.size() - 2] ^= 1;
  ASSERT_TRUE(writeFileAtomically(shard, bytes).ok());
  newest = newestIntactCheckpoint(dir, skipped);
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(*newest, 7u);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("step 10: "), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[0].find("rank-00001.safetensors"), std::string::npos)
      << skipped[0];
  auto reader = CheckpointReader::open(dir, 7);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->info().step, 7u);
  EXPECT_TRUE(reader->verify().ok());
}

// A reader opens only the shards its reads need: rank 0's rows load with
// rank 1's shard gone, and a read that needs it names it.
TEST(Checkpoint, ReadsOpenOnlyTheShardsTheyNeed) {
  std::string dir = freshDir("lazy");
  saveTwoRanks(dir, 2, 0);
  ASSERT_EQ(
      std::remove(
          (checkpointStepDir(dir, 2) + "/rank-00001.safetensors").c_str()),
      0);
  auto reader = CheckpointReader::open(dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<float> rows(12);
  ASSERT_TRUE(
      reader->read("w", DType::F32, {4, 6}, {0, 0}, {2, 6}, rows.data()).ok());
  EXPECT_EQ(rows, iota(12));
  absl::Status missing =
      reader->read("w", DType::F32, {4, 6}, {1, 0}, {2, 6}, rows.data());
  EXPECT_NE(missing.message().find("rank-00001.safetensors"), std::string::npos)
      << missing;
  // A shard that does not hold what the index says: rank 1's shard
  // rewritten with one row.
  std::vector<float> row = iota(6);
  ASSERT_TRUE(
      writeCheckpointShard(
          dir, 2, 1, {{"w", DType::F32, {4, 6}, {2, 0}, {1, 6}, row.data()}})
          .ok());
  auto mixed = CheckpointReader::open(dir);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_NE(mixed->read("w", DType::F32, {4, 6}, {2, 0}, {2, 6}, rows.data())
                .message()
                .find("the slice of 'w' in 'rank-00001.safetensors' does not "
                      "match the index"),
            std::string::npos);
}

// A save killed at any moment leaves a loadable checkpoint: the previous
// one, or the new one once complete.
TEST(Checkpoint, KilledSaveLeavesTheLastCheckpoint) {
  std::string dir = freshDir("kill");
  saveTwoRanks(dir, 1, 0);
  std::vector<float> big = iota(1 << 22, 0.5f); // 16 MiB per shard
  for (int delayMicros : {0, 200, 2000, 20000}) {
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // The parent kills this save at some point; its outcome is what the
      // parent then finds on disk.
      absl::Status saved = writeCheckpointShard(
          dir, 2, 0,
          {{"w", DType::F32, {1 << 22}, {0}, {1 << 22}, big.data()}});
      if (saved.ok())
        saved = commitCheckpoint(dir, {2, 17, 0, 1});
      _exit(saved.ok() ? 0 : 1);
    }
    usleep(delayMicros);
    kill(child, SIGKILL);
    int status;
    waitpid(child, &status, 0);
    auto reader = CheckpointReader::open(dir);
    ASSERT_TRUE(reader.ok())
        << "after a kill at " << delayMicros << " us: " << reader.status();
    if (reader->info().step == 1) {
      std::vector<float> w(24);
      ASSERT_TRUE(
          reader->read("w", DType::F32, {4, 6}, {0, 0}, {4, 6}, w.data()).ok());
      EXPECT_EQ(w, iota(24));
    } else {
      ASSERT_EQ(reader->info().step, 2u);
      std::vector<float> last(1);
      ASSERT_TRUE(reader
                      ->read("w", DType::F32, {1 << 22}, {(1 << 22) - 1}, {1},
                             last.data())
                      .ok());
      EXPECT_EQ(last[0], big.back());
    }
  }
}

TEST(Files, AWriteRemovesTheTemporariesOfDeadWriters) {
  std::string dir = madeDir("leftovers");
  std::string target = dir + "/rank-00000.safetensors";
  // A writer killed mid-write: its process is gone.
  pid_t child = endedProcess();
  ASSERT_GT(child, 0);
  std::string dead = target + ".tmp." + std::to_string(child);
  std::string alive = target + ".tmp." + std::to_string(getppid());
  std::string other =
      dir + "/rank-00001.safetensors.tmp." + std::to_string(child);
  for (const std::string &path : {dead, alive, other})
    ASSERT_TRUE(writeFileAtomically(path, "partial").ok());
  ASSERT_TRUE(writeFileAtomically(target, "whole").ok());
  EXPECT_NE(access(dead.c_str(), F_OK), 0) << "a dead writer's temporary";
  EXPECT_EQ(access(alive.c_str(), F_OK), 0) << "a live process's temporary";
  EXPECT_EQ(access(other.c_str(), F_OK), 0) << "another file's temporary";
  EXPECT_EQ(*readFile(target), "whole");
}

TEST(FolderLock, ASecondHolderIsRefusedAndAStaleLockTakenOver) {
  std::string dir = madeDir("lock");
  {
    absl::StatusOr<FolderLock> first = FolderLock::acquire(dir);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(first->staleNote(), "");
    // The holder runs (this process): a second job is refused, named.
    absl::StatusOr<FolderLock> second = FolderLock::acquire(dir);
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(second.status().message().find("is in use by process " +
                                             std::to_string(getpid())),
              std::string::npos)
        << second.status();
  }
  // Released with its holder: the folder can be locked again.
  ASSERT_TRUE(FolderLock::acquire(dir).ok());
  // The lock of a process that is gone is stale.
  pid_t child = endedProcess();
  ASSERT_GT(child, 0);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  ASSERT_TRUE(writeFileAtomically(dir + "/.lock",
                                  std::string("host ") + host + " pid " +
                                      std::to_string(child) + "\n")
                  .ok());
  absl::StatusOr<FolderLock> taken = FolderLock::acquire(dir);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_NE(taken->staleNote().find("took over the stale lock of process " +
                                    std::to_string(child)),
            std::string::npos)
      << taken->staleNote();
  taken->release();
  // Another host's lock cannot be checked from here: refused, with how
  // to remove it.
  ASSERT_TRUE(
      writeFileAtomically(dir + "/.lock", "host elsewhere-node pid 1\n").ok());
  absl::StatusOr<FolderLock> remote = FolderLock::acquire(dir);
  ASSERT_FALSE(remote.ok());
  EXPECT_NE(remote.status().message().find(
                "process 1 on host elsewhere-node (its lock " + dir +
                "/.lock): save into another folder, or remove " + dir +
                "/.lock if that job no longer runs"),
            std::string::npos)
      << remote.status();
}

TEST(Checkpoint, DeepJsonIsAnErrorNotACrash) {
  EXPECT_EQ(triad::jsonDepth(R"({"a": [1, {"b": "[[[[{{"}], "c": []})"), 3u);
  // An index nested 100,000 deep, and a shard header likewise.
  std::string dir = freshDir("deep");
  saveTwoRanks(dir, 1, 0);
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  ASSERT_TRUE(
      writeFileAtomically(dir + "/step-00000001/index.json", deep).ok());
  auto reader = CheckpointReader::open(dir);
  ASSERT_FALSE(reader.ok());
  EXPECT_NE(reader.status().message().find("nests 100000 levels deep"),
            std::string::npos)
      << reader.status();
  std::string header = "{\"a\": " + deep + "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  for (int b = 0; b < 8; ++b)
    file[b] = static_cast<char>((header.size() >> (8 * b)) & 0xFF);
  file += header;
  std::string path = ::testing::TempDir() + "deep.safetensors";
  ASSERT_TRUE(writeFileAtomically(path, file).ok());
  auto opened = SafetensorsFile::open(path);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("levels deep"), std::string::npos)
      << opened.status();
}

TEST(Checkpoint, ShardsOfAnotherRunOrStepAreRefused) {
  // Two jobs saving step 3 into one folder: rank 0's shard from the job of
  // seed 1, rank 1's from the job of seed 2, whose index would win.
  std::string dir = freshDir("mixed");
  auto shard = [&](int64_t rank, uint64_t step, uint64_t seed) {
    return writeHalfOfW(dir, step, rank, {seed});
  };
  ASSERT_TRUE(shard(0, 3, 1).ok());
  ASSERT_TRUE(shard(1, 3, 2).ok());
  absl::Status committed = commitCheckpoint(dir, {3, 2, 0, 2});
  ASSERT_FALSE(committed.ok());
  EXPECT_NE(committed.message().find(
                "rank-00000.safetensors' was saved at step 3 with seed 1, but "
                "the checkpoint's index says step 3 with seed 2 (did two jobs "
                "save into this folder?)"),
            std::string::npos)
      << committed;
  // A committed checkpoint whose shard is later replaced by another
  // step's: the reader refuses it when it opens the shard.
  ASSERT_TRUE(shard(0, 3, 2).ok());
  ASSERT_TRUE(commitCheckpoint(dir, {3, 2, 0, 2}).ok());
  ASSERT_TRUE(shard(1, 4, 2).ok());
  ASSERT_EQ(
      std::rename((dir + "/step-00000004/rank-00001.safetensors").c_str(),
                  (dir + "/step-00000003/rank-00001.safetensors").c_str()),
      0);
  auto reader = CheckpointReader::open(dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<float> out(24);
  absl::Status read =
      reader->read("w", DType::F32, {4, 6}, {0, 0}, {4, 6}, out.data());
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.message().find("was saved at step 4 with seed 2"),
            std::string::npos)
      << read;
}

} // namespace
