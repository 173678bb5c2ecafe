// A log line that an attacker can trigger at will is written at most once per interval, with the
// number of occurrences held back since the last one. Pure logic; one per kind of line.
#pragma once

#include <cstdint>

namespace ot::relayd {

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
    suppressed = suppressed_;
    suppressed_ = 0;
    logged_ = true;
    lastMs_ = nowMs;
    return true;
  }

 private:
  uint64_t everyMs_;
  uint64_t lastMs_ = 0;
  uint64_t suppressed_ = 0;
  bool logged_ = false;
};

}  // namespace ot::relayd
