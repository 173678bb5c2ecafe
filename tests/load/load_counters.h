// What the load tool's bridges report, read once a second by the sampler thread (hence atomics;
// the bridges themselves live on the loop thread).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "client/backoff.h"

namespace ot::load {

// Why a bridge waits before its next attempt: otunnel's kinds (client/backoff.h): its attached
// bridge ended or was drained (125-250 ms), its attempt ended "busy" (0.25-3 s) or "broken"
// (doubling).
using client::kWaitKinds;
using client::WaitKind;
// client::AttemptEnd::Cause's values, for the broken attempts by how they ended.
inline constexpr size_t kAttemptCauses = 8;

struct WaitCounters {
  std::atomic<uint64_t> count{0};      // waits of this kind scheduled, ever
  std::atomic<uint64_t> longestMs{0};  // the longest since the last reset (the storm's start)
};

struct LoadCounters {
  std::atomic<int64_t> bridgesUp{0};           // attached now
  std::atomic<uint64_t> attaches{0};           // `attached` received, ever
  std::atomic<uint64_t> attempts{0};           // connects started, ever
  std::atomic<uint64_t> failures{0};           // attempts that ended before `attached`
  std::atomic<uint64_t> refusedBeforeTls{0};   // connect refused / reset before the TLS handshake
  std::atomic<uint64_t> attachErrors{0};       // attach_error answers
  std::atomic<uint64_t> drains{0};             // `drain` received
  std::atomic<uint64_t> closes1012{0};         // close 1012 received
  std::atomic<uint64_t> pingsAnswered{0};      // relay pings we answered
  std::atomic<uint64_t> statusReports{0};      // `status` reports sent
  std::atomic<uint64_t> visitorsEchoed{0};     // visitor connections whose bytes we echoed
  std::atomic<uint64_t> fatal{0};              // ends otunnel gives up on (bad_token, 404, ...)
  std::array<WaitCounters, kWaitKinds> waits;  // by WaitKind
  std::array<std::atomic<uint64_t>, kAttemptCauses> brokenBy{};  // by AttemptEnd::Cause
  std::atomic<uint64_t> deadlines{0};  // attempts without `attached` within 10 s (Cause kOther)
  std::atomic<uint64_t> attachMicrosTotal{0};  // connect start -> `attached`, summed
  std::atomic<uint64_t> handshakesFull{0};     // TLS handshakes completed in full, ever
  std::atomic<uint64_t> handshakesResumed{0};  // ... resumed from the relay's session ticket
  std::atomic<uint64_t> cycles{0};             // --churn: attached bridges closed to attach again
};

}  // namespace ot::load
