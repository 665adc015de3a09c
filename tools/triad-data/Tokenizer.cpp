//===- Tokenizer.cpp - the tokenizers triad-data encodes with -------------===//

#include "tools/triad-data/Tokenizer.h"

#ifdef TRIAD_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace triad::data {

namespace {

class ByteLevel : public Tokenizer {
public:
  void encode(const std::string &text,
              std::vector<uint32_t> &ids) const override {
    for (unsigned char c : text)
      ids.push_back(c);
  }
  int64_t vocabulary() const override { return 256; }
  int64_t endOfDocument() const override { return -1; }
  std::string describe() const override { return "byte-level"; }
};

#ifdef TRIAD_HAVE_SENTENCEPIECE
class SentencePiece : public Tokenizer {
public:
  SentencePiece(std::string path) : path(std::move(path)) {}

  bool load(std::string &error) {
    sentencepiece::util::Status status = processor.Load(path);
    if (!status.ok()) {
      error = status.ToString();
      return false;
    }
    return true;
  }
  void encode(const std::string &text,
              std::vector<uint32_t> &ids) const override {
    for (int id : processor.EncodeAsIds(text))
      ids.push_back(static_cast<uint32_t>(id));
  }
  int64_t vocabulary() const override { return processor.GetPieceSize(); }
  int64_t endOfDocument() const override { return processor.eos_id(); }
  std::string describe() const override { return "SentencePiece " + path; }

private:
  std::string path;
  sentencepiece::SentencePieceProcessor processor;
};
#endif

} // namespace

std::unique_ptr<Tokenizer> byteLevelTokenizer() {
  return std::make_unique<ByteLevel>();
}

std::unique_ptr<Tokenizer> sentencePieceTokenizer(const std::string &path,
                                                  std::string &error) {
#ifdef TRIAD_HAVE_SENTENCEPIECE
  auto tokenizer = std::make_unique<SentencePiece>(path);
  if (!tokenizer->load(error))
    return nullptr;
  return tokenizer;
#else
  (void)path;
  error = "this triad-data was built without SentencePiece (install "
          "libsentencepiece-dev, as scripts/setup.sh does, and rebuild)";
  return nullptr;
#endif
}

} // namespace triad::data
