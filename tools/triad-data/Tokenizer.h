//===- Tokenizer.h - the tokenizers triad-data encodes with ------*- C++
//-*-===//
//
// A text-to-ids encoder behind a small interface: byte-level (ids 0..255)
// or a SentencePiece model (the library itself). Kept apart from Abseil's
// headers: SentencePiece's header declares its own absl::string_view.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_TOOLS_TRIAD_DATA_TOKENIZER_H
#define TRIAD_TOOLS_TRIAD_DATA_TOKENIZER_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace triad::data {

class Tokenizer {
public:
  virtual ~Tokenizer() = default;
  /// The ids of `text`, appended to `ids`.
  virtual void encode(const std::string &text,
                      std::vector<uint32_t> &ids) const = 0;
  /// The text of `ids` (an id the tokenizer lacks is left out).
  virtual std::string decode(const std::vector<uint32_t> &ids) const = 0;
  /// The number of ids (the largest id plus one).
  virtual int64_t vocabulary() const = 0;
  /// The end-of-document id, or -1 when the tokenizer has none.
  virtual int64_t endOfDocument() const = 0;
  /// For messages: "byte-level", "SentencePiece model.model".
  virtual std::string describe() const = 0;
};

std::unique_ptr<Tokenizer> byteLevelTokenizer();

/// The SentencePiece model at `path`, or null with `error` set.
std::unique_ptr<Tokenizer> sentencePieceTokenizer(const std::string &path,
                                                  std::string &error);

/// What a Hugging Face tokenizer made of some documents.
struct Encoded {
  /// Each document's ids (no end-of-document ids added).
  std::vector<std::vector<uint32_t>> documents;
  int64_t vocabulary = 0;
  /// The tokenizer's end-of-text id (<|endoftext|>, </s>, <eos> or
  /// <|end_of_text|>, the first it has), or -1.
  int64_t endOfDocument = -1;
};

/// Encodes `files` with the Hugging Face tokenizer.json at `path`, through
/// Hugging Face's own library in the project's Python environment
/// (TRIAD_PYTHON, else TRIAD_VENV/bin/python, else the checkout's
/// .venv/bin/python, which scripts/setup.sh makes); false with `error` set
/// when that fails.
bool encodeWithHuggingFace(const std::string &path,
                           const std::vector<std::string> &files,
                           Encoded &encoded, std::string &error);

/// Encodes `text` with the Hugging Face tokenizer.json at `path` (through
/// the same helper), setting `ids`, and the tokenizer's vocabulary and
/// end-of-text id in `encoded` (its documents left empty).
bool encodeTextWithHuggingFace(const std::string &path, const std::string &text,
                               std::vector<uint32_t> &ids, Encoded &encoded,
                               std::string &error);

/// The text of `ids` under the Hugging Face tokenizer.json at `path`.
bool decodeWithHuggingFace(const std::string &path,
                           const std::vector<uint32_t> &ids, std::string &text,
                           std::string &error);

} // namespace triad::data

#endif // TRIAD_TOOLS_TRIAD_DATA_TOKENIZER_H
