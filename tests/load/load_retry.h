// The wait before a load bridge's next attempt, decided as otunnel's BridgeLink::scheduleRetry
// decides it (client/bridge_link.cc): after an attached bridge ended (or was drained) the short
// 125-250 ms wait; otherwise client::Backoff's wait for the attempt's RetryHint, which the
// bridge got from client::classifyAttemptEnd with the same facts otunnel feeds it. A busy answer
// past Backoff::kBusyLimit in a row waits like a broken one and is counted as broken, as
// otunnel's log line counts it. Pure; the counters are the tool's atomics.
#pragma once

#include <atomic>
#include <cstdint>

#include "client/backoff.h"
#include "tests/load/load_counters.h"

namespace ot::load {

struct ScheduledWait {
  uint64_t delayMs = 0;
  WaitKind kind = WaitKind::kBroken;
};

[[nodiscard]] inline ScheduledWait scheduleWait(client::Backoff& backoff,
                                                const client::RetryHint& hint, bool afterAttached) {
  if (afterAttached) return {backoff.nextDelayMs(client::RetryHint{}), WaitKind::kAfterAttached};
  const bool busy =
      hint.kind == client::RetryKind::kBusy && backoff.busyInARow() < client::Backoff::kBusyLimit;
  return {backoff.nextDelayMs(hint), busy ? WaitKind::kBusy : WaitKind::kBroken};
}

// Counts the wait and raises the longest of its kind.
inline void countWait(LoadCounters& counters, const ScheduledWait& wait) {
  WaitCounters& of = counters.waits[static_cast<size_t>(wait.kind)];
  of.count.fetch_add(1, std::memory_order_relaxed);
  uint64_t seen = of.longestMs.load(std::memory_order_relaxed);
  while (wait.delayMs > seen &&
         !of.longestMs.compare_exchange_weak(seen, wait.delayMs, std::memory_order_relaxed)) {
  }
}

}  // namespace ot::load
