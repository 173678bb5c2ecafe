// Time as the code reads it. One type, Clock, is injected wherever a test must control time;
// which epoch it counts from is the caller's: unixNowMs for timestamps that are stored or sent
// (Unix milliseconds, UTC), a loop's steady milliseconds (uv_now) for timeouts on a data plane.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

namespace ot {

// Milliseconds, read on demand. An empty Clock is never called: owners substitute their default.
using Clock = std::function<int64_t()>;

[[nodiscard]] inline int64_t unixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A clock a test moves by hand; clock() hands out a Clock that reads it. Atomic because the code
// under test often reads it on its own thread (job runner, sweepers) while the test moves it.
class ManualClock {
 public:
  explicit ManualClock(int64_t startMs = 0) : nowMs_(startMs) {}
  [[nodiscard]] int64_t nowMs() const { return nowMs_.load(); }
  void advance(int64_t ms) { nowMs_.fetch_add(ms); }
  void set(int64_t ms) { nowMs_.store(ms); }
  [[nodiscard]] Clock clock() const {
    return [this] { return nowMs_.load(); };
  }

 private:
  std::atomic<int64_t> nowMs_;
};

}  // namespace ot
