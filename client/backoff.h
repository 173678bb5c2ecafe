// The reconnect schedule of docs/protocol.md section 10, as pure logic: after an attached bridge
// ends, wait 125-250 ms; after each failed attempt double the base, up to 30 s, with equal jitter
// (b/2 + random(0, b/2)). Only attached() resets the count.
#pragma once

#include <cstdint>
#include <functional>

namespace ot::client {

class Backoff {
 public:
  // `random(n)` returns a uniform value in [0, n]; injected so tests control it.
  explicit Backoff(std::function<uint64_t(uint64_t)> random, uint64_t baseMs = 250,
                   uint64_t capMs = 30'000);

  // The wait before the next attempt, in ms; each call counts one more failure in a row.
  [[nodiscard]] uint64_t nextDelayMs();
  // The bridge reached `attached`: the next wait is 125-250 ms again.
  void attached() { failures_ = 0; }
  [[nodiscard]] uint32_t failuresInARow() const { return failures_; }

 private:
  std::function<uint64_t(uint64_t)> random_;
  uint64_t baseMs_;
  uint64_t capMs_;
  uint32_t failures_ = 0;
};

// A uniform random in [0, n] from a thread-local generator seeded from the OS.
[[nodiscard]] uint64_t uniformRandom(uint64_t n);

}  // namespace ot::client
