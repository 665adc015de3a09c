//===- SafetensorsFuzzer.cpp - libFuzzer target: checkpoint shards --------===//
//
// A checkpoint shard (safetensors: header length, JSON header, data) of
// arbitrary bytes: opening it validates the header, every tensor's place
// and checksum; reading an entry's bytes must stay inside the file.
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/Safetensors.h"
#include "runtime/fuzz/FuzzFiles.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = triad::rt::fuzz::scratchFolder() + "/shard.safetensors";
  if (!triad::rt::fuzz::writeBytes(path, data, size))
    return 0;
  absl::StatusOr<triad::rt::SafetensorsFile> file =
      triad::rt::SafetensorsFile::open(path);
  if (!file.ok())
    return 0;
  volatile char sink = 0;
  for (const triad::rt::TensorEntry &entry : file->entries()) {
    const char *bytes = file->bytes(entry);
    for (uint64_t i = entry.begin; i < entry.end; ++i)
      sink = sink + bytes[i - entry.begin];
  }
  (void)sink;
  return 0;
}
