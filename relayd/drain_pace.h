// How fast a draining relayd tells its bridges `drain` (docs/relayd.md "Shutdown"), as pure
// logic: in steps of kDrainStepMs, 5,000 bridges a second, and all of them within 5 s however
// many there are, so the relays they move to see a stream they can attach rather than a wall.
// The batch is sized once from the whole queue: recomputed from what is left, the batches would
// shrink and run past 5 s.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace ot::relayd {

inline constexpr uint64_t kDrainStepMs = 10;
inline constexpr size_t kDrainPerSecond = 5'000;
inline constexpr uint64_t kDrainSpreadMs = 5'000;

// Bridges told per step when `bridges` are to be drained.
[[nodiscard]] constexpr size_t drainPerStep(size_t bridges) {
  constexpr size_t kSteps = kDrainSpreadMs / kDrainStepMs;
  return std::max<size_t>(kDrainPerSecond * kDrainStepMs / 1000, (bridges + kSteps - 1) / kSteps);
}

// Steps until the last of `bridges` is told (the first batch goes at once, step 0).
[[nodiscard]] constexpr uint64_t drainSteps(size_t bridges) {
  const size_t perStep = drainPerStep(bridges);
  return bridges == 0 ? 0 : (bridges + perStep - 1) / perStep - 1;
}

}  // namespace ot::relayd
