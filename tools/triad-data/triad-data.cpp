//===- triad-data.cpp - turns text into a token corpus --------------------===//
//
// triad-data --output FILE [--sentencepiece MODEL] [--eod auto|none|ID]
//            [--width auto|u16|u32] [--validation F --validation-output V]
//            TEXT...
//
// Each text file is a document: encoded byte-level (ids 0..255, a
// vocabulary of 256) or with a SentencePiece model, followed by the
// end-of-document id where there is one, and the documents concatenated as
// little-endian uint16 (or uint32, which a vocabulary over 65,536 needs):
// the flat layout triad-run reads. --validation holds out the last
// documents (at least that fraction of the tokens) in a second file. Files
// are written atomically (a temporary file in the same folder, fsync,
// rename). Bad input is one line on stderr and exit status 1.
//
//===----------------------------------------------------------------------===//

#include "runtime/support/CommandLine.h"
#include "runtime/support/Files.h"
#include "tools/triad-data/Tokenizer.h"

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <vector>

ABSL_FLAG(std::string, output, "", "Token file to write (required)");
ABSL_FLAG(std::string, width, "auto",
          "Token width: u16, u32, or auto (u16 when the vocabulary fits, "
          "else u32)");
ABSL_FLAG(std::string, sentencepiece, "",
          "Encode with this SentencePiece model (a .model file) instead of "
          "byte-level tokens");
ABSL_FLAG(std::string, tokenizer, "",
          "Encode with this Hugging Face tokenizer.json, through Hugging "
          "Face's tokenizers library in the project's Python environment "
          "(.venv, which scripts/setup.sh makes)");
ABSL_FLAG(std::string, eod, "auto",
          "The end-of-document id appended after each file: auto (the "
          "tokenizer's end-of-sequence id; byte-level tokens have none), "
          "none, or a number below the vocabulary");
ABSL_FLAG(int, threads, 0,
          "Threads encoding documents in parallel (0: one per core)");
ABSL_FLAG(double, validation, 0.0,
          "Hold out at least this fraction of the tokens (the last whole "
          "documents, or the end of a single one) for validation");
ABSL_FLAG(std::string, validation_output, "",
          "With --validation: the held-out token file to write");

namespace {

[[noreturn]] void fail(const std::string &message) {
  std::fprintf(stderr, "triad-data: error: %s\n", message.c_str());
  std::exit(1);
}

/// The size of the regular file `path`, or why it is not one.
absl::StatusOr<size_t> regularFileSize(const std::string &path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0)
    return absl::NotFoundError(
        absl::StrCat("cannot read '", path, "': ", strerror(errno)));
  if (!S_ISREG(info.st_mode))
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a regular file"));
  return static_cast<size_t>(info.st_size);
}

/// The bytes of the regular file `path`.
absl::StatusOr<std::string> readText(const std::string &path) {
  if (absl::StatusOr<size_t> size = regularFileSize(path); !size.ok())
    return size.status();
  return triad::rt::readFile(path);
}

/// Ids as little-endian uint16 or uint32.
std::string pack(const std::vector<uint32_t> &ids, size_t begin, size_t end,
                 int tokenBytes) {
  std::string bytes;
  bytes.reserve((end - begin) * tokenBytes);
  for (size_t i = begin; i < end; ++i)
    for (int b = 0; b < tokenBytes; ++b)
      bytes.push_back(static_cast<char>((ids[i] >> (8 * b)) & 0xff));
  return bytes;
}

} // namespace

int main(int argc, char **argv) {
  absl::SetProgramUsageMessage(
      "turns text files (one document each) into a token corpus: byte-level "
      "(vocabulary 256) or with a SentencePiece model\n\n"
      "  triad-data --output corpus.bin notes.txt more.txt\n"
      "  triad-data --sentencepiece m.model --validation 0.05 "
      "--validation-output valid.bin --output train.bin *.txt\n");
  triad::rt::underscoreFlagNames(argc, argv);
  std::vector<char *> positional = absl::ParseCommandLine(argc, argv);
  std::string output = absl::GetFlag(FLAGS_output);
  std::string width = absl::GetFlag(FLAGS_width);
  std::string eodFlag = absl::GetFlag(FLAGS_eod);
  double validation = absl::GetFlag(FLAGS_validation);
  std::string validationOutput = absl::GetFlag(FLAGS_validation_output);
  if (output.empty())
    fail("give --output FILE");
  if (width != "auto" && width != "u16" && width != "u32")
    fail(absl::StrCat("unknown --width '", width,
                      "' (expected auto, u16 or u32)"));
  if (!(validation >= 0.0 && validation < 1.0))
    fail(absl::StrCat("--validation must be a fraction in [0, 1), got ",
                      validation));
  if ((validation > 0.0) != !validationOutput.empty())
    fail("give --validation and --validation-output together");
  if (positional.size() < 2)
    fail("give at least one text file to read");
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0)
    fail(absl::StrCat("--threads must be 0 (one per core) or more, got ",
                      threads));
  if (threads == 0)
    threads = std::max(1u, std::thread::hardware_concurrency());

  // Every document's ids, the vocabulary and the tokenizer's end id.
  std::vector<std::vector<uint32_t>> documents;
  int64_t vocabulary = 0, tokenizerEnd = -1;
  std::string described;
  size_t textBytes = 0;
  std::vector<std::string> files(positional.begin() + 1, positional.end());
  std::string sentencePiece = absl::GetFlag(FLAGS_sentencepiece);
  std::string huggingFace = absl::GetFlag(FLAGS_tokenizer);
  if (!sentencePiece.empty() && !huggingFace.empty())
    fail("give --sentencepiece or --tokenizer, not both");
  auto started = std::chrono::steady_clock::now();
  if (!huggingFace.empty()) {
    // The library reads the files itself; here only their checks and sizes.
    for (const std::string &file : files) {
      absl::StatusOr<size_t> size = regularFileSize(file);
      if (!size.ok())
        fail(std::string(size.status().message()));
      textBytes += *size;
    }
    triad::data::Encoded encoded;
    std::string error;
    if (!triad::data::encodeWithHuggingFace(huggingFace, files, encoded, error))
      fail(absl::StrCat("--tokenizer '", huggingFace, "': ", error));
    documents = std::move(encoded.documents);
    vocabulary = encoded.vocabulary;
    tokenizerEnd = encoded.endOfDocument;
    described =
        absl::StrCat("tokens of the Hugging Face tokenizer ", huggingFace);
  } else {
    std::unique_ptr<triad::data::Tokenizer> tokenizer;
    if (!sentencePiece.empty()) {
      std::string error;
      tokenizer = triad::data::sentencePieceTokenizer(sentencePiece, error);
      if (!tokenizer)
        fail(absl::StrCat("--sentencepiece '", sentencePiece, "': ", error));
      described = absl::StrCat("tokens of ", tokenizer->describe());
    } else {
      tokenizer = triad::data::byteLevelTokenizer();
      described = "byte-level tokens";
    }
    std::vector<std::string> texts;
    for (const std::string &file : files) {
      absl::StatusOr<std::string> text = readText(file);
      if (!text.ok())
        fail(std::string(text.status().message()));
      textBytes += text->size();
      texts.push_back(std::move(*text));
    }
    // The documents are encoded on --threads threads (the tokenizers'
    // encoding is const and thread-safe), each taking the next.
    documents.resize(texts.size());
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t d = next++; d < texts.size(); d = next++)
        tokenizer->encode(texts[d], documents[d]);
    };
    std::vector<std::thread> workers;
    for (int t = 1; t < threads; ++t)
      workers.emplace_back(work);
    work();
    for (std::thread &worker : workers)
      worker.join();
    vocabulary = tokenizer->vocabulary();
    tokenizerEnd = tokenizer->endOfDocument();
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();

  int64_t eod = -1;
  if (eodFlag == "auto") {
    eod = tokenizerEnd;
  } else if (eodFlag != "none") {
    if (!absl::SimpleAtoi(eodFlag, &eod) || eod < 0 || eod >= vocabulary)
      fail(absl::StrCat("--eod must be auto, none or an id below the "
                        "vocabulary (",
                        vocabulary, "), got '", eodFlag, "'"));
  }
  if (width == "auto")
    width = vocabulary <= 65536 ? "u16" : "u32";
  if (width == "u16" && vocabulary > 65536)
    fail(absl::StrCat("the vocabulary has ", vocabulary,
                      " ids, more than u16 holds; use --width u32"));
  int tokenBytes = width == "u16" ? 2 : 4;

  // The documents one after the other, each followed by the end id.
  std::vector<uint32_t> ids;
  std::vector<size_t> documentEnds;
  for (const std::vector<uint32_t> &document : documents) {
    ids.insert(ids.end(), document.begin(), document.end());
    if (eod >= 0 && !document.empty())
      ids.push_back(static_cast<uint32_t>(eod));
    documentEnds.push_back(ids.size());
  }
  if (ids.empty())
    fail("the input files are empty");

  // The held-out part: the last whole documents that make the fraction, or
  // the end of the stream when the first document alone would have to go.
  size_t split = ids.size();
  size_t heldDocuments = 0;
  if (validation > 0.0) {
    size_t wanted = static_cast<size_t>(validation * ids.size() + 0.5);
    if (wanted == 0)
      wanted = 1;
    for (size_t d = documentEnds.size(); d-- > 1;) {
      split = documentEnds[d - 1];
      ++heldDocuments;
      if (ids.size() - split >= wanted)
        break;
    }
    if (ids.size() - split < wanted) {
      split = ids.size() - wanted;
      heldDocuments = 0;
    }
    if (split == 0)
      fail("--validation leaves no tokens to train on");
  }

  if (absl::Status status = triad::rt::writeFileAtomically(
          output, pack(ids, 0, split, tokenBytes));
      !status.ok())
    fail(std::string(status.message()));
  if (validation > 0.0)
    if (absl::Status status = triad::rt::writeFileAtomically(
            validationOutput, pack(ids, split, ids.size(), tokenBytes));
        !status.ok())
      fail(std::string(status.message()));

  const std::string &what = described;
  std::printf("triad-data: wrote %zu %s (vocabulary %lld, %s%s) from %zu "
              "file(s) to %s\n",
              split, what.c_str(), static_cast<long long>(vocabulary),
              width.c_str(),
              eod >= 0 ? absl::StrCat(", end of document ", eod).c_str() : "",
              positional.size() - 1, output.c_str());
  if (validation > 0.0)
    std::printf(
        "triad-data: held out %zu tokens (%s) for validation in %s\n",
        ids.size() - split,
        heldDocuments > 0
            ? absl::StrCat("the last ", heldDocuments, " document(s)").c_str()
            : "the end of the token stream: whole documents could not "
              "give them without leaving none to train on",
        validationOutput.c_str());
  std::printf("triad-data: encoded %.2f MB of text in %.3f s (%.1f MB/s%s)\n",
              textBytes / 1e6, seconds,
              seconds > 0 ? textBytes / 1e6 / seconds : 0.0,
              huggingFace.empty() ? absl::StrCat(", ", threads, " thread",
                                                 threads > 1 ? "s" : "")
                                        .c_str()
                                  : "");
  return 0;
}
