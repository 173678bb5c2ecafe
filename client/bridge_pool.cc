#include "client/bridge_pool.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "client/bridge_link.h"
#include "client/bridge_settings.h"
#include "common/log.h"

namespace ot::client {

// The pool's state lives here so that it can outlive a BridgePool destroyed before stop()
// finished: it then closes its handles and deletes itself from the last close callback.
struct BridgePool::Impl final : LinkHost {
  enum class State : uint8_t { kNew, kRunning, kStopping, kStopped };

  Impl(uv_loop_t* l, BridgeConfig config, OnStatus callback)
      : loop(l), settings(makeBridgeSettings(std::move(config))), onStatus(std::move(callback)) {
    (void)uv_timer_init(loop, &notifyTimer);
    notifyTimer.data = this;
  }

  // LinkHost
  void onLinkChanged() override { scheduleNotify(); }
  void onLinkStopped() override {
    ++stoppedLinks;
    if (stoppedLinks == links.size()) closeNotifyTimer();
  }

  // Status goes out from a timer callback of its own, so a handler that stops or destroys the
  // pool never runs inside a link's or a session's call stack.
  void scheduleNotify() {
    if (state == State::kStopped || notifyPending) return;
    notifyPending = true;
    (void)uv_timer_start(&notifyTimer, &onNotify, 0, 0);
  }

  static void onNotify(uv_timer_t* timer) {
    auto* self = static_cast<Impl*>(timer->data);
    self->notifyPending = false;
    if (self->onStatus) {
      const PoolStatus current = self->status();
      self->onStatus(current);  // may stop or destroy the pool: touch nothing after this
    }
  }

  void start() {
    if (state != State::kNew) return;
    state = State::kRunning;
    if (!settings.relayContextError.empty()) {
      log.error("cannot verify the relay", {{"error", settings.relayContextError}});
    }
    if (!settings.visitorContextError.empty()) {
      log.warn("visitors cannot be served yet", {{"error", settings.visitorContextError}});
    }
    for (int i = 0; i < settings.config.links; ++i) {
      links.push_back(std::make_unique<BridgeLink>(loop, settings, *this, i));
    }
    const std::vector<uint64_t>& delays = settings.config.startDelaysMs;
    for (size_t i = 0; i < links.size(); ++i) links[i]->start(i < delays.size() ? delays[i] : 0);
    scheduleNotify();
  }

  void stop(std::function<void()> callback) {
    if (state == State::kStopping || state == State::kStopped) {
      if (callback) done = std::move(callback);  // the latest caller is told
      return;
    }
    state = State::kStopping;
    done = std::move(callback);
    if (links.empty()) {
      closeNotifyTimer();
      return;
    }
    for (auto& link : links) link->stop();
  }

  void closeNotifyTimer() {
    if (state == State::kStopped) return;
    state = State::kStopped;
    uv_close(reinterpret_cast<uv_handle_t*>(&notifyTimer), &onNotifyTimerClosed);
  }

  // The last handle of the pool is closed: every link is stopped and may go.
  static void onNotifyTimerClosed(uv_handle_t* handle) {
    auto* self = static_cast<Impl*>(handle->data);
    self->closed = true;
    self->links.clear();
    std::function<void()> callback = std::move(self->done);
    if (self->orphaned) delete self;
    if (callback) callback();  // may destroy the BridgePool (and with it this Impl)
  }

  void updateCertificate(std::string chain, std::string key) {
    auto context = makeVisitorContext(chain, key, settings.config.http2);
    if (!context.ok()) {
      log.error("renewed certificate unusable; keeping the previous one",
                {{"error", context.error().message}});
      return;
    }
    settings.visitorContext = context.value();
    settings.visitorContextError.clear();
    settings.config.certificateChainPem = std::move(chain);
    settings.config.privateKeyPem = std::move(key);
    log.info("tunnel certificate updated",
             {{"fingerprint", tls::leafFingerprint(settings.config.certificateChainPem)}});
  }

  [[nodiscard]] PoolStatus status() const {
    PoolStatus out;
    out.links = settings.config.links;
    const uint64_t now = uv_now(loop);
    uint64_t lastErrorAt = 0;
    uint64_t soonest = UINT64_MAX;
    for (const auto& link : links) {
      const LinkStatus s = link->status();
      out.attached += s.attached ? 1 : 0;
      out.openConnections += s.connections;
      out.fatal = out.fatal || s.fatal;
      if (!s.lastError.empty() && (out.lastError.empty() || s.lastErrorAtMs >= lastErrorAt)) {
        out.lastError = s.lastError;
        lastErrorAt = s.lastErrorAtMs;
      }
      if (s.retryAtMs != 0) soonest = std::min(soonest, s.retryAtMs > now ? s.retryAtMs - now : 0);
    }
    if (out.lastError.empty()) out.lastError = settings.relayContextError;
    if (out.attached < out.links && soonest != UINT64_MAX) out.nextRetryMs = soonest;
    return out;
  }

  uv_loop_t* loop;
  BridgeSettings settings;
  OnStatus onStatus;
  log::Logger log{"client.pool"};
  State state = State::kNew;
  std::vector<std::unique_ptr<BridgeLink>> links;
  size_t stoppedLinks = 0;
  uv_timer_t notifyTimer{};
  bool notifyPending = false;
  bool closed = false;    // every handle is closed
  bool orphaned = false;  // the BridgePool is gone; delete this when closed
  std::function<void()> done;
};

BridgePool::BridgePool(uv_loop_t* loop, BridgeConfig config, OnStatus onStatus)
    : impl_(std::make_unique<Impl>(loop, std::move(config), std::move(onStatus))) {}

BridgePool::~BridgePool() {
  if (!impl_ || impl_->closed) return;
  // Handles are still open or closing and need the Impl until their callbacks ran: let it
  // finish on its own and free itself. Neither the status callback nor `done` runs any more.
  Impl* impl = impl_.release();
  impl->onStatus = nullptr;
  impl->done = nullptr;
  impl->orphaned = true;
  impl->stop(nullptr);
}

void BridgePool::start() {
  impl_->start();
}

void BridgePool::stop(std::function<void()> done) {
  impl_->stop(std::move(done));
}

void BridgePool::updateCertificate(std::string certificateChainPem, std::string privateKeyPem) {
  impl_->updateCertificate(std::move(certificateChainPem), std::move(privateKeyPem));
}

size_t BridgePool::sendToAttached(const std::string& text, TextTiming timing) {
  size_t sent = 0;
  for (auto& link : impl_->links) sent += link->sendText(text, timing) ? 1U : 0U;
  return sent;
}

PoolStatus BridgePool::status() const {
  return impl_->status();
}

}  // namespace ot::client
