//===- PlanFuzzer.cpp - libFuzzer target: the plan loader -----------------===//
//
// Every input goes to the loader twice: as it is (the seal must refuse what
// it does not match), and as a FlatBuffer sealed afresh (its trailing seal,
// if any, dropped first), so that mutations reach the structural verifier
// and the semantic checks behind the seal. Neither may crash, hang or read
// out of bounds; errors are the expected outcome.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Plan.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  (void)triad::rt::loadPlanFromBytes(bytes, "fuzz.plan");
  std::string flatbuffer = bytes;
  if (flatbuffer.size() >= triad::rt::kPlanSealBytes &&
      std::memcmp(flatbuffer.data() + flatbuffer.size() -
                      triad::rt::kPlanSealBytes,
                  "TRIADSUM", 8) == 0)
    flatbuffer.resize(flatbuffer.size() - triad::rt::kPlanSealBytes);
  absl::StatusOr<triad::rt::LoadedPlan> plan = triad::rt::loadPlanFromBytes(
      triad::rt::sealPlan(std::move(flatbuffer)), "fuzz.plan");
  if (plan.ok())
    (void)triad::rt::checkPlan(plan->root());
  return 0;
}
