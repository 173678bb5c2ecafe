#include "common/analytics/analytics_settings.h"

#include <CLI/CLI.hpp>
#include <string_view>

namespace ot::analytics {

void addAnalyticsOptions(CLI::App& app, AnalyticsSettings& s) {
  app.add_option("--analytics-url", s.url,
                 "where analytics events are posted in batches (http:// or https://); empty: off")
      ->envname("ANALYTICS_URL")
      ->check(
          [](const std::string& url) -> std::string {
            const std::string_view text = url;
            if (text.empty() || text.starts_with("http://") || text.starts_with("https://"))
              return {};
            return "ANALYTICS_URL must start with http:// or https://";
          },
          "URL");
  app.add_option("--analytics-token", s.token,
                 "secret: bearer token sent with every analytics batch")
      ->envname("ANALYTICS_TOKEN");
  app.add_option("--analytics-queue-size", s.queueSize,
                 "analytics events waiting to be sent at most; more are dropped and counted")
      ->envname("ANALYTICS_QUEUE_SIZE")
      ->check(CLI::Range(size_t{1}, size_t{10'000'000}))
      ->capture_default_str();
  app.add_option("--analytics-batch-size", s.batchSize, "analytics events per POST at most")
      ->envname("ANALYTICS_BATCH_SIZE")
      ->check(CLI::Range(size_t{1}, size_t{10'000}))
      ->capture_default_str();
  app.add_option("--analytics-flush-ms", s.flushMs,
                 "a partial batch of analytics events waits at most this long")
      ->envname("ANALYTICS_FLUSH_MS")
      ->check(CLI::Range(int64_t{10}, int64_t{3'600'000}))
      ->capture_default_str();
  app.add_option("--analytics-max-retries", s.maxRetries,
                 "tries of a batch after the first on 5xx, 408, 429 or connection errors")
      ->envname("ANALYTICS_MAX_RETRIES")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  app.add_option("--analytics-retry-delay-ms", s.retryDelayMs,
                 "wait before the first retry of a batch (doubled for each next, 30 s at most)")
      ->envname("ANALYTICS_RETRY_DELAY_MS")
      ->check(CLI::Range(int64_t{1}, int64_t{600'000}))
      ->capture_default_str();
  app.add_option("--analytics-shutdown-flush-ms", s.shutdownFlushMs,
                 "at shutdown, posting what is queued takes at most this long; the rest is dropped")
      ->envname("ANALYTICS_SHUTDOWN_FLUSH_MS")
      ->check(CLI::Range(int64_t{0}, int64_t{60'000}))
      ->capture_default_str();
}

}  // namespace ot::analytics
