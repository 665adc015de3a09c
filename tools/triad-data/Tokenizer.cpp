//===- Tokenizer.cpp - the tokenizers triad-data encodes with -------------===//

#include "tools/triad-data/Tokenizer.h"

#ifdef TRIAD_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace triad::data {

namespace {

class ByteLevel : public Tokenizer {
public:
  void encode(const std::string &text,
              std::vector<uint32_t> &ids) const override {
    for (unsigned char c : text)
      ids.push_back(c);
  }
  std::string decode(const std::vector<uint32_t> &ids) const override {
    std::string text;
    for (uint32_t id : ids)
      if (id < 256)
        text.push_back(static_cast<char>(id));
    return text;
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
  std::string decode(const std::vector<uint32_t> &ids) const override {
    std::vector<int> pieces;
    for (uint32_t id : ids)
      if (static_cast<int64_t>(id) < vocabulary())
        pieces.push_back(static_cast<int>(id));
    return processor.DecodeIds(pieces);
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

namespace {

/// Reads all of `fd` into `out`.
void readAll(int fd, std::string &out) {
  char buffer[1 << 16];
  for (;;) {
    ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got > 0)
      out.append(buffer, static_cast<size_t>(got));
    else if (got == 0 || errno != EINTR)
      return;
  }
}

/// The last non-empty line of `text`, for an error message.
std::string lastLine(const std::string &text) {
  size_t end = text.find_last_not_of("\n");
  if (end == std::string::npos)
    return "";
  size_t begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1,
                     end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

std::string pythonPath() {
  if (const char *python = std::getenv("TRIAD_PYTHON"); python && *python)
    return python;
  if (const char *venv = std::getenv("TRIAD_VENV"); venv && *venv)
    return std::string(venv) + "/bin/python";
  return std::string(TRIAD_SOURCE_DIR) + "/.venv/bin/python";
}

} // namespace

namespace {

/// Runs hf_tokenize.py with `helperArgs` in the project's Python
/// environment, `input` on its standard input; its standard output in
/// `data`.
bool runHelper(std::vector<std::string> helperArgs, const std::string &input,
               std::string &data, std::string &error) {
  std::string python = pythonPath();
  std::string helper =
      std::string(TRIAD_SOURCE_DIR) + "/tools/triad-data/hf_tokenize.py";
  if (access(python.c_str(), X_OK) != 0) {
    error = "no Python environment at '" + python +
            "' (scripts/setup.sh makes it, with Hugging Face's tokenizers; "
            "TRIAD_PYTHON names another)";
    return false;
  }
  int in[2], out[2], err[2];
  if (pipe(in) != 0 || pipe(out) != 0 || pipe(err) != 0) {
    error = std::string("cannot make a pipe: ") + std::strerror(errno);
    return false;
  }
  std::vector<std::string> args = {python, helper};
  args.insert(args.end(), helperArgs.begin(), helperArgs.end());
  std::vector<char *> argv;
  for (std::string &arg : args)
    argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t child = fork();
  if (child < 0) {
    error = std::string("cannot start Python: ") + std::strerror(errno);
    return false;
  }
  if (child == 0) {
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    close(in[1]);
    close(out[0]);
    close(err[0]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  // The input is a prompt or a sample's ids: small enough for the pipe.
  for (size_t at = 0; at < input.size();) {
    ssize_t wrote = write(in[1], input.data() + at, input.size() - at);
    if (wrote < 0 && errno == EINTR)
      continue;
    if (wrote <= 0)
      break;
    at += static_cast<size_t>(wrote);
  }
  close(in[1]);
  std::string messages;
  readAll(out[0], data);
  readAll(err[0], messages);
  close(out[0]);
  close(err[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string why = lastLine(messages);
    error = why.empty() ? "the tokenizers helper failed" : why;
    return false;
  }
  return true;
}

/// Reads the helper's "vocab V eod E" line, then `documents` times "N" and
/// N uint32 ids, into `encoded`.
bool parseEncoded(const std::string &data, size_t documents, Encoded &encoded,
                  std::string &error) {
  // "vocab V eod E\n", then per file "N\n" and N uint32 ids.
  size_t at = data.find('\n');
  long long vocabulary = 0, eod = -1;
  if (at == std::string::npos ||
      std::sscanf(data.substr(0, at).c_str(), "vocab %lld eod %lld",
                  &vocabulary, &eod) != 2 ||
      vocabulary <= 0) {
    error = "the tokenizers helper answered something unexpected";
    return false;
  }
  encoded.vocabulary = vocabulary;
  encoded.endOfDocument = eod;
  ++at;
  for (size_t f = 0; f < documents; ++f) {
    size_t end = data.find('\n', at);
    long long count = -1;
    if (end == std::string::npos ||
        std::sscanf(data.substr(at, end - at).c_str(), "%lld", &count) != 1 ||
        count < 0 || data.size() - (end + 1) < static_cast<size_t>(count) * 4) {
      error = "the tokenizers helper's answer is cut short";
      return false;
    }
    std::vector<uint32_t> ids(static_cast<size_t>(count));
    std::memcpy(ids.data(), data.data() + end + 1, ids.size() * 4);
    encoded.documents.push_back(std::move(ids));
    at = end + 1 + static_cast<size_t>(count) * 4;
  }
  return true;
}

} // namespace

bool encodeWithHuggingFace(const std::string &path,
                           const std::vector<std::string> &files,
                           Encoded &encoded, std::string &error) {
  std::vector<std::string> args = {path};
  args.insert(args.end(), files.begin(), files.end());
  std::string data;
  return runHelper(args, "", data, error) &&
         parseEncoded(data, files.size(), encoded, error);
}

bool encodeTextWithHuggingFace(const std::string &path, const std::string &text,
                               std::vector<uint32_t> &ids, Encoded &encoded,
                               std::string &error) {
  std::string data;
  if (!runHelper({"--encode-stdin", path}, text, data, error) ||
      !parseEncoded(data, 1, encoded, error))
    return false;
  ids = std::move(encoded.documents.front());
  encoded.documents.clear();
  return true;
}

bool decodeWithHuggingFace(const std::string &path,
                           const std::vector<uint32_t> &ids, std::string &text,
                           std::string &error) {
  std::string input(ids.size() * 4, '\0');
  for (size_t i = 0; i < ids.size(); ++i)
    for (int b = 0; b < 4; ++b)
      input[4 * i + b] = static_cast<char>((ids[i] >> (8 * b)) & 0xff);
  return runHelper({"--decode", path}, input, text, error);
}

} // namespace triad::data
