//===- TokenFile.h - token corpora and deterministic sampling ----*- C++
//-*-===//
//
// A corpus is a flat file of token ids, uint16 or uint32 little-endian (the
// nanoGPT / Megatron raw layout). Training samples are windows of seq + 1
// tokens (tokens, and labels one position later) at offsets drawn from
// (seed, step, global sample index) by the counter-based generator, so a
// step's global batch is the same whatever the mesh splits it into.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_DATA_TOKENFILE_H
#define TRIAD_RUNTIME_DATA_TOKENFILE_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace triad::rt {

enum class TokenWidth { U16 = 2, U32 = 4 };

/// A read-only, memory-mapped corpus whose every id was checked to be in
/// the vocabulary when it was opened.
class TokenFile {
public:
  /// Opens and validates `path`: it exists, its size is a whole number of
  /// tokens, and every id is below `vocab`. The error names the file and,
  /// for a bad id, its position.
  static absl::StatusOr<TokenFile> open(const std::string &path,
                                        TokenWidth width, int64_t vocab);

  TokenFile(TokenFile &&other) noexcept;
  TokenFile &operator=(TokenFile &&other) noexcept;
  TokenFile(const TokenFile &) = delete;
  TokenFile &operator=(const TokenFile &) = delete;
  ~TokenFile();

  int64_t size() const { return count; }
  uint32_t at(int64_t index) const;
  const std::string &path() const { return filePath; }

private:
  TokenFile() = default;
  std::string filePath;
  const unsigned char *data = nullptr;
  size_t bytes = 0;
  int64_t count = 0;
  TokenWidth width = TokenWidth::U16;
};

/// Draws training windows from a corpus.
class Sampler {
public:
  /// Fails when the corpus is shorter than one window (seq + 1 tokens).
  static absl::StatusOr<Sampler> create(const TokenFile &file, int64_t seq,
                                        uint64_t seed);

  /// The corpus offset of global sample `sample` of training step `step`.
  int64_t offset(uint64_t step, uint64_t sample) const;

  /// Fills `rows` windows of `seq` tokens and labels (row-major int32) for
  /// the global samples [firstSample, firstSample + rows) of `step`.
  void fill(uint64_t step, uint64_t firstSample, int64_t rows, int32_t *tokens,
            int32_t *labels) const;

  /// The prefix length of global sample `sample` of `step` for a prefix LM
  /// (GLM): uniform in [0, seq), drawn from the seed, the step and the
  /// sample alone, so the same on every mesh. Positions below it see the
  /// whole prefix, the others attend causally; 0 is a causal sample.
  int32_t prefixLength(uint64_t step, uint64_t sample) const;

  /// Fills the prefix lengths of the global samples [firstSample,
  /// firstSample + rows) of `step` and sets to `ignoreIndex` the labels
  /// (filled by `fill`) their prefix shows to their position: position i
  /// of a sample with prefix length L sees token i + 1, its label, when
  /// i + 1 < L.
  void fillPrefixes(uint64_t step, uint64_t firstSample, int64_t rows,
                    int32_t *lengths, int32_t *labels,
                    int32_t ignoreIndex) const;

  int64_t seq() const { return sequence; }

  /// A sampler without a corpus, for a trainer that only evaluates or
  /// samples: offset, fill and fillPrefixes must not be called.
  static Sampler withoutData(int64_t seq, uint64_t seed) {
    return Sampler(nullptr, seq, seed);
  }
  bool hasData() const { return file != nullptr; }

private:
  Sampler(const TokenFile *file, int64_t seq, uint64_t seed)
      : file(file), sequence(seq), seed(seed) {}
  Sampler(const TokenFile &file, int64_t seq, uint64_t seed)
      : file(&file), sequence(seq), seed(seed) {}
  const TokenFile *file;
  int64_t sequence;
  uint64_t seed;
};

} // namespace triad::rt

#endif // TRIAD_RUNTIME_DATA_TOKENFILE_H
