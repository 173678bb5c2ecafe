// Asks the CPU for the cache line that holds `address` without waiting for it. Used where the
// loop is about to serve many connections whose state it last touched seconds ago: asked for a
// stage at a time across all of them, their misses overlap (relayd/timer_wheel.h, Prefetch).
// A hint only: it never faults, also on an address it cannot reach, and changes nothing.
#pragma once

#include <cstddef>

namespace ot {

inline void prefetchLine(const void* address) {
  __builtin_prefetch(address, 0, 3);
}

// How relayd fetches ahead for many connections at once: passes over a batch of them, each pass
// one pointer deeper (the session, the connection, the socket and TLS engine, the engine's
// buffers, the record layer: five), and batches of 32, enough for their misses to overlap and few
// enough that what the first passes fetched is still cached when the batch is served.
inline constexpr unsigned kPrefetchStages = 5;
inline constexpr size_t kPrefetchBatch = 32;

}  // namespace ot
