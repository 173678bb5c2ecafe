#include "relayd/api_connection.h"

#include <algorithm>
#include <array>
#include <new>
#include <utility>

#include "common/http_serializer.h"
#include "common/log.h"
#include "common/websocket_handshake.h"
#include "relayd/api_proxy.h"
#include "common/log_throttle.h"
#include "relayd/relay.h"
#include "relayd/sni_route.h"

namespace ot::relayd {

namespace {

const log::Logger kLog("relayd.api");

constexpr uint64_t kHandshakeTimeoutMs = 10'000;
// Once the ClientHello is in, a real client answers our ServerHello within one round trip; 5 s
// covers a lossy mobile or satellite link with two TCP retransmissions (1 s + 2 s RTO) and then
// some. A peer that sends a hello and goes silent gives its slot back after this, not after 10 s.
constexpr uint64_t kHandshakeAfterHelloMs = 5'000;
constexpr uint64_t kKeepAliveIdleMs = 60'000;
constexpr uint64_t kCloseFlushMs = 5'000;
constexpr uint32_t kMaxHandshakesInProgress = 256;
// Of those, what one source address (IPv6: its /64) may hold: 1/8, so one address cannot take
// the pool alone. A NAT full of clients reconnecting at once is refused past it and retries after
// its backoff, as for the pool itself.
constexpr uint64_t kMaxHandshakesPerSource = kMaxHandshakesInProgress / 8;
constexpr uint64_t kShedLogEveryMs = 10'000;
// In its HTTP phase a connection takes the next pipelined request only while at most this much of
// its earlier answers is unread (an answer is always queued whole; the mark only holds back the
// next request). Far below the peer write backlog (2 MiB, write_backlog.h), which is sized for
// bridges: an HTTP client needs one answer in flight, not eight, and the
// MAX_API_CONNECTIONS_PER_SOURCE (64) connections of an address that pipelines and never reads
// then hold 64 x (256 KiB + one answer) of BUFFERED_BYTES_LIMIT, not 64 x 2 MiB: one address
// cannot pause every bridge and visitor of the relay.
constexpr size_t kHttpAnswersUnreadMark = 256u << 10;
// Headers that describe one hop; never forwarded to controld or back.
constexpr std::array<std::string_view, 8> kHopHeaders = {
    "connection", "keep-alive", "proxy-connection", "transfer-encoding",
    "upgrade",    "te",         "content-length",   "x-opentunnel-client-address"};

bool isHopHeader(std::string_view name) {
  return std::any_of(kHopHeaders.begin(), kHopHeaders.end(),
                     [name](std::string_view hop) { return httpNameEquals(hop, name); });
}

std::vector<uint8_t> toBytes(const std::string& text) { return {text.begin(), text.end()}; }

// A connection closed before an ApiConnection took it: it stops counting as open here.
void closeUnserved(RelayContext& context, TcpStream* stream, bool reset) {
  if (context.openConnections > 0) --context.openConnections;
  stream->setHandler(nullptr);
  stream->close(reset);
}

}  // namespace

void ApiConnection::start(RelayContext& context, Relay& relay, TcpStream* stream, std::vector<uint8_t> hello,
                          uint64_t startedAtMs) {
  if (!relay.apiContext()) {
    // No certificate for the API domain yet: TLS to the domain fails while tunnels work.
    context.metrics.apiHandshakeFailed.Increment();
    closeUnserved(context, stream, false);
    return;
  }
  if (context.apiHandshakesInProgress >= kMaxHandshakesInProgress) {
    context.metrics.shedHandshakes.Increment();
    closeUnserved(context, stream, false);
    return;
  }
  const std::string source = peerSourceKey(stream->peerAddress());
  SourceSlot sourceSlot;
  if (!source.empty()) {
    sourceSlot = SourceSlot::acquire(context.apiHandshakesBySource, source, kMaxHandshakesPerSource);
    if (!sourceSlot.held()) {
      context.metrics.shedSourceHandshakes.Increment();
      static LogThrottle throttle(kShedLogEveryMs);
      if (uint64_t suppressed = 0; throttle.allow(context.nowMs(), suppressed)) {
        kLog.warn("API handshake refused: the source holds its share of handshake slots",
                  {{"source", source},
                   {"limit", kMaxHandshakesPerSource},
                   {"suppressed", suppressed}});
      }
      closeUnserved(context, stream, false);
      return;
    }
  }
  auto* connection = new (std::nothrow) ApiConnection(context, relay, stream);
  if (connection == nullptr || !connection->tls_) {
    if (connection != nullptr) {
      connection->stream_ = nullptr;
      stream->setHandler(nullptr);
      delete connection;
    }
    closeUnserved(context, stream, true);
    return;
  }
  connection->handshakeSource_ = std::move(sourceSlot);
  connection->sourceKey_ = source;
  const uint64_t now = context.nowMs();
  const uint64_t deadline = std::min(startedAtMs + kHandshakeTimeoutMs, now + kHandshakeAfterHelloMs);
  connection->armTimer(deadline > now ? deadline - now : 0);
  connection->feedCiphertext(hello);
  if (connection->phase_ != Phase::kClosing) stream->startReading();
}

ApiConnection::ApiConnection(RelayContext& context, Relay& relay, TcpStream* stream)
    : context_(context),
      relay_(relay),
      stream_(stream),
      tls_(tls::TlsEngine::server(relay.apiContext())),
      timer_(&ApiConnection::onTimer, this),
      gone_(std::make_shared<bool>(false)) {
  stream_->setHandler(this);
  ++context_.apiHandshakesInProgress;
}

ApiConnection::~ApiConnection() {
  *gone_ = true;
  endHandshake();
  if (proxyCall_ != 0) relay_.apiProxy().cancel(proxyCall_);
}

// ---------------------------------------------------------------------------------------------
// TLS

void ApiConnection::onRead(std::span<const uint8_t> bytes) { feedCiphertext(bytes); }

void ApiConnection::endHandshake() {
  if (handshakeCounted_) return;
  handshakeCounted_ = true;
  if (context_.apiHandshakesInProgress > 0) --context_.apiHandshakesInProgress;
  handshakeSource_.release();
}

void ApiConnection::feedCiphertext(std::span<const uint8_t> bytes) {
  if (phase_ == Phase::kClosing) return;
  tls_->feed(bytes);
  if (phase_ == Phase::kHandshake) {
    const tls::TlsStatus status = tls_->handshake();
    flushTls();
    if (status == tls::TlsStatus::kError) {
      endHandshake();
      context_.metrics.apiHandshakeFailed.Increment();
      kLog.debug("API TLS handshake failed", {{"peer", stream_->peer().toString()}, {"error", tls_->errorText()}});
      fail();
      return;
    }
    if (status != tls::TlsStatus::kOk) return;
    endHandshake();
    context_.metrics.apiHandshakeOk.Increment();
    phase_ = Phase::kHttp;
    if (!takeSourceConnectionSlot()) return;
    HttpParserLimits limits;
    limits.maxBodyBytes = 1024 * 1024;
    parser_ = std::make_unique<HttpParser>(HttpParser::Kind::kRequest, limits);
    armTimer(kKeepAliveIdleMs);
  }
  drainPlaintext();
}

bool ApiConnection::takeSourceConnectionSlot() {
  if (sourceKey_.empty()) return true;  // no IP address: everyone behind the one proxy in front
  const uint64_t limit = context_.config.max_api_connections_per_source;
  connectionSource_ = SourceSlot::acquire(context_.apiConnectionsBySource, sourceKey_, limit);
  if (connectionSource_.held()) return true;
  context_.metrics.shedSourceApiConnections.Increment();
  static LogThrottle throttle(kShedLogEveryMs);
  if (uint64_t suppressed = 0; throttle.allow(context_.nowMs(), suppressed)) {
    kLog.warn("API connection refused: the source holds its share of API connections",
              {{"source", sourceKey_}, {"limit", limit}, {"suppressed", suppressed}});
  }
  // The handshake is done, so the client can read why; nothing it sent is looked at.
  respondError(429, "RateLimitedError", "too many connections from this address; retry later", true,
               {{"Retry-After", "5"}});
  return false;
}

bool ApiConnection::answersUnread() const {
  return stream_ == nullptr || stream_->writeBacklogged() || stream_->queuedBytes() > kHttpAnswersUnreadMark;
}

void ApiConnection::drainPlaintext() {
  bool gotHttp = false;
  while (phase_ != Phase::kClosing && phase_ != Phase::kHandshake) {
    const tls::ReadResult result = tls_->read(context_.plainBuffer);
    if (result.bytes > 0) {
      std::span<uint8_t> plain(context_.plainBuffer.data(), result.bytes);
      if (phase_ == Phase::kBridge && bridge_) {
        bridge_->onPlaintext(plain);
      } else {
        httpInput_.insert(httpInput_.end(), plain.begin(), plain.end());
        gotHttp = true;
      }
    }
    if (result.status == tls::TlsStatus::kClosed) {
      if (bridge_) bridge_->onTransportLost();
      closeTransport(false);
      return;
    }
    if (result.status == tls::TlsStatus::kError) {
      fail();
      return;
    }
    if (result.bytes < context_.plainBuffer.size()) break;
  }
  flushTls();  // post-handshake messages (tickets) and anything the reads produced
  if (gotHttp) processHttp();
}

void ApiConnection::flushTls() {
  if (stream_ == nullptr || tls_->pendingOutputSize() == 0) return;
  stream_->write(tls_->takeOutput());
}

void ApiConnection::sendPlain(std::span<const uint8_t> bytes) {
  if (phase_ == Phase::kHandshake || stream_ == nullptr || stream_->closing()) return;
  if (tls_->write(bytes) != tls::TlsStatus::kOk) {
    fail();
    return;
  }
  flushTls();
}

size_t ApiConnection::queuedBytes() const { return stream_ == nullptr ? 0 : stream_->queuedBytes(); }

uint64_t ApiConnection::bytesWritten() const { return stream_ == nullptr ? 0 : stream_->bytesWritten(); }

void ApiConnection::pauseReading() {
  readPausedByBridge_ = true;
  if (stream_ != nullptr) stream_->stopReading();
}

void ApiConnection::resumeReading() {
  readPausedByBridge_ = false;
  if (stream_ != nullptr && phase_ != Phase::kClosing) stream_->startReading();
  // TLS may hold decrypted records that arrived while paused.
  if (phase_ == Phase::kBridge && tls_->pendingPlaintext() > 0) drainPlaintext();
}

const std::string& ApiConnection::peerAddress() const {
  static const std::string kEmpty;
  return stream_ == nullptr ? kEmpty : stream_->peerAddress();
}

// ---------------------------------------------------------------------------------------------
// HTTP

void ApiConnection::processHttp() {
  while (phase_ == Phase::kHttp && !httpInput_.empty()) {
    // Pipelined requests wait, and the client is not read, while it leaves our answers unread
    // (onWritten resumes).
    if (stream_ == nullptr) return;
    if (answersUnread()) {
      if (!readPausedForAnswers_) {
        readPausedForAnswers_ = true;
        context_.metrics.peerBacklogPaused.Increment();
        stream_->stopReading();
      }
      return;
    }
    const HttpParseResult result = parser_->feed(std::span<const uint8_t>(httpInput_));
    switch (result.status) {
      case HttpParseStatus::kNeedMore:
        httpInput_.clear();
        return;
      case HttpParseStatus::kDone:
      case HttpParseStatus::kUpgrade: {
        httpInput_.erase(httpInput_.begin(), httpInput_.begin() + static_cast<std::ptrdiff_t>(result.consumed));
        HttpMessage request = parser_->takeMessage();
        parser_->reset();
        handleRequest(request);  // an upgrade to any path but the bridge is proxied like any request
        break;
      }
      case HttpParseStatus::kError: {
        const HttpError error = parser_->error();
        httpInput_.clear();
        respondError(httpErrorStatus(error), "BadRequestError", std::string(parser_->errorDetail()), true);
        return;
      }
      case HttpParseStatus::kHeaders:
      case HttpParseStatus::kBody:
        return;  // collect mode never returns these
    }
  }
}

void ApiConnection::handleRequest(const HttpMessage& request) {
  timer_.cancel();
  const BridgePath bridgePath = parseBridgePath(request.target);
  if (!bridgePath.matches) {
    proxy(request);
    return;
  }
  if (request.method != "GET") {
    respondError(405, "MethodNotAllowedError", "the bridge is opened with GET", false, {{"Allow", "GET"}});
    return;
  }
  if (!bridgePath.validId) {
    respondError(404, "NotFoundError", "no such tunnel", false);
    return;
  }
  handleBridgeUpgrade(request, bridgePath.tunnelId);
}

void ApiConnection::handleBridgeUpgrade(const HttpMessage& request, const std::string& tunnelId) {
  std::vector<ws::HttpHeader> headers;
  headers.reserve(request.headers.size());
  for (const auto& header : request.headers) headers.push_back({header.name, header.value});
  ws::UpgradeRequest upgrade{request.method, request.versionMajor, request.versionMinor, headers};
  const ws::UpgradeCheck check = ws::checkUpgradeRequest(upgrade);
  if (check.error != ws::UpgradeError::kNone) {
    const int status = ws::httpStatusFor(check.error);
    if (status == 426) {
      respondError(426, "UpgradeRequiredError", std::string(ws::upgradeErrorMessage(check.error)), false,
                   {{"Sec-WebSocket-Version", "13"}});
    } else {
      respondError(status, "BadRequestError", std::string(ws::upgradeErrorMessage(check.error)), false);
    }
    return;
  }
  const std::string key(check.key);
  phase_ = Phase::kWaiting;
  stream_->stopReading();
  std::weak_ptr<bool> gone = gone_;
  relay_.checkUpgrade(tunnelId, [this, gone, key, tunnelId](Relay::UpgradeDecision decision) {
    auto alive = gone.lock();
    if (!alive || *alive || phase_ != Phase::kWaiting) return;
    switch (decision) {
      case Relay::UpgradeDecision::kNotFound:
        phase_ = Phase::kHttp;
        respondError(404, "NotFoundError", "no such tunnel", false);
        return;
      case Relay::UpgradeDecision::kUnavailable:
        phase_ = Phase::kHttp;
        respondError(503, "ServiceUnavailableError", "the control plane is unavailable; retry", false,
                     {{"Retry-After", "5"}});
        return;
      case Relay::UpgradeDecision::kAllowed:
        break;
    }
    phase_ = Phase::kBridge;
    connectionSource_.release();  // bridges have their own bounds (MAX_BRIDGES_PER_TUNNEL, failures)
    timer_.cancel();
    sendPlain(toBytes(ws::buildUpgradeResponse(key)));
    bridge_ = std::make_unique<BridgeSession>(context_, relay_, *this, tunnelId);
    parser_.reset();
    stream_->startReading();
    if (!httpInput_.empty()) {
      std::vector<uint8_t> early;
      early.swap(httpInput_);
      bridge_->onPlaintext(early);
    }
  });
}

void ApiConnection::proxy(const HttpMessage& request) {
  if (!relay_.controlConnected()) {
    // controld is restarting, frozen or gone: answer at once instead of waiting on its socket.
    const bool close = !request.keepAlive || context_.draining;
    context_.metrics.apiProxyFailures.Increment();
    respond(unavailableResponse("the control plane is unavailable; retry", close), close);
    return;
  }
  std::vector<HttpHeader> headers;
  for (const auto& header : request.headers) {
    if (!isHopHeader(header.name)) headers.push_back(header);
  }
  headers.push_back({"Connection", "close"});
  headers.push_back({"X-OpenTunnel-Client-Address", stream_->peerAddress()});
  auto serialized = serializeRequest(request.method, request.target, headers, request.body);
  if (!serialized) {
    respondError(400, "BadRequestError", "the request cannot be forwarded", true);
    return;
  }
  const bool clientWantsClose = !request.keepAlive;
  phase_ = Phase::kWaiting;
  stream_->stopReading();
  std::weak_ptr<bool> gone = gone_;
  proxyCall_ = relay_.apiProxy().send(
      toBytes(*serialized), [this, gone, clientWantsClose](Result<ProxiedResponse> result) {
        auto alive = gone.lock();
        if (!alive || *alive) return;
        proxyCall_ = 0;
        phase_ = Phase::kHttp;
        const bool close = clientWantsClose || context_.draining;
        if (!result.ok()) {
          context_.metrics.apiProxyFailures.Increment();
          respond(unavailableResponse("the control plane is unavailable; retry", close), close);
          return;
        }
        // Re-frame controld's answer (parsed once, by the proxy) for this connection's keep-alive.
        const HttpMessage& response = result->message;
        std::vector<HttpHeader> responseHeaders;
        for (const auto& header : response.headers) {
          if (!isHopHeader(header.name)) responseHeaders.push_back(header);
        }
        if (close) responseHeaders.push_back({"Connection", "close"});
        auto out = result->headRequest
                       ? serializeResponseHead(response.status, response.reason, responseHeaders,
                                               response.contentLength
                                                   ? HttpFraming::length(*response.contentLength)
                                                   : HttpFraming::none())
                       : serializeResponse(response.status, response.reason, responseHeaders,
                                           response.body);
        if (!out) {
          respond(unavailableResponse("the control plane gave an unreadable answer", true), true);
          return;
        }
        respond(toBytes(*out), close);
      });
}

void ApiConnection::respondError(int status, const std::string& tag, const std::string& message, bool close,
                                 const std::vector<std::pair<std::string, std::string>>& extra) {
  const bool closeNow = close || context_.draining;
  respond(jsonErrorResponse(status, tag, message, closeNow, extra), closeNow);
}

void ApiConnection::respond(std::vector<uint8_t> response, bool close) {
  sendPlain(response);
  requestDone(close);
}

void ApiConnection::requestDone(bool close) {
  if (close) {
    closeTransport(false);
    return;
  }
  phase_ = Phase::kHttp;
  armTimer(kKeepAliveIdleMs);
  if (stream_ != nullptr) stream_->startReading();
  processHttp();
}

// ---------------------------------------------------------------------------------------------
// Closing

void ApiConnection::closeTransport(bool reset) {
  if (stream_ == nullptr || stream_->closing()) return;
  if (reset) {
    phase_ = Phase::kClosing;
    stream_->close(true);
    return;
  }
  if (phase_ != Phase::kClosing) {
    phase_ = Phase::kClosing;
    if (tls_->handshakeDone()) {
      tls_->shutdown();
      flushTls();
    }
    stream_->stopReading();
    armTimer(kCloseFlushMs);
  }
  if (stream_->queuedBytes() == 0) stream_->close(false);
}

void ApiConnection::fail() {
  if (bridge_) bridge_->onTransportLost();
  if (stream_ != nullptr) {
    flushTls();  // the alert, if any
    phase_ = Phase::kClosing;
    if (stream_->queuedBytes() == 0) {
      stream_->close(false);
    } else {
      armTimer(kCloseFlushMs);
    }
  }
}

void ApiConnection::onWritten(size_t) {
  if (phase_ == Phase::kClosing) {
    if (stream_ != nullptr && stream_->queuedBytes() == 0) stream_->close(false);
    return;
  }
  if (bridge_) bridge_->onTransportWritten();
  if (phase_ != Phase::kHttp || answersUnread()) return;
  if (readPausedForAnswers_) {
    readPausedForAnswers_ = false;
    stream_->startReading();
  }
  if (!httpInput_.empty()) processHttp();
}

void ApiConnection::onEof() {
  if (bridge_) bridge_->onTransportLost();
  if (stream_ != nullptr) stream_->close(false);
}

void ApiConnection::onStreamError(int) {
  if (bridge_) bridge_->onTransportLost();
  if (stream_ != nullptr) stream_->close(true);
}

void ApiConnection::armTimer(uint64_t delayMs) { context_.wheel.schedule(timer_, context_.nowMs(), delayMs); }

void ApiConnection::onTimer(TimerEntry*, void* owner) {
  auto* self = static_cast<ApiConnection*>(owner);
  if (self->stream_ == nullptr) return;
  if (self->phase_ == Phase::kHandshake) {
    self->context_.metrics.apiHandshakeTimeout.Increment();
    self->endHandshake();
  }
  if (self->phase_ == Phase::kWaiting || self->phase_ == Phase::kBridge) return;
  self->stream_->close(self->phase_ != Phase::kClosing);
}

void ApiConnection::onClosed() {
  stream_ = nullptr;
  if (bridge_) {
    bridge_->onTransportLost();
    bridge_.reset();
  }
  if (context_.openConnections > 0) --context_.openConnections;
  delete this;
}

}  // namespace ot::relayd
