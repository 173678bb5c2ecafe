// The load tool's tally of the waits its bridges schedule. The waits themselves are otunnel's:
// client::Backoff::nextWait, fed the RetryHint client::classifyAttemptEnd gave for the same facts
// otunnel feeds it. The counters are the tool's atomics.
#pragma once

#include <atomic>
#include <cstdint>

#include "client/backoff.h"
#include "tests/load/load_counters.h"

namespace ot::load {

// Counts the wait and raises the longest of its kind.
inline void countWait(LoadCounters& counters, const client::ScheduledWait& wait) {
  WaitCounters& of = counters.waits[static_cast<size_t>(wait.kind)];
  of.count.fetch_add(1, std::memory_order_relaxed);
  uint64_t seen = of.longestMs.load(std::memory_order_relaxed);
  while (wait.delayMs > seen &&
         !of.longestMs.compare_exchange_weak(seen, wait.delayMs, std::memory_order_relaxed)) {
  }
}

}  // namespace ot::load
