#include "client/bridge_client.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include "client/pool_rules.h"
#include "common/bridge_frame.h"
#include "common/websocket_frame.h"

namespace ot::client {
namespace {

constexpr uint64_t kNever = UINT64_MAX;
constexpr uint64_t kSilentBeats = 3;  // section 8: give up after three heartbeats of silence

// When the client pings (section 8): after a heartbeat and a half without a byte from the relay,
// and at most once a heartbeat. The relay pings a silent bridge after one heartbeat, so on a
// healthy bridge the relay's ping always comes first and the client never needs to: the relay
// then sends its pings in batches (one timer-wheel slot at a time) and reads their pongs in
// batches too, instead of waking once for each client's own ping (docs/capacity.md, "Idle
// heartbeat cost"). The client's ping still keeps a bridge alive with a relay that stopped
// pinging, well before the three silent heartbeats that end it.
uint64_t clientPingDueMs(uint64_t lastReceiveMs, uint64_t lastPingMs, uint64_t beat) {
  return std::max(lastReceiveMs + beat + beat / 2, lastPingMs + beat);
}

bool fatalUpgradeStatus(int status) {
  return status == 400 || status == 404 || status == 405 || status == 426;
}

}  // namespace

BridgeClient::BridgeClient(uv_loop_t* loop, const BridgeSettings& settings, SessionHost& host,
                           int link)
    : loop_(loop), settings_(settings), host_(host), link_(link) {}

BridgeClient::~BridgeClient() = default;

void BridgeClient::start() {
  startOn(-1);
}

void BridgeClient::startAccepted(int fd) {
  startOn(fd);
}

void BridgeClient::startOn(int fd) {
  attemptDeadlineMs_ = uv_now(loop_) + settings_.config.attachDeadlineMs;
  if (!settings_.relayContext) {
    if (fd >= 0) (void)::close(fd);
    endSession({false, true, settings_.relayContextError, {}});
    maybeFinished();
    return;
  }
  const BridgeConfig& config = settings_.config;
  RelayEndpoint endpoint;
  endpoint.host = config.relayHost;
  endpoint.port = config.relayPort;
  endpoint.domain = config.domain;
  endpoint.path = "/api/tunnel/" + config.tunnelId + "/bridge";
  endpoint.userAgent = config.userAgent;
  endpoint.tlsContext = settings_.relayContext;
  transport_ = fd >= 0 ? RelayTransport::adopt(loop_, std::move(endpoint), *this, fd)
                       : RelayTransport::create(loop_, std::move(endpoint), *this);
  if (transport_ == nullptr) {
    endSession({false, false, "cannot create a socket", {}});
    maybeFinished();
    return;
  }
  host_.rescheduleTimer();
  transport_->start();
}

void BridgeClient::stop(uint16_t code) {
  if (transport_ != nullptr) transport_->close(code, "client going away");
  endSession({phase_ == Phase::kAttached, false, {}, {}});
  maybeFinished();
}

// --- The relay's messages ---------------------------------------------------------------------

void BridgeClient::onUpgraded() {
  phase_ = Phase::kAwaitingAttached;
  const BridgeConfig& config = settings_.config;
  bridge::AttachRequest attach;
  // A derived credential stands in for the token: it attaches only under its own origin name.
  attach.token = config.credential.empty() ? config.token : config.credential;
  attach.profileIndex = config.profileIndex;
  attach.routes = attachRoutes(config);
  attach.maxConns = config.maxConns;
  attach.origin = config.origin;
  attach.profile = config.profile;
  attach.window = config.window;
  (void)transport_->sendText(bridge::serializeAttach(attach));
}

void BridgeClient::onTransportFailed(const TransportFailure& failure) {
  endSession({false, failure.permanent || fatalUpgradeStatus(failure.httpStatus), failure.text,
              failure.retry});
}

void BridgeClient::onTextMessage(std::string_view text) {
  if (ended_) return;
  auto parsed = bridge::parseRelayMessage(text);
  if (phase_ == Phase::kAttached) {
    // Once attached, only drain matters; anything unknown or malformed is ignored (4.5).
    if (parsed.ok() && std::holds_alternative<bridge::Drain>(parsed.value()) && !draining_) {
      draining_ = true;
      log_.info("relay drains the bridge", {{"link", link_}, {"bridge", attached_.bridgeId}});
      host_.onSessionDrain(*this);
    }
    return;
  }
  if (!parsed.ok()) {
    protocolError("unexpected message before attached: " +
                  std::string(bridge::relayMessageErrorName(parsed.error())));
    return;
  }
  onRelayMessage(parsed.value());
}

void BridgeClient::onRelayMessage(const bridge::RelayMessage& message) {
  if (const auto* attached = std::get_if<bridge::Attached>(&message)) {
    if (auto refusal = refuseAttached(*attached, !settings_.config.credential.empty())) {
      transport_->close(ws::kCloseNormal, "bridge protocol too old");
      endSession({false, true, std::move(*refusal), {}});
      return;
    }
    attached_ = *attached;
    phase_ = Phase::kAttached;
    lastPingMs_ = 0;
    transport_->setMaxMessageSize(bridge::kMaxMessageAfterAttach);
    log_.info("bridge attached", {{"link", link_},
                                  {"bridge", attached_.bridgeId},
                                  {"heartbeat_ms", attached_.heartbeatMs},
                                  {"tls", transport_->tlsDetached() ? "detached" : "openssl"},
                                  {"window", attached_.limits.window}});
    host_.onSessionAttached(*this);
    host_.rescheduleTimer();
    return;
  }
  if (const auto* error = std::get_if<bridge::AttachError>(&message)) {
    std::string text = "attach_error " + std::string(bridge::attachErrorCodeName(error->code));
    if (!error->message.empty()) text += ": " + error->message;
    if (error->code == bridge::AttachErrorCode::kBadToken) {
      text = badTokenText(!settings_.config.credential.empty(), error->message);
    }
    // The relay closes right after; answer its close promptly instead of waiting for it.
    transport_->close(ws::kCloseNormal);
    endSession({false, fatalAttachError(*error), std::move(text), {}});
    return;
  }
  transport_->close(ws::kCloseNormal);
  AttemptEnd drain;
  drain.cause = AttemptEnd::Cause::kDrain;
  endSession({false, false, "the relay is draining", classifyAttemptEnd(drain)});
}

bool BridgeClient::fatalAttachError(const bridge::AttachError& error) const {
  switch (error.code) {
    case bridge::AttachErrorCode::kBadToken:
    case bridge::AttachErrorCode::kInvalidRoute:
      return true;
    case bridge::AttachErrorCode::kTooManyRoutes:
      return attachRoutes(settings_.config).size() > bridge::kMaxRoutesPerAttach;
    case bridge::AttachErrorCode::kCertNotReady:
    case bridge::AttachErrorCode::kRouteConflict:
    // Both pass with time (a failure window ends, a bridge detaches): retry with the backoff,
    // which doubles up to 30 s, so a refused client does not hammer the relay.
    case bridge::AttachErrorCode::kTooManyFailures:
    case bridge::AttachErrorCode::kTooManyBridges:
    case bridge::AttachErrorCode::kError:
      return false;
  }
  return false;
}

void BridgeClient::onBinaryMessage(std::span<const uint8_t> message) {
  if (ended_) return;
  if (phase_ != Phase::kAttached) {
    protocolError("binary message before attached");
    return;
  }
  const auto decoded = bridge::decodeFrame(message);
  if (!decoded.ok()) {
    protocolError("bad stream frame: " + std::string(bridge::frameErrorName(decoded.error())));
    return;
  }
  const bridge::Frame& frame = decoded.value();
  if (frame.kind == bridge::FrameKind::kOpen) {
    onOpen(frame);
    return;
  }
  const auto it = streams_.find(frame.connId);
  if (it == streams_.end()) {
    // At or below the highest open: a finished connection (ignore); above it: unused.
    if (frame.connId > highestOpened_) {
      protocolError(std::string(bridge::frameKindName(frame.kind)) + " for unused connection " +
                    std::to_string(frame.connId));
    }
    return;
  }
  LocalStream& stream = *it->second;
  FrameVerdict verdict = FrameVerdict::kOk;
  switch (frame.kind) {
    case bridge::FrameKind::kData:
      verdict = stream.onData(frame.payload);
      break;
    case bridge::FrameKind::kEnd:
      verdict = stream.onEnd();
      break;
    case bridge::FrameKind::kReset:
      stream.onReset();
      break;
    case bridge::FrameKind::kCredit:
      verdict = stream.onCredit(frame.increment);
      break;
    case bridge::FrameKind::kOpen:
      break;
  }
  if (verdict == FrameVerdict::kProtocolError) {
    protocolError(std::string(bridge::frameKindName(frame.kind)) + " not allowed on connection " +
                  std::to_string(frame.connId) + " in its state");
  } else if (verdict == FrameVerdict::kFlowControlViolation) {
    protocolError("flow-control violation on connection " + std::to_string(frame.connId));
  }
}

void BridgeClient::onOpen(const bridge::Frame& frame) {
  if (frame.connId <= highestOpened_) {
    protocolError("open out of order (connection " + std::to_string(frame.connId) + ")");
    return;
  }
  highestOpened_ = frame.connId;
  const BridgeConfig& config = settings_.config;
  const size_t open =
      static_cast<size_t>(std::count_if(streams_.begin(), streams_.end(), [](const auto& entry) {
        return !entry.second->protocolClosed();
      }));
  if (open >= attached_.limits.maxConns) {
    // The relay promised not to; refusing the one connection keeps our memory bounded.
    sendReset(frame.connId, bridge::ResetReason::kProtocolError, "max_conns exceeded");
    return;
  }
  const auto route = config.routes.find(std::string(frame.route));
  if (route == config.routes.end()) {
    sendReset(frame.connId, bridge::ResetReason::kConnectFailed,
              "no local service for route \"" + std::string(frame.route) + "\"");
    return;
  }
  StreamOptions options;
  options.connId = frame.connId;
  options.target = route->second;
  options.receiveWindow = config.window;
  options.sendWindow = attached_.limits.window;
  options.maxPayload = attached_.limits.maxPayload;
  options.handshakeTimeoutMs = config.handshakeTimeoutMs;
  if (config.terminateTls) {
    if (!settings_.visitorContext) {
      sendReset(frame.connId, bridge::ResetReason::kConnectFailed, settings_.visitorContextError);
      return;
    }
    options.tlsContext = settings_.visitorContext;
  }
  LocalStream* stream = LocalStream::create(loop_, *this, std::move(options));
  if (stream == nullptr) {
    sendReset(frame.connId, bridge::ResetReason::kConnectFailed, "cannot create a socket");
    return;
  }
  streams_.emplace(frame.connId, stream);
  host_.onSessionChanged();
  stream->start();
}

void BridgeClient::sendReset(uint32_t connId, bridge::ResetReason reason, std::string_view text) {
  const std::vector<uint8_t> frame = bridge::encodeReset(connId, reason, text);
  sendStreamFrame(frame, {});
}

void BridgeClient::onDisconnected(uint16_t code, std::string_view reason) {
  if (credentialRevoked(code, reason)) {
    endSession({phase_ == Phase::kAttached, true, revokedText(), {}});
    return;
  }
  std::string text = code == ws::kCloseAbnormal
                         ? "connection lost"
                         : "relay closed the bridge with " + std::to_string(code);
  if (!reason.empty()) text += ": " + std::string(reason);
  AttemptEnd end;
  end.cause = AttemptEnd::Cause::kClosed;
  end.closeCode = code;
  endSession({phase_ == Phase::kAttached, false, std::move(text), classifyAttemptEnd(end)});
}

void BridgeClient::onTransportClosed() {
  transport_ = nullptr;
  endSession({phase_ == Phase::kAttached, false, "connection closed", {}});
  maybeFinished();
}

// --- Streams ----------------------------------------------------------------------------------

void BridgeClient::onWritable() {
  std::vector<LocalStream*> waiting;
  waiting.reserve(streams_.size());
  for (const auto& [id, stream] : streams_) waiting.push_back(stream);
  for (LocalStream* stream : waiting) {
    if (ended_ || transport_ == nullptr || transport_->congested()) return;
    stream->resume();
  }
}

void BridgeClient::onBytesWritten() {
  if (scheduler_.waiting() > 0) runTurns();
}

bool BridgeClient::bridgeHasRoom() const {
  return transport_ != nullptr && scheduler_.idleWithRoom(transport_->queuedBytes());
}

void BridgeClient::onStreamReady(uint32_t connId) {
  scheduler_.markReady(connId);
  runTurns();
}

void BridgeClient::runTurns() {
  if (runningTurns_) return;  // a turn's stream asked again: the loop below serves it
  runningTurns_ = true;
  // The turns of one round leave in one write: the transport counts held frames as queued, so
  // the low mark bounds a batch as it bounds the socket's queue. When the socket took the batch
  // at once nothing is queued and no write completion will call again: another round.
  for (bool gave = true; gave;) {
    gave = false;
    beginFrameBatch();
    while (!ended_ && transport_ != nullptr) {
      const std::optional<uint32_t> connId = scheduler_.next(transport_->queuedBytes());
      if (!connId) break;
      gave = true;
      const auto it = streams_.find(*connId);
      if (it != streams_.end()) (void)it->second->onTurn(StreamScheduler::kQuantum);
    }
    endFrameBatch();
  }
  runningTurns_ = false;
}

bool BridgeClient::bridgeCongested() const {
  return transport_ != nullptr && transport_->congested();
}

void BridgeClient::sendStreamFrame(std::span<const uint8_t> head,
                                   std::span<const uint8_t> payload) {
  if (transport_ != nullptr && !ended_) (void)transport_->sendBinary(head, payload);
}

void BridgeClient::onStreamDeadlineChanged() {
  host_.rescheduleTimer();
}

void BridgeClient::onLocalServiceUnreachable(const LocalTarget& target, std::string_view error) {
  // A visitor per failed connect: a page with many assets would otherwise print dozens of lines.
  constexpr uint64_t kUnreachableLogEveryMs = 10'000;
  const uint64_t now = uv_now(loop_);
  if (unreachableLogged_ && now - unreachableLoggedMs_ < kUnreachableLogEveryMs) {
    ++unreachableSuppressed_;
    return;
  }
  log_.warn("cannot reach the local service; its visitors get an error",
            {{"target", target.host + ":" + std::to_string(target.port)},
             {"error", std::string(error)},
             {"suppressed", unreachableSuppressed_}});
  unreachableLogged_ = true;
  unreachableLoggedMs_ = now;
  unreachableSuppressed_ = 0;
}

void BridgeClient::onStreamFreed(uint32_t connId) {
  streams_.erase(connId);
  scheduler_.remove(connId);
  host_.onSessionChanged();
  maybeFinished();
}

// --- Time -------------------------------------------------------------------------------------

uint64_t BridgeClient::nextDeadlineMs() const {
  uint64_t next = kNever;
  if (transport_ != nullptr && transport_->closeDeadlineMs() != 0) {
    next = transport_->closeDeadlineMs();
  }
  if (!ended_ && phase_ != Phase::kAttached) next = std::min(next, attemptDeadlineMs_);
  if (!ended_ && phase_ == Phase::kAttached && transport_ != nullptr) {
    const uint64_t last = transport_->lastReceiveMs();
    const uint64_t beat = attached_.heartbeatMs;
    next = std::min({next, clientPingDueMs(last, lastPingMs_, beat), last + kSilentBeats * beat});
    if (const uint64_t held = transport_->heldTextSinceMs(); held != 0)
      next = std::min(next, held + beat);
  }
  if (allowanceRecheckMs_ != 0) next = std::min(next, allowanceRecheckMs_);
  for (const auto& [id, stream] : streams_) {
    if (stream->deadlineMs() != 0) next = std::min(next, stream->deadlineMs());
  }
  return next;
}

void BridgeClient::onTimer(uint64_t nowMs) {
  if (transport_ != nullptr && transport_->closeDeadlineMs() != 0 &&
      nowMs >= transport_->closeDeadlineMs()) {
    transport_->abort();  // the relay did not answer our close within 5 s
  }
  if (!ended_ && phase_ != Phase::kAttached && nowMs >= attemptDeadlineMs_) {
    if (transport_ != nullptr) transport_->abort();
    endSession({false, false, "no attached within 10 s", {}});
  }
  if (!ended_ && phase_ == Phase::kAttached && transport_ != nullptr) {
    const uint64_t last = transport_->lastReceiveMs();
    const uint64_t beat = attached_.heartbeatMs;
    if (nowMs >= last + kSilentBeats * beat) {
      transport_->close(ws::kCloseGoingAway, "relay silent");
      endSession(
          {true, false, "nothing from the relay for " + std::to_string(nowMs - last) + " ms", {}});
    } else if (nowMs >= clientPingDueMs(last, lastPingMs_, beat)) {
      (void)transport_->sendPing({});
      lastPingMs_ = nowMs;
    }
    // No ping came within a heartbeat for the held text (a busy bridge, which the relay does not
    // ping, or a relay that stopped pinging): it goes alone.
    if (!ended_ && transport_ != nullptr && transport_->heldTextSinceMs() != 0 &&
        nowMs >= transport_->heldTextSinceMs() + beat)
      (void)transport_->flushHeldText();
  }
  if (allowanceRecheckMs_ != 0 && nowMs >= allowanceRecheckMs_) recheckAllowances();
  std::vector<LocalStream*> due;
  for (const auto& [id, stream] : streams_) {
    if (stream->deadlineMs() != 0 && nowMs >= stream->deadlineMs()) due.push_back(stream);
  }
  for (LocalStream* stream : due) stream->onTimer(nowMs);
  maybeFinished();
}

// --- Ending -----------------------------------------------------------------------------------

bool BridgeClient::sendText(const std::string& text, TextTiming timing) {
  if (!attached() || transport_ == nullptr) return false;
  return timing == TextTiming::kNow ? transport_->sendText(text)
                                    : transport_->holdTextForPong(text);
}

void BridgeClient::protocolError(std::string text) {
  log_.warn("protocol error from the relay; closing the bridge",
            {{"link", link_}, {"bridge", attached_.bridgeId}, {"error", text}});
  if (transport_ != nullptr) transport_->close(ws::kCloseProtocolError);
  endSession({phase_ == Phase::kAttached, false, "protocol error: " + text, {}});
}

void BridgeClient::endSession(SessionEnd end) {
  if (ended_) return;
  ended_ = true;
  // Closing a bridge aborts what it carries (section 9). Streams free themselves later, in
  // their close callbacks, so the map is stable here.
  for (const auto& [id, stream] : streams_) stream->abort();
  host_.onSessionEnded(*this, end);
  host_.rescheduleTimer();
}

void BridgeClient::maybeFinished() {
  if (finished_ || !ended_ || transport_ != nullptr || !streams_.empty()) return;
  finished_ = true;
  host_.onSessionFinished(*this);
}

}  // namespace ot::client
