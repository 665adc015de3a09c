//===- Philox.cpp - the Philox4x32-10 counter-based generator -------------===//

#include "runtime/init/Philox.h"

namespace triad::rt {
namespace {
constexpr uint32_t kMultiplier0 = 0xD2511F53u;
constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;
constexpr int kRounds = 10;

PhiloxCounter round(const PhiloxCounter &c, const PhiloxKey &k) {
  uint64_t product0 = static_cast<uint64_t>(kMultiplier0) * c[0];
  uint64_t product1 = static_cast<uint64_t>(kMultiplier1) * c[2];
  auto hi = [](uint64_t v) { return static_cast<uint32_t>(v >> 32); };
  auto lo = [](uint64_t v) { return static_cast<uint32_t>(v); };
  return {hi(product1) ^ c[1] ^ k[0], lo(product1), hi(product0) ^ c[3] ^ k[1],
          lo(product0)};
}
} // namespace

PhiloxCounter philox4x32(PhiloxCounter counter, PhiloxKey key) {
  for (int r = 0; r < kRounds; ++r) {
    if (r > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    counter = round(counter, key);
  }
  return counter;
}

} // namespace triad::rt
