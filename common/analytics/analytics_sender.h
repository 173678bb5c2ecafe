// The analytics pipeline of one daemon: events handed to emit() on any thread go into a bounded
// queue (analytics_queue.h), and one sender thread of its own posts them in batches (a JSON array,
// analytics_event.h) to ANALYTICS_URL with `Authorization: Bearer ANALYTICS_TOKEN`, retrying on
// 5xx and connection errors with backoff (analytics_policy.h). Nothing of it runs without a URL:
// no thread, no connection, emit() only drops.
//
// Losses are counted in opentunnel_analytics_events_total{result}: `sent` (the receiver answered
// 2xx), `failed` (a batch given up: refused with a 4xx, or retries spent) and `dropped` (never
// posted: the queue was full, or still held events when the shutdown bound ran out). They are also
// logged, at most once a minute, with the counts since the previous line.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/analytics/analytics_event.h"
#include "common/analytics/analytics_policy.h"
#include "common/analytics/analytics_queue.h"
#include "common/analytics/analytics_settings.h"
#include "common/metrics.h"

namespace ot::analytics {

// Posts one batch: the HTTP status, or 0 with `error` set when no answer came. `timeoutMs` bounds
// the whole exchange. Runs on the sender thread.
using Poster = std::function<int(const std::string& body, int64_t timeoutMs, std::string& error)>;

// The libcurl poster: POST `url`, Content-Type: application/json, the bearer token when not empty.
[[nodiscard]] Poster curlPoster(std::string url, std::string token, std::string userAgent);

struct AnalyticsCounts {
  uint64_t sent = 0;
  uint64_t dropped = 0;
  uint64_t failed = 0;
};

class Analytics {
 public:
  // `metrics`: where opentunnel_analytics_events_total goes (registered, at 0, even when off, so
  // every daemon exports the same names); may be null (tests). `poster`: empty for libcurl.
  Analytics(AnalyticsSettings settings, Origin origin, metrics::Metrics* metrics,
            Poster poster = {});
  ~Analytics();  // stop()
  Analytics(const Analytics&) = delete;
  Analytics& operator=(const Analytics&) = delete;

  [[nodiscard]] bool enabled() const { return settings_.enabled(); }

  // Starts the sender thread (nothing when off). Once.
  void start();
  // Any thread; never waits for I/O (only the queue's short lock). False when the event was
  // dropped: analytics off (not counted), the queue full or stopped (counted).
  bool emit(Event event);
  // Posts what is queued within ANALYTICS_SHUTDOWN_FLUSH_MS, counts what is left as dropped and
  // ends the thread. Events emitted later are dropped. Idempotent; any thread but the sender.
  void stop();

  [[nodiscard]] AnalyticsCounts counts() const;

 private:
  void run();
  // Posts one batch with its retries; counts the outcome.
  void deliver(std::vector<Event>& batch);
  // Waits `ms`, or less when stop() is called; false when stop() cut it short.
  bool sleepUnlessStopping(int64_t ms);
  // Milliseconds left of the shutdown bound (only while stopping).
  [[nodiscard]] int64_t shutdownLeftMs() const;
  void count(uint64_t AnalyticsCounts::*which, uint64_t n);
  void logLosses(bool force);

  const AnalyticsSettings settings_;
  const Origin origin_;
  Poster poster_;
  BatchPolicy batch_;
  RetryPolicy retry_;
  std::unique_ptr<EventQueue> queue_;
  std::string idPrefix_;
  uint64_t nextSequence_ = 0;

  prometheus::Counter* sentCounter_ = nullptr;
  prometheus::Counter* droppedCounter_ = nullptr;
  prometheus::Counter* failedCounter_ = nullptr;
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> failed_{0};

  // Sender thread only: the losses already logged, when, and the last error.
  uint64_t loggedDropped_ = 0;
  uint64_t loggedFailed_ = 0;
  int64_t lastLossLogMs_ = -1;
  std::string lastError_;

  std::mutex stopMutex_;
  std::condition_variable stopCv_;
  bool stopping_ = false;                                 // guarded by stopMutex_
  std::chrono::steady_clock::time_point stopDeadline_{};  // set with stopping_
  std::atomic<bool> stopRequested_{false};
  bool started_ = false;
  std::thread thread_;
};

}  // namespace ot::analytics
