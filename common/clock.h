// Wall-clock time as the protocols carry it (Unix milliseconds, UTC). Durations and timeouts use
// steady clocks (uv_now, std::chrono::steady_clock) instead; this is only for timestamps.
#pragma once

#include <chrono>
#include <cstdint>

namespace ot {

[[nodiscard]] inline int64_t unixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace ot
