#include "common/analytics/analytics_sender.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/crypto.h"
#include "common/curl_http.h"
#include "common/log.h"

namespace ot::analytics {
namespace {

const log::Logger kAnalyticsSenderLog("analytics");

// A receiver that keeps failing is reported once a minute, with what was lost meanwhile.
constexpr int64_t kLossLogEveryMs = 60'000;
constexpr int64_t kConnectTimeoutMs = 5'000;

int64_t steadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Poster curlPoster(std::string url, std::string token, std::string userAgent) {
  return [url = std::move(url), token = std::move(token), userAgent = std::move(userAgent)](
             const std::string& body, int64_t timeoutMs, std::string& error) {
    http::CurlRequest request;
    request.method = "POST";
    request.url = url;
    request.body = body;
    request.headers.emplace_back("Content-Type: application/json");
    if (!token.empty()) request.headers.push_back("Authorization: Bearer " + token);
    request.userAgent = userAgent;
    request.connectTimeoutMs = std::min(kConnectTimeoutMs, std::max<int64_t>(timeoutMs, 1));
    request.totalTimeoutMs = std::max<int64_t>(timeoutMs, 1);
    request.maxBodyBytes = 64 * 1024;  // the answer is not read; a long one is not our business
    auto reply = http::performCurl(request);
    if (!reply.ok()) {
      error = reply.error().message;
      return 0;
    }
    return reply->status;
  };
}

Analytics::Analytics(AnalyticsSettings settings, Origin origin, metrics::Metrics* metrics,
                     Poster poster)
    : settings_(std::move(settings)), origin_(std::move(origin)), poster_(std::move(poster)) {
  if (metrics != nullptr) {
    const std::string name = "opentunnel_analytics_events_total";
    const std::string help =
        "analytics events: sent (the receiver took them), failed (a batch refused or out of "
        "retries), dropped (never posted: queue full or shutdown)";
    sentCounter_ = &metrics->counter(name, help, {{"result", "sent"}});
    failedCounter_ = &metrics->counter(name, help, {{"result", "failed"}});
    droppedCounter_ = &metrics->counter(name, help, {{"result", "dropped"}});
  }
  if (!enabled()) return;
  batch_.maxEvents = std::max<size_t>(settings_.batchSize, 1);
  batch_.intervalMs = std::max<int64_t>(settings_.flushMs, 1);
  retry_.maxRetries = std::max(settings_.maxRetries, 0);
  retry_.baseDelayMs = std::max<int64_t>(settings_.retryDelayMs, 1);
  queue_ = std::make_unique<EventQueue>(settings_.queueSize, batch_.maxEvents);
  if (!poster_)
    poster_ = curlPoster(settings_.url, settings_.token, "opentunnel-" + origin_.source);
  // Event IDs: this process's random prefix and a sequence number (analytics_event.h).
  idPrefix_ = crypto::toHex(crypto::randomBytes(8).value_or(std::vector<uint8_t>(8)));
}

Analytics::~Analytics() {
  stop();
}

void Analytics::start() {
  if (!enabled() || started_) return;
  started_ = true;
  thread_ = std::thread([this] { run(); });
}

bool Analytics::emit(Event event) {
  if (!enabled()) return false;
  if (queue_->push(std::move(event))) return true;
  count(&AnalyticsCounts::dropped, 1);
  return false;
}

void Analytics::stop() {
  if (!enabled()) return;
  {
    const std::lock_guard lock(stopMutex_);
    if (stopping_) return;
    stopping_ = true;
    stopDeadline_ = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(std::max<int64_t>(settings_.shutdownFlushMs, 0));
  }
  stopRequested_ = true;
  stopCv_.notify_all();
  queue_->close();  // later events are refused (and counted); the sender sees the stop at once
  if (thread_.joinable()) {
    thread_.join();
  } else {
    // Never started: nothing of what is queued will be posted.
    std::vector<Event> left;
    count(&AnalyticsCounts::dropped, queue_->take(queue_->capacity(), left));
  }
}

AnalyticsCounts Analytics::counts() const {
  return {sent_.load(), dropped_.load(), failed_.load()};
}

void Analytics::count(uint64_t AnalyticsCounts::*which, uint64_t n) {
  if (n == 0) return;
  if (which == &AnalyticsCounts::sent) {
    sent_ += n;
    if (sentCounter_ != nullptr) sentCounter_->Increment(static_cast<double>(n));
  } else if (which == &AnalyticsCounts::failed) {
    failed_ += n;
    if (failedCounter_ != nullptr) failedCounter_->Increment(static_cast<double>(n));
  } else {
    dropped_ += n;
    if (droppedCounter_ != nullptr) droppedCounter_->Increment(static_cast<double>(n));
  }
}

int64_t Analytics::shutdownLeftMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(stopDeadline_ -
                                                               std::chrono::steady_clock::now())
      .count();
}

bool Analytics::sleepUnlessStopping(int64_t ms) {
  std::unique_lock lock(stopMutex_);
  return !stopCv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return stopping_; });
}

void Analytics::run() {
  kAnalyticsSenderLog.info("analytics on",
                           {{"batch_size", static_cast<int64_t>(batch_.maxEvents)},
                            {"flush_ms", batch_.intervalMs},
                            {"queue_size", static_cast<int64_t>(queue_->capacity())}});
  std::vector<Event> batch;
  batch.reserve(batch_.maxEvents);
  int64_t lastPostMs = steadyMs();
  for (;;) {
    const bool stopping = stopRequested_.load();
    const size_t queued = queue_->size();
    if (stopping && (queued == 0 || shutdownLeftMs() <= 0)) break;
    const int64_t delay = sendDelayMs(batch_, queued, steadyMs() - lastPostMs, stopping);
    if (delay > 0) {
      logLosses(false);
      queue_->waitFor(batch_.maxEvents, delay);
      continue;
    }
    batch.clear();
    queue_->take(batch_.maxEvents, batch);
    deliver(batch);
    lastPostMs = steadyMs();
  }
  // The shutdown bound ran out (or the queue is empty): what is left is never posted.
  std::vector<Event> left;
  count(&AnalyticsCounts::dropped, queue_->take(queue_->capacity(), left));
  logLosses(true);
  const AnalyticsCounts totals = counts();
  kAnalyticsSenderLog.info("analytics stopped",
                           {{"sent", static_cast<int64_t>(totals.sent)},
                            {"failed", static_cast<int64_t>(totals.failed)},
                            {"dropped", static_cast<int64_t>(totals.dropped)}});
}

void Analytics::deliver(std::vector<Event>& batch) {
  if (batch.empty()) return;
  const uint64_t n = batch.size();
  const std::string body = encodeBatch(batch, origin_, idPrefix_, nextSequence_);
  nextSequence_ += n;
  batch.clear();
  bool waitCutShort = false;  // a stop has already cut one retry wait short
  for (int attempt = 0;; ++attempt) {
    int64_t timeoutMs = settings_.timeoutMs;
    if (stopRequested_.load()) {
      const int64_t left = shutdownLeftMs();
      if (left <= 0) {
        count(attempt == 0 ? &AnalyticsCounts::dropped : &AnalyticsCounts::failed, n);
        return;
      }
      timeoutMs = std::min(timeoutMs, left);
    }
    std::string error;
    const int status = poster_(body, timeoutMs, error);
    const PostVerdict verdict = judgePost(status);
    if (verdict == PostVerdict::kSent) {
      count(&AnalyticsCounts::sent, n);
      kAnalyticsSenderLog.debug("analytics batch sent",
                                {{"events", static_cast<int64_t>(n)}, {"status", status}});
      return;
    }
    lastError_ = status != 0 ? "HTTP " + std::to_string(status) : error;
    if (verdict == PostVerdict::kFailed || attempt >= retry_.maxRetries) {
      count(&AnalyticsCounts::failed, n);
      return;
    }
    const int64_t waitMs = retryDelayMs(retry_, attempt + 1);
    if (stopRequested_.load()) {
      // Stopping: a wait that fits inside the shutdown bound is kept. A longer one is cut short
      // once, and that retry runs at once, exactly as when the stop lands during the wait: which
      // of the two happens must not depend on whether the stop came just before or just after
      // this point. A second wait that does not fit gives the batch up (no busy retries).
      if (waitMs < shutdownLeftMs()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(waitMs));
      } else if (waitCutShort) {
        count(&AnalyticsCounts::failed, n);
        return;
      } else {
        waitCutShort = true;
      }
    } else if (!sleepUnlessStopping(waitMs)) {
      waitCutShort = true;  // a stop during the wait ended it: the retry runs within the bound
    }
  }
}

void Analytics::logLosses(bool force) {
  const uint64_t dropped = dropped_.load();
  const uint64_t failed = failed_.load();
  if (dropped == loggedDropped_ && failed == loggedFailed_) return;
  const int64_t now = steadyMs();
  if (!force && lastLossLogMs_ >= 0 && now - lastLossLogMs_ < kLossLogEveryMs) return;
  kAnalyticsSenderLog.warn("analytics events lost",
                           {{"dropped", static_cast<int64_t>(dropped - loggedDropped_)},
                            {"failed", static_cast<int64_t>(failed - loggedFailed_)},
                            {"dropped_total", static_cast<int64_t>(dropped)},
                            {"failed_total", static_cast<int64_t>(failed)},
                            {"error", lastError_}});
  loggedDropped_ = dropped;
  loggedFailed_ = failed;
  lastLossLogMs_ = now;
}

}  // namespace ot::analytics
