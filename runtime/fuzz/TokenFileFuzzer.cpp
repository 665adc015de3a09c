//===- TokenFileFuzzer.cpp - libFuzzer target: token corpora --------------===//
//
// A corpus of arbitrary bytes, as 16-bit and as 32-bit ids of a 256-token
// vocabulary: opening validates its size and every id; reading every token
// of an opened one must stay inside it.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/TokenFile.h"
#include "runtime/fuzz/FuzzFiles.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = triad::rt::fuzz::scratchFolder() + "/corpus.bin";
  if (!triad::rt::fuzz::writeBytes(path, data, size))
    return 0;
  for (triad::rt::TokenWidth width :
       {triad::rt::TokenWidth::U16, triad::rt::TokenWidth::U32}) {
    absl::StatusOr<triad::rt::TokenFile> tokens =
        triad::rt::TokenFile::open(path, width, 256);
    if (!tokens.ok())
      continue;
    uint64_t sum = 0;
    for (int64_t i = 0; i < tokens->size(); ++i)
      sum += tokens->at(i);
    if (sum > static_cast<uint64_t>(tokens->size()) * 255)
      __builtin_trap(); // an id past the vocabulary got through
  }
  return 0;
}
