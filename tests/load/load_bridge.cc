#include "tests/load/load_bridge.h"

#include <openssl/rand.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <string_view>
#include <utility>
#include <variant>

#include "common/bridge_control.h"
#include "common/websocket_frame.h"
#include "tests/load/loop_buffers.h"
#include "tests/load/owned_write.h"

namespace ot::load {
namespace {

constexpr uint64_t kAttachDeadlineMs = 10'000;  // docs/protocol.md section 10
constexpr uint32_t kWindow = bridge::kDefaultWindow;

ws::MaskKey randomMask() {
  ws::MaskKey key{};
  if (RAND_bytes(key.data(), static_cast<int>(key.size())) != 1) {
    const uint64_t r = client::uniformRandom(UINT32_MAX);
    for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(r >> (8 * i));
  }
  return key;
}

bool fatalUpgradeStatus(int status) {  // as client/bridge_client.cc
  return status == 400 || status == 404 || status == 405 || status == 426;
}

client::AttemptEnd closedBeforeAttached(uint16_t closeCode) {
  client::AttemptEnd end;
  end.cause = client::AttemptEnd::Cause::kClosed;
  end.closeCode = closeCode;
  return end;
}

static_assert(static_cast<size_t>(client::AttemptEnd::Cause::kOther) + 1 == kAttemptCauses);

}  // namespace

LoadBridge::LoadBridge(uv_loop_t* loop, const BridgeTarget& target, TunnelCredentials tunnel,
                       in_addr source, LoadCounters& counters)
    : loop_(loop),
      target_(target),
      tunnel_(std::move(tunnel)),
      source_(source),
      counters_(counters) {
  static uint64_t bridges = 0;
  sessionKey_ = "#" + std::to_string(++bridges);
  tcp_.data = this;
  timer_.data = this;
  connectReq_.data = this;
}

LoadBridge::~LoadBridge() = default;

void LoadBridge::start() {
  if (uv_timer_init(loop_, &timer_) == 0) timerOpen_ = true;
  attempt();
}

void LoadBridge::stop() {
  if (attached()) counters_.bridgesUp.fetch_sub(1, std::memory_order_relaxed);
  phase_ = Phase::kStopped;
  closeSocket();
  if (timerOpen_ && !uv_is_closing(reinterpret_cast<uv_handle_t*>(&timer_)))
    uv_close(reinterpret_cast<uv_handle_t*>(&timer_), onTimerClosedCb);
}

bool LoadBridge::cycle() {
  if (!attached()) return false;
  counters_.bridgesUp.fetch_sub(1, std::memory_order_relaxed);
  counters_.cycles.fetch_add(1, std::memory_order_relaxed);
  visitors_.clear();
  uv_timer_stop(&timer_);
  retryAtMs_ = uv_now(loop_);  // onCloseCb starts the next attempt at once
  phase_ = Phase::kClosing;
  closeSocket();
  return true;
}

void LoadBridge::attempt() {
  if (phase_ == Phase::kStopped) return;
  counters_.attempts.fetch_add(1, std::memory_order_relaxed);
  attemptStartMs_ = uv_now(loop_);
  draining_ = false;
  phase_ = Phase::kConnecting;
  if (uv_tcp_init_ex(loop_, &tcp_, AF_INET) != 0) {
    // otunnel: "cannot create a socket", a broken attempt.
    counters_.failures.fetch_add(1, std::memory_order_relaxed);
    scheduleRetry({}, false);
    phase_ = Phase::kWaiting;
    uv_timer_start(&timer_, onTimerCb, retryAtMs_ - uv_now(loop_), 0);
    return;
  }
  tcpOpen_ = true;
  uv_os_fd_t fd = -1;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(&tcp_), &fd) == 0) {
    // The port is picked at connect() for the whole 4-tuple, not at bind() for the address.
    const int on = 1;
    ::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &on, sizeof on);
  }
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr = source_;
  int rc = uv_tcp_bind(&tcp_, reinterpret_cast<const sockaddr*>(&local), 0);
  if (rc == 0)
    rc = uv_tcp_connect(&connectReq_, &tcp_, reinterpret_cast<const sockaddr*>(&target_.relay),
                        onConnectCb);
  if (rc != 0) {
    // otunnel's connect that fails to start (the bind is the tool's own step).
    counters_.refusedBeforeTls.fetch_add(1, std::memory_order_relaxed);
    endAs({client::AttemptEnd::Cause::kConnectFailed, rc});
    return;
  }
  uv_timer_start(&timer_, onTimerCb, kAttachDeadlineMs, 0);
}

void LoadBridge::onConnectCb(uv_connect_t* req, int status) {
  static_cast<LoadBridge*>(req->data)->onConnected(status);
}

void LoadBridge::onConnected(int status) {
  if (phase_ != Phase::kConnecting) return;
  if (status != 0) {
    // ECONNREFUSED (nothing listens between the old relayd and the new) is busy.
    counters_.refusedBeforeTls.fetch_add(1, std::memory_order_relaxed);
    endAs({client::AttemptEnd::Cause::kConnectFailed, status});
    return;
  }
  uv_tcp_nodelay(&tcp_, 1);
  lastReceiveMs_ = uv_now(loop_);
  tls_ = std::make_unique<tls::TlsStream>(
      tls::TlsEngine::client(target_.tlsContext, target_.domain, true, sessionKey_),
      static_cast<tls::TlsStream::Owner&>(*this), loopPlaintextBuffer());
  if (!tls_->valid() || startReading(reinterpret_cast<uv_stream_t*>(&tcp_), onReadCb) != 0) {
    broken();
    return;
  }
  phase_ = Phase::kTls;
  if (!tls_->startHandshake()) broken();
}

void LoadBridge::onReadCb(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  auto* self = static_cast<LoadBridge*>(stream->data);
  if (nread == 0) return;
  if (nread < 0) {
    self->onEndOfStream(static_cast<int>(nread));
    return;
  }
  if (self->phase_ < Phase::kTls || self->phase_ > Phase::kAttached) return;
  self->lastReceiveMs_ = uv_now(self->loop_);
  self->tls_->receive(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(buf->base), size_t(nread)));
}

void LoadBridge::onEndOfStream(int status) {
  switch (phase_) {
    case Phase::kTls:
      // Closed before the TLS handshake completed, no alert: relayd shed it (no handshake slot)
      // or, draining, refused it from its ClientHello. Busy for EOF and resets.
      counters_.refusedBeforeTls.fetch_add(1, std::memory_order_relaxed);
      endAs({client::AttemptEnd::Cause::kClosedInHandshake, status});
      return;
    case Phase::kUpgrading: {
      // A refusal whose body runs to the end of the connection completes now.
      const client::RelayUpgrade::Step step = upgrade_->finish();
      onUpgradeFailed(step.failure);
      return;
    }
    case Phase::kAttaching:
      endAs(closedBeforeAttached(ws::kCloseAbnormal));  // upgraded, then dropped: broken
      return;
    default:
      broken();  // attached: the short wait after an attached bridge
      return;
  }
}

void LoadBridge::onUpgradeFailed(const client::TransportFailure& failure) {
  // The RetryHint comes from RelayUpgrade, which classified the status and Retry-After.
  if (failure.permanent || fatalUpgradeStatus(failure.httpStatus)) {
    endFatal();
    return;
  }
  endAttempt(failure.retry, client::AttemptEnd::Cause::kUpgradeRefused);
}

bool LoadBridge::sendCiphertext(std::vector<uint8_t> bytes) {
  if (!tcpOpen_ || phase_ == Phase::kClosing || phase_ == Phase::kStopped) return false;
  return writeOwned(reinterpret_cast<uv_stream_t*>(&tcp_), std::move(bytes));
}

void LoadBridge::onTlsHandshakeDone() {
  (tls_->sessionReused() ? counters_.handshakesResumed : counters_.handshakesFull)
      .fetch_add(1, std::memory_order_relaxed);
  std::array<uint8_t, 16> nonce{};
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
    broken();
    return;
  }
  upgrade_ = client::RelayUpgrade::create(target_.domain, "/api/tunnel/" + tunnel_.id + "/bridge",
                                          "otunnel/load", nonce);
  if (!upgrade_) {
    endFatal();  // otunnel: the request cannot be built, permanent
    return;
  }
  phase_ = Phase::kUpgrading;
  const std::string& request = upgrade_->request();
  if (!tls_->write(std::span(reinterpret_cast<const uint8_t*>(request.data()), request.size())))
    broken();
}

void LoadBridge::onTlsPlaintext(std::span<uint8_t> bytes) {
  if (phase_ == Phase::kUpgrading) {
    const client::RelayUpgrade::Step step = upgrade_->feed(bytes);
    if (step.outcome == client::RelayUpgrade::Outcome::kNeedMore) return;
    if (step.outcome == client::RelayUpgrade::Outcome::kFailed) {
      onUpgradeFailed(step.failure);
      return;
    }
    phase_ = Phase::kAttaching;
    reader_.emplace(ws::Role::kClient, bridge::kMaxMessageBeforeAttach, ws::Delivery::kWhole);
    bridge::AttachRequest attach;
    attach.token = tunnel_.token;
    attach.window = kWindow;
    const std::string text = bridge::serializeAttach(attach);
    sendFrame(ws::Opcode::kText,
              std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
    bytes = bytes.subspan(step.consumed);
  }
  consumeWebSocket(bytes);
}

void LoadBridge::consumeWebSocket(std::span<uint8_t> data) {
  while (!data.empty() && (phase_ == Phase::kAttaching || phase_ == Phase::kAttached)) {
    ws::ReadStep step = reader_->next(data);
    data = data.subspan(step.consumed);
    switch (step.event) {
      case ws::ReadEvent::kNeedMore:
        if (step.consumed == 0) return;
        break;
      case ws::ReadEvent::kData:
        break;  // whole messages only
      case ws::ReadEvent::kMessage:
        if (step.opcode == ws::Opcode::kText)
          onText(std::string_view(reinterpret_cast<const char*>(step.payload.data()),
                                  step.payload.size()));
        else
          onBinary(step.payload);
        break;
      case ws::ReadEvent::kControl:
        if (step.opcode == ws::Opcode::kPing) {
          counters_.pingsAnswered.fetch_add(1, std::memory_order_relaxed);
          sendPong(step.payload);
        } else if (step.opcode == ws::Opcode::kClose) {
          if (step.closeCode == ws::kCloseServiceRestart)
            counters_.closes1012.fetch_add(1, std::memory_order_relaxed);
          const std::vector<uint8_t> reply = ws::buildClose(
              step.closeCode == ws::kCloseNoStatus ? ws::kCloseNormal : step.closeCode, {},
              randomMask());
          if (tls_->write(reply)) tls_->flush();
          // Before `attached`, 1012 / 1013 are busy (the relay restarts, try again later).
          endAs(closedBeforeAttached(step.closeCode));
          return;
        }
        break;
      case ws::ReadEvent::kError:
        endAs(closedBeforeAttached(ws::closeCodeFor(step.error)));
        return;
    }
  }
}

void LoadBridge::onText(std::string_view text) {
  auto parsed = bridge::parseRelayMessage(text);
  if (phase_ == Phase::kAttached) {
    // Once attached only drain matters; anything else is ignored (as otunnel does).
    if (parsed && std::holds_alternative<bridge::Drain>(parsed.value()) && !draining_) onDrain();
    return;
  }
  if (!parsed) {
    broken();  // a protocol error before attached
    return;
  }
  if (const auto* attached = std::get_if<bridge::Attached>(&parsed.value())) {
    phase_ = Phase::kAttached;
    backoff_.attached();
    heartbeatMs_ = attached->heartbeatMs;
    statusSent_ = false;
    statusHeldSinceMs_ = 0;
    reader_->setMaxMessageSize(bridge::kMaxMessageAfterAttach);
    counters_.attaches.fetch_add(1, std::memory_order_relaxed);
    counters_.bridgesUp.fetch_add(1, std::memory_order_relaxed);
    counters_.attachMicrosTotal.fetch_add((uv_now(loop_) - attemptStartMs_) * 1000,
                                          std::memory_order_relaxed);
    uv_timer_start(&timer_, onTimerCb, target_.heartbeatCheckMs, target_.heartbeatCheckMs);
    return;
  }
  if (const auto* error = std::get_if<bridge::AttachError>(&parsed.value())) {
    counters_.attachErrors.fetch_add(1, std::memory_order_relaxed);
    // otunnel gives up on these two (too_many_routes too, but the tool sends one route).
    if (error->code == bridge::AttachErrorCode::kBadToken ||
        error->code == bridge::AttachErrorCode::kInvalidRoute) {
      endFatal();
      return;
    }
    broken(client::AttemptEnd::Cause::kAttachError);
    return;
  }
  // drain instead of attached: the relay is restarting, busy.
  counters_.drains.fetch_add(1, std::memory_order_relaxed);
  client::AttemptEnd drain;
  drain.cause = client::AttemptEnd::Cause::kDrain;
  endAs(drain);
}

void LoadBridge::onDrain() {
  // No new connections come on this bridge; the relay closes it with 1012 once its connections
  // are done (at once for an idle bridge). otunnel schedules the replacement now, 125-250 ms out.
  counters_.drains.fetch_add(1, std::memory_order_relaxed);
  draining_ = true;
  counters_.bridgesUp.fetch_sub(1, std::memory_order_relaxed);
  scheduleRetry({}, true);
}

void LoadBridge::onBinary(std::span<const uint8_t> message) {
  if (phase_ != Phase::kAttached) {
    broken();  // a binary message before attached: a protocol error
    return;
  }
  auto decoded = bridge::decodeFrame(message);
  if (!decoded) {
    broken();
    return;
  }
  const bridge::Frame& frame = decoded.value();
  switch (frame.kind) {
    case bridge::FrameKind::kOpen:
      visitors_[frame.connId] = Visitor{};
      counters_.visitorsEchoed.fetch_add(1, std::memory_order_relaxed);
      return;
    case bridge::FrameKind::kData: {
      auto it = visitors_.find(frame.connId);
      if (it == visitors_.end()) return;
      // Echo. The relay's window (512 KiB) is as large as ours, so echoing what it sent never
      // outruns the credit it grants as the visitor reads; the tool's visitors are small.
      sendBridgeFrame(bridge::encodeData(frame.connId, frame.payload));
      it->second.ungranted += static_cast<uint32_t>(frame.payload.size());
      if (it->second.ungranted >= kWindow / 4) {
        sendBridgeFrame(bridge::encodeCredit(frame.connId, it->second.ungranted));
        it->second.ungranted = 0;
      }
      return;
    }
    case bridge::FrameKind::kEnd: {
      auto it = visitors_.find(frame.connId);
      if (it == visitors_.end()) return;
      sendBridgeFrame(bridge::encodeEnd(frame.connId));
      visitors_.erase(it);
      return;
    }
    case bridge::FrameKind::kReset:
      visitors_.erase(frame.connId);
      return;
    case bridge::FrameKind::kCredit:
      return;
  }
}

namespace {

// What a one-link otunnel with its one unnamed profile up reports (client::statusReportOf).
std::span<const uint8_t> statusReportText() {
  static const std::string text = [] {
    bridge::ProfileReport profile;
    profile.linksWanted = 1;
    profile.linksUp = 1;
    return bridge::serializeStatus(bridge::StatusReport{{profile}});
  }();
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

}  // namespace

void LoadBridge::sendStatusReport(uint64_t now) {
  statusSent_ = true;
  statusHeldSinceMs_ = 0;
  lastStatusMs_ = now;
  counters_.statusReports.fetch_add(1, std::memory_order_relaxed);
  sendFrame(ws::Opcode::kText, statusReportText());
}

void LoadBridge::sendPong(std::span<const uint8_t> payload) {
  if (statusHeldSinceMs_ == 0) {
    sendFrame(ws::Opcode::kPong, payload);
    return;
  }
  // The held refresh rides in the pong's TLS record, as otunnel sends it.
  std::vector<uint8_t> frames = ws::buildFrame(ws::Opcode::kPong, payload, randomMask());
  const std::vector<uint8_t> text =
      ws::buildFrame(ws::Opcode::kText, statusReportText(), randomMask());
  frames.insert(frames.end(), text.begin(), text.end());
  statusHeldSinceMs_ = 0;
  lastStatusMs_ = uv_now(loop_);
  counters_.statusReports.fetch_add(1, std::memory_order_relaxed);
  if (!tls_->write(frames)) endAs(closedBeforeAttached(ws::kCloseAbnormal));
}

void LoadBridge::sendFrame(ws::Opcode opcode, std::span<const uint8_t> payload) {
  const std::vector<uint8_t> frame = ws::buildFrame(opcode, payload, randomMask());
  if (!tls_->write(frame)) endAs(closedBeforeAttached(ws::kCloseAbnormal));
}

void LoadBridge::onTimerCb(uv_timer_t* timer) {
  static_cast<LoadBridge*>(timer->data)->onTimer();
}

void LoadBridge::onTimer() {
  const uint64_t now = uv_now(loop_);
  switch (phase_) {
    case Phase::kWaiting:
      attempt();
      return;
    case Phase::kConnecting:
    case Phase::kTls:
    case Phase::kUpgrading:
    case Phase::kAttaching:
      counters_.deadlines.fetch_add(1, std::memory_order_relaxed);
      broken();  // no `attached` within 10 s
      return;
    case Phase::kAttached:
      if (now - lastReceiveMs_ >= 3ull * heartbeatMs_) {
        broken();  // the relay fell silent: the short wait after an attached bridge
      } else if (now - lastReceiveMs_ >= heartbeatMs_ + heartbeatMs_ / 2 &&
                 now - lastPingMs_ >= heartbeatMs_) {
        // otunnel's rule (client/bridge_client.cc, clientPingDueMs): a heartbeat and a half of
        // silence, so a healthy relay's own ping always comes first.
        lastPingMs_ = now;
        sendFrame(ws::Opcode::kPing, {});
      }
      // otunnel's reporter: the first report after `attached` at once (a change), each refresh
      // held for the next pong, or alone after a heartbeat without a ping.
      if (target_.statusRefreshMs == 0) return;
      if (!statusSent_) {
        sendStatusReport(now);
      } else if (statusHeldSinceMs_ == 0 && now - lastStatusMs_ >= target_.statusRefreshMs) {
        statusHeldSinceMs_ = now;
      } else if (statusHeldSinceMs_ != 0 && now - statusHeldSinceMs_ >= heartbeatMs_) {
        sendStatusReport(now);
      }
      return;
    case Phase::kClosing:
    case Phase::kStopped:
      return;
  }
}

void LoadBridge::endAttempt(const client::RetryHint& hint, client::AttemptEnd::Cause cause) {
  if (phase_ == Phase::kClosing || phase_ == Phase::kStopped || phase_ == Phase::kWaiting) return;
  if (phase_ == Phase::kAttached) {
    if (!draining_) {  // a drained bridge's wait was scheduled at its drain
      counters_.bridgesUp.fetch_sub(1, std::memory_order_relaxed);
      scheduleRetry({}, true);
    }
  } else {
    counters_.failures.fetch_add(1, std::memory_order_relaxed);
    scheduleRetry(hint, false, cause);
  }
  visitors_.clear();
  uv_timer_stop(&timer_);
  phase_ = Phase::kClosing;
  closeSocket();
}

void LoadBridge::endFatal() {
  if (phase_ == Phase::kClosing || phase_ == Phase::kStopped || phase_ == Phase::kWaiting) return;
  counters_.failures.fetch_add(1, std::memory_order_relaxed);
  counters_.fatal.fetch_add(1, std::memory_order_relaxed);
  visitors_.clear();
  uv_timer_stop(&timer_);
  phase_ = Phase::kStopped;  // the timer closes with stop()
  closeSocket();
}

void LoadBridge::scheduleRetry(const client::RetryHint& hint, bool afterAttached,
                               client::AttemptEnd::Cause cause) {
  const client::ScheduledWait wait = backoff_.nextWait(hint, afterAttached);
  countWait(counters_, wait);
  if (wait.kind == WaitKind::kBroken)
    counters_.brokenBy[static_cast<size_t>(cause)].fetch_add(1, std::memory_order_relaxed);
  retryAtMs_ = uv_now(loop_) + wait.delayMs;
}

void LoadBridge::closeSocket() {
  if (tcpOpen_ && !uv_is_closing(reinterpret_cast<uv_handle_t*>(&tcp_)))
    uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), onCloseCb);
}

void LoadBridge::onCloseCb(uv_handle_t* handle) {
  auto* self = static_cast<LoadBridge*>(handle->data);
  self->tcpOpen_ = false;
  self->tls_.reset();
  self->upgrade_.reset();
  self->reader_.reset();
  self->tcp_ = uv_tcp_t{};
  self->tcp_.data = self;
  if (self->phase_ == Phase::kStopped) return;
  self->phase_ = Phase::kWaiting;
  const uint64_t now = uv_now(self->loop_);
  uv_timer_start(&self->timer_, onTimerCb, self->retryAtMs_ > now ? self->retryAtMs_ - now : 0, 0);
}

void LoadBridge::onTimerClosedCb(uv_handle_t* handle) {
  static_cast<LoadBridge*>(handle->data)->timerOpen_ = false;
}

}  // namespace ot::load
