#include "client/bridge_link.h"

#include <algorithm>
#include <utility>

#include "common/websocket_frame.h"

namespace ot::client {

BridgeLink::BridgeLink(uv_loop_t* loop, const BridgeSettings& settings, LinkHost& host, int index)
    : loop_(loop), settings_(settings), host_(host), index_(index) {
  (void)uv_timer_init(loop_, &timer_);  // cannot fail: it only links the handle into the loop
  timer_.data = this;
}

BridgeLink::~BridgeLink() = default;

void BridgeLink::start(uint64_t delayMs) {
  if (state_ != State::kIdle) return;
  if (delayMs == 0) {
    attempt();
    return;
  }
  state_ = State::kWaiting;
  retryAtMs_ = uv_now(loop_) + delayMs;
  rescheduleTimer();
}

void BridgeLink::attempt() {
  state_ = State::kActive;
  retryAtMs_ = 0;
  ++attempts_;
  auto session =
      std::make_unique<BridgeClient>(loop_, settings_, static_cast<SessionHost&>(*this), index_);
  current_ = session.get();
  sessions_.push_back(std::move(session));
  current_->start();  // may end (and finish) the attempt right here
  host_.onLinkChanged();
  rescheduleTimer();
}

// --- Sessions ---------------------------------------------------------------------------------

void BridgeLink::onSessionAttached(BridgeClient& session) {
  if (&session != current_) return;
  backoff_.attached();
  lastError_.clear();
  host_.onLinkChanged();
}

void BridgeLink::onSessionDrain(BridgeClient& session) {
  if (&session != current_ || state_ != State::kActive) return;
  current_ = nullptr;  // it lives on in sessions_ until the relay closes it
  setError("the relay is restarting (drain); moving to another");
  scheduleRetry({}, true);
  host_.onLinkChanged();
}

void BridgeLink::onSessionEnded(BridgeClient& session, const SessionEnd& end) {
  if (&session != current_ || state_ != State::kActive) {
    host_.onLinkChanged();  // a draining bridge closed, or we are stopping
    return;
  }
  current_ = nullptr;
  if (!end.error.empty()) setError(end.error);
  if (end.fatal) {
    state_ = State::kFatal;
    log_.error("bridge refused for good; not retrying", {{"link", index_}, {"error", end.error}});
    host_.onLinkChanged();
    return;
  }
  // After an attached bridge, the short first wait (the backoff was reset on attach); after a
  // reset close (4000), the reset's few ms whatever came before (Backoff::nextWait).
  scheduleRetry(end.wasAttached && end.retry.kind != RetryKind::kReset ? RetryHint{} : end.retry,
                end.wasAttached);
  host_.onLinkChanged();
}

void BridgeLink::onSessionFinished(BridgeClient& session) {
  auto it = std::find_if(sessions_.begin(), sessions_.end(),
                         [&](const auto& owned) { return owned.get() == &session; });
  if (it == sessions_.end()) return;
  finished_.push_back(std::move(*it));
  sessions_.erase(it);
  rescheduleTimer();  // deletes it from the timer callback, off this stack
}

void BridgeLink::onSessionChanged() {
  host_.onLinkChanged();
}

void BridgeLink::scheduleRetry(const RetryHint& hint, bool afterAttached) {
  const ScheduledWait wait = backoff_.nextWait(hint, afterAttached);
  const uint64_t delay = wait.delayMs;
  state_ = State::kWaiting;
  retryAtMs_ = uv_now(loop_) + delay;
  const char* kind = wait.kind == WaitKind::kAfterAttached ? "after_attached"
                     : wait.kind == WaitKind::kBusy        ? "busy"
                     : wait.kind == WaitKind::kReset       ? "reset"
                                                           : "broken";
  log_.info("bridge reconnecting", {{"link", index_},
                                    {"delay_ms", delay},
                                    {"kind", kind},
                                    {"failures", backoff_.failuresInARow()},
                                    {"busy", backoff_.busyInARow()}});
  rescheduleTimer();
}

void BridgeLink::setError(std::string error) {
  lastError_ = std::move(error);
  lastErrorAtMs_ = uv_now(loop_);
}

// --- The timer --------------------------------------------------------------------------------

void BridgeLink::rescheduleTimer() {
  if (state_ == State::kStopped) return;  // the timer is closing
  const uint64_t now = uv_now(loop_);
  uint64_t next = UINT64_MAX;
  if (!finished_.empty() || (state_ == State::kStopping && sessions_.empty())) next = now;
  if (state_ == State::kWaiting) next = std::min(next, retryAtMs_);
  for (const auto& session : sessions_) next = std::min(next, session->nextDeadlineMs());
  if (next == UINT64_MAX) {
    (void)uv_timer_stop(&timer_);
    return;
  }
  (void)uv_timer_start(&timer_, &onTimerFired, next > now ? next - now : 0, 0);
}

void BridgeLink::onTimerFired(uv_timer_t* timer) {
  static_cast<BridgeLink*>(timer->data)->onTimer();
}

void BridgeLink::onTimer() {
  if (state_ == State::kStopped) return;
  finished_.clear();
  if (state_ == State::kStopping) {
    maybeStopped();
    if (state_ == State::kStopped) return;
  }
  const uint64_t now = uv_now(loop_);
  if (state_ == State::kWaiting && now >= retryAtMs_) attempt();
  std::vector<BridgeClient*> visit;
  visit.reserve(sessions_.size());
  for (const auto& session : sessions_) visit.push_back(session.get());
  // Sessions are only removed through onSessionFinished, which defers their deletion.
  for (BridgeClient* session : visit) session->onTimer(now);
  rescheduleTimer();
}

// --- Stopping ---------------------------------------------------------------------------------

void BridgeLink::stop() {
  if (state_ == State::kStopping || state_ == State::kStopped) return;
  state_ = State::kStopping;
  current_ = nullptr;
  retryAtMs_ = 0;
  std::vector<BridgeClient*> open;
  for (const auto& session : sessions_) open.push_back(session.get());
  for (BridgeClient* session : open) session->stop(ws::kCloseGoingAway);
  // Finished sessions go away on the next timer visit, which then closes the timer.
  rescheduleTimer();
}

void BridgeLink::maybeStopped() {
  if (state_ != State::kStopping || !sessions_.empty() || !finished_.empty()) return;
  state_ = State::kStopped;
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), &onTimerClosed);
}

void BridgeLink::onTimerClosed(uv_handle_t* handle) {
  auto* self = static_cast<BridgeLink*>(handle->data);
  self->host_.onLinkStopped();  // the pool may delete the link later, not here
}

bool BridgeLink::sendText(const std::string& text, TextTiming timing) {
  return current_ != nullptr && current_->sendText(text, timing);
}

LinkStatus BridgeLink::status() const {
  LinkStatus status;
  status.attached = current_ != nullptr && current_->attached();
  status.fatal = state_ == State::kFatal;
  for (const auto& session : sessions_)
    status.connections += static_cast<int>(session->connections());
  status.lastError = lastError_;
  status.lastErrorAtMs = lastErrorAtMs_;
  // A link waiting for its staggered first dial is starting, not reconnecting: no retry to show.
  status.retryAtMs = state_ == State::kWaiting && attempts_ > 0 ? retryAtMs_ : 0;
  status.attempts = attempts_;
  return status;
}

}  // namespace ot::client
