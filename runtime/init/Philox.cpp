//===- Philox.cpp - the Philox4x32-10 counter-based generator -------------===//

#include "runtime/init/Philox.h"

#include "runtime/init/PhiloxRounds.h"

namespace triad::rt {

PhiloxCounter philox4x32(PhiloxCounter counter, PhiloxKey key) {
  PhiloxWords block = philoxRounds(
      {counter[0], counter[1], counter[2], counter[3]}, key[0], key[1]);
  return {block.w0, block.w1, block.w2, block.w3};
}

} // namespace triad::rt
