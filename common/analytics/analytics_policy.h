// When the analytics sender posts, and what it does with the answer. Pure: numbers in, decisions
// out, so the unit tests check the rules without threads or sockets.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ot::analytics {

struct BatchPolicy {
  size_t maxEvents = 100;      // ANALYTICS_BATCH_SIZE: events in one POST at most
  int64_t intervalMs = 5'000;  // ANALYTICS_FLUSH_MS: a partial batch waits at most this long
};

// How long the sender may still wait before posting what is queued: 0 means post now (a full
// batch, the interval is over with events queued, or stopping with events queued). With nothing
// queued it waits a whole interval (nothing is due). `sinceLastPostMs` counts from the end of the
// previous post (or the sender's start).
[[nodiscard]] int64_t sendDelayMs(const BatchPolicy& policy, size_t queued, int64_t sinceLastPostMs,
                                  bool stopping);

struct RetryPolicy {
  int maxRetries = 3;           // ANALYTICS_MAX_RETRIES: tries after the first, per batch
  int64_t baseDelayMs = 500;    // the first retry's wait; doubled for each one after
  int64_t maxDelayMs = 30'000;  // a single wait at most
};

enum class PostVerdict {
  kSent,    // 2xx: the receiver has the batch
  kRetry,   // a connection or timeout error, 5xx, 408 or 429: it may go through later
  kFailed,  // any other answer (4xx, 3xx): the same batch would be refused again
};

// status: the HTTP status, or 0 when no answer came (connection refused, timeout, TLS failure).
[[nodiscard]] PostVerdict judgePost(int status);

// The wait before retry number `retry` (1 for the first retry).
[[nodiscard]] int64_t retryDelayMs(const RetryPolicy& policy, int retry);

}  // namespace ot::analytics
