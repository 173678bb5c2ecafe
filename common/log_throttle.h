// A log line that a peer can trigger at will is written at most once per interval, with the
// number of occurrences held back since the last one. Pure logic; one per kind of line (or per
// source, inside a per-source table). The caller passes the time (any steady clock, in ms).
#pragma once

#include <cstdint>

namespace ot {

class LogThrottle {
 public:
  explicit LogThrottle(uint64_t everyMs) : everyMs_(everyMs) {}

  // Whether a line may be written at `nowMs`. When true, `suppressed` is how many calls were
  // refused since the last line (and the count starts over).
  [[nodiscard]] bool allow(uint64_t nowMs, uint64_t& suppressed) {
    if (logged_ && nowMs - lastMs_ < everyMs_) {
      ++suppressed_;
      return false;
    }
    suppressed = force(nowMs);
    return true;
  }

  // A line written whatever the rate (one an operator must always see); returns how many were
  // held back before it, and the interval starts again from `nowMs`.
  uint64_t force(uint64_t nowMs) {
    const uint64_t suppressed = suppressed_;
    suppressed_ = 0;
    logged_ = true;
    lastMs_ = nowMs;
    return suppressed;
  }

  // Whether the interval since the last line is over (true when nothing was logged yet).
  [[nodiscard]] bool quietSince(uint64_t nowMs) const {
    return !logged_ || nowMs - lastMs_ >= everyMs_;
  }

 private:
  uint64_t everyMs_;
  uint64_t lastMs_ = 0;
  uint64_t suppressed_ = 0;
  bool logged_ = false;
};

}  // namespace ot
