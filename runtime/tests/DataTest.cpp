//===- DataTest.cpp - token corpora and deterministic sampling ------------===//

#include "runtime/data/TokenFile.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <vector>

using namespace triad::rt;

namespace {

/// Writes `ids` as little-endian tokens of `width` bytes to a fresh file.
std::string writeTokens(const std::string &name,
                        const std::vector<uint32_t> &ids, int width = 2) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream out(path, std::ios::binary);
  for (uint32_t id : ids)
    for (int b = 0; b < width; ++b)
      out.put(static_cast<char>((id >> (8 * b)) & 0xFF));
  return path;
}

std::vector<uint32_t> ramp(int count, int modulo) {
  std::vector<uint32_t> ids;
  for (int i = 0; i < count; ++i)
    ids.push_back(static_cast<uint32_t>(i % modulo));
  return ids;
}

TEST(TokenFile, ReadsLittleEndianTokens) {
  std::string path = writeTokens("u16.bin", {1, 258, 65535});
  auto file = TokenFile::open(path, TokenWidth::U16, 65536);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->size(), 3);
  EXPECT_EQ(file->at(1), 258u);
  EXPECT_EQ(file->at(2), 65535u);
  std::string wide = writeTokens("u32.bin", {70000, 3}, 4);
  auto file32 = TokenFile::open(wide, TokenWidth::U32, 100000);
  ASSERT_TRUE(file32.ok()) << file32.status();
  EXPECT_EQ(file32->at(0), 70000u);
}

TEST(TokenFile, ErrorsNameTheProblem) {
  auto missing =
      TokenFile::open("/nonexistent/corpus.bin", TokenWidth::U16, 256);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(
                "cannot open data file '/nonexistent/corpus.bin'"),
            std::string::npos);

  std::string odd = ::testing::TempDir() + "odd.bin";
  std::ofstream(odd, std::ios::binary) << "abc";
  auto oddFile = TokenFile::open(odd, TokenWidth::U16, 256);
  ASSERT_FALSE(oddFile.ok());
  EXPECT_NE(oddFile.status().message().find(
                "has 3 bytes, not a whole number of 2-byte tokens"),
            std::string::npos);

  std::string big = writeTokens("big.bin", {1, 2, 300, 4});
  auto bigFile = TokenFile::open(big, TokenWidth::U16, 256);
  ASSERT_FALSE(bigFile.ok());
  EXPECT_NE(bigFile.status().message().find(
                "token 2 has id 300, outside the vocabulary [0, 256)"),
            std::string::npos);

  auto directory = TokenFile::open(::testing::TempDir(), TokenWidth::U16, 256);
  EXPECT_FALSE(directory.ok());
}

TEST(Sampler, NeedsOneWindow) {
  std::string path = writeTokens("short.bin", ramp(8, 256));
  auto file = TokenFile::open(path, TokenWidth::U16, 256);
  ASSERT_TRUE(file.ok());
  auto tooLong = Sampler::create(*file, 8, 0);
  ASSERT_FALSE(tooLong.ok());
  EXPECT_NE(tooLong.status().message().find(
                "has 8 tokens, fewer than one training window of seq + 1 = 9"),
            std::string::npos);
  EXPECT_TRUE(Sampler::create(*file, 7, 0).ok());
}

TEST(Sampler, LabelsFollowTokensAndStayInTheCorpus) {
  std::string path = writeTokens("ramp.bin", ramp(1000, 997));
  auto file = TokenFile::open(path, TokenWidth::U16, 997);
  ASSERT_TRUE(file.ok());
  auto sampler = Sampler::create(*file, 16, 42);
  ASSERT_TRUE(sampler.ok());
  std::vector<int32_t> tokens(4 * 16), labels(4 * 16);
  sampler->fill(3, 0, 4, tokens.data(), labels.data());
  for (int r = 0; r < 4; ++r) {
    int64_t start = sampler->offset(3, r);
    EXPECT_GE(start, 0);
    EXPECT_LE(start + 16, file->size() - 1);
    for (int s = 0; s < 16; ++s) {
      EXPECT_EQ(tokens[r * 16 + s], static_cast<int32_t>(file->at(start + s)));
      EXPECT_EQ(labels[r * 16 + s],
                static_cast<int32_t>(file->at(start + s + 1)));
    }
  }
}

// The global batch of a step is the same however data parallelism splits
// it: samples are keyed by their global index.
TEST(Sampler, GlobalBatchIsTheSameOnEveryMesh) {
  std::string path = writeTokens("mesh.bin", ramp(5000, 256));
  auto file = TokenFile::open(path, TokenWidth::U16, 256);
  ASSERT_TRUE(file.ok());
  auto sampler = Sampler::create(*file, 8, 7);
  ASSERT_TRUE(sampler.ok());
  const int batch = 8, seq = 8;
  std::vector<int32_t> whole(batch * seq), labels(batch * seq);
  sampler->fill(5, 0, batch, whole.data(), labels.data());
  for (int dp : {2, 4, 8}) {
    int rows = batch / dp;
    for (int rank = 0; rank < dp; ++rank) {
      std::vector<int32_t> part(rows * seq), partLabels(rows * seq);
      sampler->fill(5, rank * rows, rows, part.data(), partLabels.data());
      for (int i = 0; i < rows * seq; ++i)
        ASSERT_EQ(part[i], whole[rank * rows * seq + i]) << "dp " << dp;
    }
  }
}

TEST(Sampler, StepsAndSeedsDrawDifferentWindows) {
  std::string path = writeTokens("draws.bin", ramp(100000, 256));
  auto file = TokenFile::open(path, TokenWidth::U16, 256);
  ASSERT_TRUE(file.ok());
  auto a = Sampler::create(*file, 16, 1);
  auto b = Sampler::create(*file, 16, 2);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->offset(3, 5), a->offset(3, 5));
  EXPECT_NE(a->offset(3, 5), a->offset(4, 5));
  EXPECT_NE(a->offset(3, 5), a->offset(3, 6));
  EXPECT_NE(a->offset(3, 5), b->offset(3, 5));
  // Offsets spread over the corpus.
  std::set<int64_t> buckets;
  for (int i = 0; i < 200; ++i)
    buckets.insert(a->offset(0, i) / 10000);
  EXPECT_EQ(buckets.size(), 10u);
}

// A prefix LM's prefix lengths: drawn per global sample in [0, seq), the
// same for a sample whichever piece of the batch holds it, and the labels
// a prefix shows to their position hidden.
TEST(Sampler, PrefixLengthsHideTheLabelsThePrefixShows) {
  std::string path = writeTokens("prefix.bin", ramp(5000, 256));
  auto file = TokenFile::open(path, TokenWidth::U16, 256);
  ASSERT_TRUE(file.ok());
  const int seq = 16, batch = 64;
  auto sampler = Sampler::create(*file, seq, 3);
  auto other = Sampler::create(*file, seq, 4);
  ASSERT_TRUE(sampler.ok() && other.ok());
  std::vector<int32_t> tokens(batch * seq), labels(batch * seq), lengths(batch);
  sampler->fill(2, 0, batch, tokens.data(), labels.data());
  std::vector<int32_t> unmasked = labels;
  sampler->fillPrefixes(2, 0, batch, lengths.data(), labels.data(), -100);
  std::set<int32_t> seen;
  for (int r = 0; r < batch; ++r) {
    int32_t length = lengths[r];
    seen.insert(length);
    ASSERT_GE(length, 0);
    ASSERT_LT(length, seq);
    EXPECT_EQ(length, sampler->prefixLength(2, r));
    for (int i = 0; i < seq; ++i)
      EXPECT_EQ(labels[r * seq + i],
                i + 1 < length ? -100 : unmasked[r * seq + i])
          << "sample " << r << " position " << i << " prefix " << length;
  }
  // Lengths spread over the sequence and change with the step and seed.
  EXPECT_GT(seen.size(), 8u);
  int differentStep = 0, differentSeed = 0;
  for (int r = 0; r < batch; ++r) {
    differentStep += sampler->prefixLength(3, r) != lengths[r];
    differentSeed += other->prefixLength(2, r) != lengths[r];
  }
  EXPECT_GT(differentStep, batch / 2);
  EXPECT_GT(differentSeed, batch / 2);
  // A piece of the batch gets its samples' lengths.
  std::vector<int32_t> piece(8), pieceLabels(8 * seq);
  sampler->fillPrefixes(2, 40, 8, piece.data(), pieceLabels.data(), -1);
  for (int r = 0; r < 8; ++r)
    EXPECT_EQ(piece[r], lengths[40 + r]);
}

} // namespace
