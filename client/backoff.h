// The reconnect schedule of docs/protocol.md section 10, as pure logic. Two kinds of failed
// attempt wait differently:
// - "broken" (a bad certificate, an attach_error, a protocol error, a timeout, anything not known
//   to pass by itself): after an attached bridge ends, wait 125-250 ms; after each failed attempt
//   double the base, up to a cap (30 s by default; otunnel's links use 60 s), with equal jitter
//   (b/2 + random(0, b/2)).
// - "busy" (the relay is restarting or shedding: drain or close 1012 before attached, 503 with
//   Retry-After, the connection refused, or closed before the TLS handshake completed): retry
//   soon in a short spread that does not double past 3 s (250-750 ms, 250-1500 ms, then
//   250-3000 ms), or Retry-After to 1.5x it, the Retry-After taken up to 2 s so the wait stays
//   within the same 3 s (the bridge is cheap to refuse again). After 20 busy answers in a row the
//   relay is not just restarting: further busy answers count as broken.
// - "reset" (the tunnel's owner reset it: close 4000 "reset", docs/pools-reset.md): redial at
//   once, only spread over a few ms (kResetSpreadMs) so a pool's links do not land together; it
//   counts as no failure and leaves the counts as they are.
// Only attached() resets the counts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace ot::client {

enum class RetryKind : uint8_t { kBroken, kBusy, kReset };

struct RetryHint {
  RetryKind kind = RetryKind::kBroken;
  uint64_t retryAfterMs = 0;  // busy: the relay's Retry-After, 0 when it gave none
  bool operator==(const RetryHint&) const = default;
};

// How an attempt that never reached `attached` ended, as far as the next wait cares.
struct AttemptEnd {
  enum class Cause : uint8_t {
    kConnectFailed,      // the TCP connect (or the name lookup) failed: uvStatus
    kClosedInHandshake,  // EOF or a reset before the TLS handshake completed, no TLS alert
    kTlsFailed,          // the TLS handshake failed (the certificate, an alert, ...)
    kUpgradeRefused,     // an HTTP answer other than 101: httpStatus, retryAfterMs
    kClosed,             // after the 101, before attached: closeCode (1006 when dropped)
    kDrain,              // `drain` instead of attached
    kAttachError,        // attach_error
    kOther,              // a protocol error, the 10 s deadline, anything else
  };
  Cause cause = Cause::kOther;
  int uvStatus = 0;
  int httpStatus = 0;
  uint64_t retryAfterMs = 0;
  uint16_t closeCode = 0;
};

[[nodiscard]] RetryHint classifyAttemptEnd(const AttemptEnd& end);

// What a scheduled wait is for: after an attached bridge ended (the short first wait), after a
// busy answer (the relay restarting or shedding: short, not doubling) or after a broken attempt
// (doubling). A busy answer past Backoff::kBusyLimit in a row waits, and counts, as broken.
// A reset close (RetryKind::kReset) waits only a spread of a few ms, attached before or not.
enum class WaitKind : uint8_t { kAfterAttached, kBusy, kBroken, kReset };
inline constexpr size_t kWaitKinds = 4;

struct ScheduledWait {
  uint64_t delayMs = 0;
  WaitKind kind = WaitKind::kBroken;
};

class Backoff {
 public:
  static constexpr uint64_t kBusyMinMs = 250;
  static constexpr uint64_t kBusyFirstMs = 750;
  static constexpr uint64_t kBusyCapMs = 3'000;
  static constexpr uint64_t kRetryAfterCapMs = kBusyCapMs * 2 / 3;
  static constexpr uint32_t kBusyLimit = 20;
  // A reset's redial waits a random 0 to this many ms.
  static constexpr uint64_t kResetSpreadMs = 20;

  // `random(n)` returns a uniform value in [0, n]; injected so tests control it.
  explicit Backoff(std::function<uint64_t(uint64_t)> random, uint64_t baseMs = 250,
                   uint64_t capMs = 30'000);

  // The wait before the next attempt, in ms, after a broken attempt (or an attached bridge's
  // end): each call counts one more failure in a row.
  [[nodiscard]] uint64_t nextDelayMs();
  // The wait after an attempt of the given kind.
  [[nodiscard]] uint64_t nextDelayMs(const RetryHint& hint);
  // The wait before the next attempt of a bridge whose attempt ended with `hint`, or, with
  // `afterAttached`, whose attached session ended (then the hint does not count, unless it is a
  // reset: a reset's short spread, whether the bridge was attached or not).
  [[nodiscard]] ScheduledWait nextWait(const RetryHint& hint, bool afterAttached);
  // The bridge reached `attached`: the next wait is 125-250 ms again.
  void attached() {
    failures_ = 0;
    busy_ = 0;
  }
  [[nodiscard]] uint32_t failuresInARow() const { return failures_; }
  [[nodiscard]] uint32_t busyInARow() const { return busy_; }

 private:
  std::function<uint64_t(uint64_t)> random_;
  uint64_t baseMs_;
  uint64_t capMs_;
  uint32_t failures_ = 0;
  uint32_t busy_ = 0;
};

// A uniform random in [0, n] from a thread-local generator seeded from the OS.
[[nodiscard]] uint64_t uniformRandom(uint64_t n);

}  // namespace ot::client
