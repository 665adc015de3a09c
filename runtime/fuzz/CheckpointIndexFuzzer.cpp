//===- CheckpointIndexFuzzer.cpp - libFuzzer target: checkpoint indexes ---===//
//
// A checkpoint folder whose index.json is the input: opening it validates
// the JSON (depth first), the counts, the mesh, every tensor's shape and
// slices; verifying opens the shards it names (none exist here, so that
// must fail cleanly).
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/fuzz/FuzzFiles.h"

#include <cstddef>
#include <cstdint>
#include <sys/stat.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string dir = [] {
    std::string folder = triad::rt::fuzz::scratchFolder() + "/checkpoint";
    ::mkdir(folder.c_str(), 0700);
    ::mkdir((folder + "/step-00000001").c_str(), 0700);
    const char latest[] = "step-00000001\n";
    triad::rt::fuzz::writeBytes(folder + "/latest",
                                reinterpret_cast<const uint8_t *>(latest),
                                sizeof(latest) - 1);
    return folder;
  }();
  if (!triad::rt::fuzz::writeBytes(dir + "/step-00000001/index.json", data,
                                   size))
    return 0;
  absl::StatusOr<triad::rt::CheckpointReader> reader =
      triad::rt::CheckpointReader::open(dir);
  if (!reader.ok())
    return 0;
  (void)reader->tensorNames();
  (void)reader->verify();
  return 0;
}
