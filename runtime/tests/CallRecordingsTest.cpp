//===- CallRecordingsTest.cpp - when calls are recorded, without a GPU ----===//
//
// CallRecordings (runtime/executor/CallRecordings.h), the policy of the CUDA
// executor's CUDA graphs, with strings for recordings: a key's first calls
// run directly, the next records, later ones replay; keys apart (function,
// slot, evaluating) are recorded apart; a function that cannot be recorded,
// and a key whose recording failed, run directly for good, with the reason.
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/CallRecordings.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace triad::rt {
namespace {

const std::optional<std::string> kCan;

TEST(CallRecordings, WarmsUpThenRecordsThenReplays) {
  CallRecordings<std::string> recordings(/*warmup=*/2);
  CallKey key{3, 0, false};
  EXPECT_EQ(recordings.mode(key, kCan), CallMode::Direct);
  EXPECT_EQ(recordings.mode(key, kCan), CallMode::Direct);
  EXPECT_EQ(recordings.mode(key, kCan), CallMode::Record);
  EXPECT_EQ(recordings.recording(key), nullptr);
  recordings.recorded(key, "graph of 3");
  for (int call = 0; call < 3; ++call)
    EXPECT_EQ(recordings.mode(key, kCan), CallMode::Replay);
  ASSERT_NE(recordings.recording(key), nullptr);
  EXPECT_EQ(*recordings.recording(key), "graph of 3");
  EXPECT_EQ(recordings.recordings(), 1u);
  EXPECT_TRUE(recordings.refusals().empty());
}

TEST(CallRecordings, KeysApartAreRecordedApart) {
  CallRecordings<std::string> recordings;
  CallKey forward{1, 0, false}, otherSlot{1, 1, false}, evaluating{1, 0, true},
      other{2, 0, false};
  for (const CallKey &key : {forward, otherSlot, evaluating, other})
    EXPECT_EQ(recordings.mode(key, kCan), CallMode::Direct);
  EXPECT_EQ(recordings.mode(forward, kCan), CallMode::Record);
  recordings.recorded(forward, "forward");
  // The others are still one call into their warm-up.
  EXPECT_EQ(recordings.mode(otherSlot, kCan), CallMode::Record);
  EXPECT_EQ(recordings.recording(otherSlot), nullptr);
  EXPECT_EQ(recordings.mode(evaluating, kCan), CallMode::Record);
  EXPECT_EQ(recordings.mode(forward, kCan), CallMode::Replay);
  EXPECT_EQ(*recordings.recording(forward), "forward");
  EXPECT_EQ(recordings.recordings(), 1u);
}

TEST(CallRecordings, AFunctionThatCannotBeRecordedRunsDirectlyWithItsReason) {
  CallRecordings<std::string> recordings;
  CallKey key{0, 0, false};
  std::optional<std::string> cannot = "it sends to another stage";
  for (int call = 0; call < 4; ++call)
    EXPECT_EQ(recordings.mode(key, cannot), CallMode::Direct);
  ASSERT_EQ(recordings.refusals().size(), 1u);
  EXPECT_EQ(recordings.refusals()[0].second, "it sends to another stage");
  EXPECT_EQ(recordings.recordings(), 0u);
}

TEST(CallRecordings, AFailedRecordingIsNotTriedAgain) {
  CallRecordings<std::string> recordings;
  CallKey key{5, 2, false};
  EXPECT_EQ(recordings.mode(key, kCan), CallMode::Direct);
  EXPECT_EQ(recordings.mode(key, kCan), CallMode::Record);
  recordings.refused(key, "recording it failed: scratch would grow");
  for (int call = 0; call < 3; ++call)
    EXPECT_EQ(recordings.mode(key, kCan), CallMode::Direct);
  EXPECT_EQ(recordings.recording(key), nullptr);
  ASSERT_EQ(recordings.refusals().size(), 1u);
  EXPECT_EQ(recordings.refusals()[0].first.function, 5u);
  EXPECT_EQ(recordings.refusals()[0].first.slot, 2u);
  EXPECT_EQ(recordings.refusals()[0].second,
            "recording it failed: scratch would grow");
  // A refused recording is dropped with its reason kept.
  CallKey replayed{6, 0, false};
  recordings.mode(replayed, kCan);
  recordings.mode(replayed, kCan);
  recordings.recorded(replayed, "graph");
  recordings.refused(replayed, "the launch failed");
  EXPECT_EQ(recordings.recording(replayed), nullptr);
  EXPECT_EQ(recordings.mode(replayed, kCan), CallMode::Direct);
  recordings.clear();
  EXPECT_TRUE(recordings.refusals().empty());
}

} // namespace
} // namespace triad::rt
