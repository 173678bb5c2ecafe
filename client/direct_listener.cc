#include "client/direct_listener.h"

#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "client/bridge_client.h"
#include "client/bridge_settings.h"
#include "client/status_line.h"
#include "common/address_resolver.h"
#include "common/listen_socket.h"
#include "common/log.h"
#include "common/websocket_frame.h"

namespace ot::client {
namespace {

constexpr int kListenBacklog = 128;
constexpr int kAcceptsPerWakeup = 64;
// After EMFILE and the like: every accept fails for a while, so stop polling instead of spinning.
constexpr uint64_t kAcceptPauseMs = 1'000;

std::string hostPort(const std::string& host, uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

std::string noRelayText(const std::string& host, uint16_t port, uint64_t quietMs, bool everAttached,
                        const std::string& tunnelId, const std::string& origin) {
  const std::string where = hostPort(host, port);
  const std::string wait =
      (quietMs % 1000 == 0 ? std::to_string(quietMs / 1000) : formatSeconds(quietMs)) + " s";
  const std::string head = everAttached ? "no relay link on " + where + " for " + wait
                                        : "no relay has connected to " + where + " in " + wait;
  return head + ": is the origin's direct address set (PUT /api/tunnel/" + tunnelId + "/origins/" +
         origin + "/direct) and reachable from the relay?";
}

struct DirectListener::Impl final : SessionHost {
  enum class State : uint8_t { kNew, kRunning, kStopping, kClosing, kClosed };

  Impl(uv_loop_t* l, BridgeConfig config, DirectListenerOptions o, OnStatus callback)
      : loop(l),
        settings(makeBridgeSettings(std::move(config))),
        options(std::move(o)),
        onStatus(std::move(callback)) {
    (void)uv_timer_init(loop, &timer);
    timer.data = this;
    (void)uv_timer_init(loop, &notifyTimer);
    notifyTimer.data = this;
    openHandles = 2;
  }

  // --- Starting and accepting -----------------------------------------------------------------

  void start() {
    if (state != State::kNew) return;
    state = State::kRunning;
    quietSinceMs = uv_now(loop);
    config::ListenAddress address;
    address.kind = config::ListenAddress::Kind::kTcp;
    address.host = options.host;
    address.port = options.port;
    auto opened = net::ListenSocket::open(address, kListenBacklog);
    if (!opened.ok()) {
      fail("cannot listen for the relay on " + hostPort(options.host, options.port) + ": " +
           opened.error().message);
      return;
    }
    socket = std::move(opened).value();
    options.port = socket.port();  // port 0 (tests) picked one: name that one from now on
    if (uv_poll_init(loop, &poll, socket.fd()) != 0) {
      socket = net::ListenSocket{};
      fail("cannot watch " + hostPort(options.host, options.port));
      return;
    }
    poll.data = this;
    pollOpen = true;
    ++openHandles;
    (void)uv_poll_start(&poll, UV_READABLE, &onPollCb);
    log.info("listening for the relay (direct mode)",
             {{"profile", settings.config.profile},
              {"address", hostPort(options.host, options.port)},
              {"links", settings.config.links}});
    if (!settings.relayContextError.empty()) {
      log.error("cannot verify the relay", {{"error", settings.relayContextError}});
    }
    rescheduleTimer();
    scheduleNotify();
  }

  void fail(std::string error) {
    log.error("direct mode profile stopped", {{"error", error}});
    fatal = true;
    fatalError = std::move(error);
    scheduleNotify();
  }

  static void onPollCb(uv_poll_t* handle, int status, int) {
    auto* self = static_cast<Impl*>(handle->data);
    if (status < 0) {
      self->pauseAccepting(status);
      return;
    }
    self->acceptSome();
  }

  void acceptSome() {
    for (int i = 0; i < kAcceptsPerWakeup && state == State::kRunning; ++i) {
      sockaddr_storage peer{};
      const net::Accepted accepted = socket.accept(&peer);
      switch (accepted.status) {
        case net::AcceptStatus::kAccepted:
          onAccepted(accepted.fd, peer);
          continue;
        case net::AcceptStatus::kSkipped:
          continue;
        case net::AcceptStatus::kNoneWaiting:
          return;
        case net::AcceptStatus::kOutOfResources:
        case net::AcceptStatus::kFailed:
          pauseAccepting(-accepted.error);
          return;
      }
    }
  }

  void pauseAccepting(int status) {
    log.warn("accepting paused", {{"error", uv_strerror(status)}});
    (void)uv_poll_stop(&poll);
    resumeAtMs = uv_now(loop) + kAcceptPauseMs;
    rescheduleTimer();
  }

  void onAccepted(int fd, const sockaddr_storage& peer) {
    const std::string from = formatAddress(peer);
    if (sessions.size() >= options.maxLinks) {
      // The relay keeps what the owner set (at most 16 per machine); this many is a stranger or
      // a runaway: the socket goes before a byte is sent.
      (void)::close(fd);
      ++refusedCount;
      log.warn("connection over the cap closed at accept",
               {{"peer", from}, {"held", sessions.size()}, {"refused", refusedCount}});
      scheduleNotify();
      return;
    }
    log.debug("relay connection accepted", {{"peer", from}, {"profile", settings.config.profile}});
    sessions.push_back(std::make_unique<BridgeClient>(loop, settings, *this, nextLink++));
    sessions.back()->startAccepted(fd);  // may end (and finish) from inside
    scheduleNotify();
  }

  // --- SessionHost ----------------------------------------------------------------------------

  void onSessionAttached(BridgeClient&) override { onLinksChanged(); }
  // The relay replaces a draining bridge by dialing again; this one stays until it is closed.
  void onSessionDrain(BridgeClient&) override {}
  void onSessionEnded(BridgeClient& session, const SessionEnd& end) override {
    (void)session;
    if (!end.error.empty()) lastError = end.error;
    if (end.fatal && state == State::kRunning) {
      // A verified relay refused us for good (bad credential, unknown route, ...): as for a
      // dialed link, otunnel stops. A stranger cannot get here: it has no relay certificate.
      fail(end.error);
    }
    onLinksChanged();
  }
  void onSessionFinished(BridgeClient& session) override {
    auto it = std::find_if(sessions.begin(), sessions.end(),
                           [&](const auto& owned) { return owned.get() == &session; });
    if (it == sessions.end()) return;
    finished.push_back(std::move(*it));
    sessions.erase(it);
    rescheduleTimer();  // deleted from the timer's callback, off this stack
    scheduleNotify();
  }
  void onSessionChanged() override { scheduleNotify(); }
  void rescheduleTimer() override {
    if (state == State::kClosing || state == State::kClosed) return;
    const uint64_t now = uv_now(loop);
    uint64_t next = UINT64_MAX;
    // (While stopping, sessions still closing report back through onSessionFinished.)
    if (!finished.empty() || (state == State::kStopping && sessions.empty())) next = now;
    for (const auto& session : sessions) next = std::min(next, session->nextDeadlineMs());
    if (resumeAtMs != 0) next = std::min(next, resumeAtMs);
    if (state == State::kRunning && !quietNotified && attachedCount() == 0) {
      next = std::min(next, quietSinceMs + options.quietMs);
    }
    if (next == UINT64_MAX) {
      (void)uv_timer_stop(&timer);
      return;
    }
    (void)uv_timer_start(&timer, &onTimerCb, next > now ? next - now : 0, 0);
  }

  void onLinksChanged() {
    const int attached = attachedCount();
    if (attached > 0) {
      everAttached = true;
      quietNotified = false;
    } else if (lastAttached > 0) {
      quietSinceMs = uv_now(loop);  // all links gone: the wait starts again
      quietNotified = false;
    }
    lastAttached = attached;
    rescheduleTimer();
    scheduleNotify();
  }

  [[nodiscard]] int attachedCount() const {
    int n = 0;
    for (const auto& session : sessions) n += session->attached() ? 1 : 0;
    return n;
  }

  // --- The timer ------------------------------------------------------------------------------

  static void onTimerCb(uv_timer_t* handle) { static_cast<Impl*>(handle->data)->onTimer(); }

  void onTimer() {
    if (state == State::kClosing || state == State::kClosed) return;
    finished.clear();
    const uint64_t now = uv_now(loop);
    if (state == State::kStopping) {
      maybeClose();
      if (state != State::kStopping) return;
    }
    if (resumeAtMs != 0 && now >= resumeAtMs && state == State::kRunning) {
      resumeAtMs = 0;
      (void)uv_poll_start(&poll, UV_READABLE, &onPollCb);
    }
    std::vector<BridgeClient*> visit;
    for (const auto& session : sessions) visit.push_back(session.get());
    for (BridgeClient* session : visit) session->onTimer(now);
    if (state == State::kRunning && !quietNotified && attachedCount() == 0 &&
        now >= quietSinceMs + options.quietMs) {
      quietNotified = true;
      log.warn("no relay link", {{"error", quietText()}});
      scheduleNotify();
    }
    rescheduleTimer();
  }

  [[nodiscard]] std::string quietText() const {
    return noRelayText(options.host, options.port, options.quietMs, everAttached,
                       settings.config.tunnelId, settings.config.origin);
  }

  // --- Status ---------------------------------------------------------------------------------

  void scheduleNotify() {
    if (state != State::kRunning || notifyPending) return;
    notifyPending = true;
    (void)uv_timer_start(&notifyTimer, &onNotifyCb, 0, 0);
  }

  static void onNotifyCb(uv_timer_t* handle) {
    auto* self = static_cast<Impl*>(handle->data);
    self->notifyPending = false;
    if (self->onStatus && self->state == State::kRunning) self->onStatus();  // may stop us
  }

  [[nodiscard]] PoolStatus status() const {
    PoolStatus out;
    out.links = settings.config.links;
    out.attached = attachedCount();
    for (const auto& session : sessions) {
      out.openConnections += static_cast<int>(session->connections());
    }
    out.fatal = fatal;
    const uint64_t now = uv_now(loop);
    if (fatal) {
      out.lastError = fatalError;
    } else if (out.attached == 0 && state == State::kRunning &&
               now >= quietSinceMs + options.quietMs) {
      out.lastError = quietText();
    } else if (!lastError.empty()) {
      out.lastError = lastError;
    } else {
      out.lastError = settings.relayContextError;
    }
    return out;
  }

  // --- Stopping -------------------------------------------------------------------------------

  void stop() {
    if (state == State::kStopping || state == State::kClosing || state == State::kClosed) return;
    state = State::kStopping;
    if (pollOpen) {
      pollOpen = false;
      uv_close(reinterpret_cast<uv_handle_t*>(&poll), &onPollClosed);
    }
    std::vector<BridgeClient*> open;
    for (const auto& session : sessions) open.push_back(session.get());
    for (BridgeClient* session : open) session->stop(ws::kCloseGoingAway);
    rescheduleTimer();
  }

  static void onPollClosed(uv_handle_t* handle) {
    auto* self = static_cast<Impl*>(handle->data);
    self->socket = net::ListenSocket{};  // the descriptor goes after libuv let go of it
    self->onHandleClosed();
  }

  void maybeClose() {
    if (state != State::kStopping || !sessions.empty() || !finished.empty()) return;
    state = State::kClosing;
    uv_close(reinterpret_cast<uv_handle_t*>(&timer), &onTimerClosed);
    uv_close(reinterpret_cast<uv_handle_t*>(&notifyTimer), &onTimerClosed);
  }

  static void onTimerClosed(uv_handle_t* handle) {
    static_cast<Impl*>(handle->data)->onHandleClosed();
  }

  void onHandleClosed() {
    if (--openHandles != 0) return;
    state = State::kClosed;
    std::function<void()> callback = std::move(done);
    if (orphaned) {
      delete this;
      return;
    }
    if (callback) callback();  // may destroy the DirectListener (and this Impl)
  }

  uv_loop_t* loop;
  BridgeSettings settings;
  DirectListenerOptions options;
  OnStatus onStatus;
  log::Logger log{"client.direct"};
  State state = State::kNew;
  net::ListenSocket socket;
  uv_poll_t poll{};
  bool pollOpen = false;
  uv_timer_t timer{};
  uv_timer_t notifyTimer{};
  bool notifyPending = false;
  int openHandles = 0;
  bool orphaned = false;
  std::function<void()> done;
  std::vector<std::unique_ptr<BridgeClient>> sessions;  // accepted, not finished
  std::vector<std::unique_ptr<BridgeClient>> finished;  // deleted on the next timer visit
  int nextLink = 0;
  uint64_t refusedCount = 0;
  uint64_t resumeAtMs = 0;  // accepting paused until then (0: not paused)
  uint64_t quietSinceMs = 0;
  bool quietNotified = false;
  bool everAttached = false;
  int lastAttached = 0;
  bool fatal = false;
  std::string fatalError;
  std::string lastError;
};

DirectListener::DirectListener(uv_loop_t* loop, BridgeConfig config, DirectListenerOptions options,
                               OnStatus onStatus)
    : impl_(new Impl(loop, std::move(config), std::move(options), std::move(onStatus))) {}

DirectListener::~DirectListener() {
  if (impl_->state == Impl::State::kClosed) {
    delete impl_;
    return;
  }
  // Handles are open or closing and need the Impl until their callbacks ran.
  impl_->onStatus = nullptr;
  impl_->done = nullptr;
  impl_->orphaned = true;
  impl_->stop();
}

void DirectListener::start() {
  impl_->start();
}

void DirectListener::stop(std::function<void()> done) {
  impl_->done = std::move(done);
  impl_->stop();
}

void DirectListener::updateCertificate(std::string certificateChainPem, std::string privateKeyPem) {
  auto context =
      makeVisitorContext(certificateChainPem, privateKeyPem, impl_->settings.config.http2);
  if (!context.ok()) {
    impl_->log.error("renewed certificate unusable; keeping the previous one",
                     {{"error", context.error().message}});
    return;
  }
  impl_->settings.visitorContext = context.value();
  impl_->settings.visitorContextError.clear();
  impl_->settings.config.certificateChainPem = std::move(certificateChainPem);
  impl_->settings.config.privateKeyPem = std::move(privateKeyPem);
}

PoolStatus DirectListener::status() const {
  return impl_->status();
}

uint64_t DirectListener::refused() const {
  return impl_->refusedCount;
}

uint16_t DirectListener::boundPort() const {
  return impl_->socket.port();
}

size_t DirectListener::sendToAttached(const std::string& text, TextTiming timing) {
  size_t sent = 0;
  for (auto& session : impl_->sessions) sent += session->sendText(text, timing) ? 1U : 0U;
  return sent;
}

}  // namespace ot::client
