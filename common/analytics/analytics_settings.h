// ANALYTICS_* settings, the same in both daemons (docs/analytics.md "Settings").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/cli_fwd.h"

namespace ot::analytics {

struct AnalyticsSettings {
  std::string url;    // ANALYTICS_URL: http:// or https://; empty: analytics are off
  std::string token;  // ANALYTICS_TOKEN (secret): sent as Authorization: Bearer; empty: none sent
  size_t queueSize = 10'000;        // ANALYTICS_QUEUE_SIZE: events waiting at most
  size_t batchSize = 100;           // ANALYTICS_BATCH_SIZE: events per POST at most
  int64_t flushMs = 5'000;          // ANALYTICS_FLUSH_MS: a partial batch waits at most this long
  int maxRetries = 3;               // ANALYTICS_MAX_RETRIES: tries of one batch after the first
  int64_t retryDelayMs = 500;       // ANALYTICS_RETRY_DELAY_MS: first retry's wait, then doubled
  int64_t shutdownFlushMs = 2'000;  // ANALYTICS_SHUTDOWN_FLUSH_MS: posting left at stop, at most
  int64_t timeoutMs = 10'000;       // one POST at most (connect included)

  [[nodiscard]] bool enabled() const { return !url.empty(); }
};

// The ANALYTICS_* flags (each reads its environment variable). The token never shows in --help.
void addAnalyticsOptions(CLI::App& app, AnalyticsSettings& settings);

}  // namespace ot::analytics
