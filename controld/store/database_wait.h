// Start-up's wait for the database: migrate() again and again, with backoff, until it works, the
// database says it can never be used, STARTUP_DB_TIMEOUT_MS passes or a signal asks us to stop.
// The clock and the sleep are passed in, so the schedule is tested without waiting.
#pragma once

#include <cstdint>
#include <functional>

#include "common/clock.h"
#include "common/result.h"

namespace ot::controld {

enum class DatabaseWaitOutcome {
  kReady,     // migrate() worked
  kUnusable,  // kInvalid: a newer schema, bad settings; retrying cannot help
  kTimedOut,  // the timeout passed
  kStopped,   // the sleep was interrupted by a stop request
};

struct DatabaseWaitOptions {
  int64_t timeoutMs = 120'000;  // 0: wait for ever
  int64_t firstDelayMs = 200;   // doubles after every failure...
  int64_t maxDelayMs = 15'000;  // ...up to this
};

struct DatabaseWaitHooks {
  std::function<Status()> attempt;              // migrate()
  Clock nowMs;                                  // a monotonic clock
  std::function<bool(int64_t ms)> sleepOrStop;  // true: a stop was requested meanwhile
};

// Each sleep ends at the deadline at the latest, and one last attempt is made there, so a
// database that never answers ends the wait at the timeout (plus one attempt), not after the
// whole next backoff step.
[[nodiscard]] DatabaseWaitOutcome waitForDatabase(const DatabaseWaitOptions& options,
                                                  const DatabaseWaitHooks& hooks);

}  // namespace ot::controld
