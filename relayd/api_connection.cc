// ApiConnection (api_connection.h): the start of its handshake (admission is api_admission.cc), the
// TLS side (a tls::TlsStream over the TcpStream) and closing. Its HTTP phase is in
// api_connection_http.cc.
#include "relayd/api_connection.h"

#include <algorithm>
#include <array>
#include <new>
#include <utility>

#include "common/log.h"
#include "common/log_throttle.h"
#include "common/prefetch.h"
#include "relayd/api_admission.h"
#include "relayd/relay.h"

namespace ot::relayd {

namespace {

const log::Logger kApiConnectionLog("relayd.api");

constexpr uint64_t kHandshakeTimeoutMs = 10'000;
// Once the ClientHello is in, a real client answers our ServerHello within one round trip; 5 s
// covers a lossy mobile or satellite link with two TCP retransmissions (1 s + 2 s RTO) and then
// some. A peer that sends a hello and goes silent gives its slot back after this, not after 10 s.
constexpr uint64_t kHandshakeAfterHelloMs = 5'000;
constexpr uint64_t kCloseFlushMs = 5'000;
constexpr uint64_t kApiShedLogEveryMs = 10'000;
// In its HTTP phase a connection takes the next pipelined request only while at most this much of
// its earlier answers is unread (an answer is always queued whole; the mark only holds back the
// next request). Far below the peer write backlog (2 MiB, write_backlog.h), which is sized for
// bridges: an HTTP client needs one answer in flight, not eight, and the
// MAX_API_CONNECTIONS_PER_SOURCE (64) connections of an address that pipelines and never reads
// then hold 64 x (256 KiB + one answer) of BUFFERED_BYTES_LIMIT, not 64 x 2 MiB: one address
// cannot pause every bridge and visitor of the relay.
constexpr size_t kHttpAnswersUnreadMark = 256u << 10;

// A connection closed before an ApiConnection took it: it stops counting as open here.
void closeUnserved(RelayContext& context, TcpStream* stream, bool reset) {
  if (context.openConnections > 0) --context.openConnections;
  stream->setHandler(nullptr);
  stream->close(reset);
}

}  // namespace

void ApiConnection::start(RelayContext& context, Relay& relay, TcpStream* stream,
                          std::vector<uint8_t> hello, uint64_t startedAtMs, uint64_t dialId) {
  admitApiConnection(context, relay, stream, std::move(hello), startedAtMs, dialId);
}

void ApiConnection::begin(RelayContext& context, Relay& relay, TcpStream* stream,
                          std::vector<uint8_t> hello, uint64_t startedAtMs,
                          SourceSlot handshakeSource, std::string sourceKey, uint64_t dialId) {
  if (!relay.apiContext()) {  // the slot was taken while a certificate was there; none now
    context.metrics.apiHandshakeFailed.Increment();
    context.apiHandshakes.release();
    closeUnserved(context, stream, false);
    return;
  }
  auto* connection = new (std::nothrow) ApiConnection(context, relay, stream);
  if (connection == nullptr || !connection->tls_.valid()) {
    if (connection != nullptr) {
      connection->stream_ = nullptr;
      stream->setHandler(nullptr);
      delete connection;  // gives the slot back (endHandshake)
    } else {
      context.apiHandshakes.release();
    }
    closeUnserved(context, stream, true);
    return;
  }
  connection->dialId_ = dialId;
  connection->http().handshakeSource = std::move(handshakeSource);
  connection->http().sourceKey = std::move(sourceKey);
  const uint64_t now = context.nowMs();
  const uint64_t deadline =
      std::min(startedAtMs + kHandshakeTimeoutMs, now + kHandshakeAfterHelloMs);
  connection->armTimer(deadline > now ? deadline - now : 0);
  connection->feedCiphertext(hello);
  if (connection->phase_ != Phase::kClosing) stream->startReading();
}

ApiConnection::ApiConnection(RelayContext& context, Relay& relay, TcpStream* stream)
    : context_(context),
      relay_(relay),
      stream_(stream),
      // Keeps the traffic secrets so that a bridge can drop OpenSSL's state
      // (releaseHandshakeState).
      tls_(tls::TlsEngine::server(relay.apiContext(), true), *this, context.plainBuffer),
      timer_(&ApiConnection::onTimer, this),
      gone_(std::make_shared<bool>(false)) {
  stream_->setHandler(this);
  tls_.runHandshakeOn(context.handshakeWorkers.get());
}

ApiConnection::~ApiConnection() {
  *gone_ = true;
  endHandshake();
  if (dialId_ != 0) relay_.directDialEnded(dialId_);
  context_.apiConnections.erase(this);
  if (proxyCall_ != 0) relay_.apiProxy().cancel(proxyCall_);
  if (http_) {
    for (const auto& [streamId, call] : http_->h2Calls) relay_.apiProxy().cancel(call);
  }
}

// ---------------------------------------------------------------------------------------------
// TLS

void ApiConnection::onRead(std::span<const uint8_t> bytes) {
  feedCiphertext(bytes);
}

ApiConnection::HttpSide& ApiConnection::http() {
  if (!http_) http_ = std::make_unique<HttpSide>();
  return *http_;
}

void ApiConnection::endHandshake() {
  if (handshakeCounted_) return;
  handshakeCounted_ = true;
  if (http_) http_->handshakeSource.release();
  context_.apiHandshakes.release();  // may begin a waiting connection's handshake
}

void ApiConnection::feedCiphertext(std::span<const uint8_t> bytes) {
  if (phase_ == Phase::kClosing) return;
  gotHttp_ = false;
  tls_.receive(bytes);
  if (gotHttp_) processHttp();
}

bool ApiConnection::sendCiphertext(std::vector<uint8_t> bytes) {
  if (stream_ == nullptr) return true;
  if (phase_ == Phase::kBridge) {
    // Straight to the socket when it takes it: no write request, no write watcher to arm and
    // disarm. The bridge needs no onWritten for bytes taken at once: its marks look at what is
    // queued, and its pong pacing at bytesWritten().
    (void)stream_->writeNow(std::move(bytes));
  } else {
    stream_->write(std::move(bytes));
  }
  return true;  // a failed write closes the stream; what follows copes with that
}

void ApiConnection::onTlsHandshakeDone() {
  endHandshake();
  context_.metrics.apiHandshakeOk.Increment();
  (tls_.sessionReused() ? context_.metrics.apiSessionResumed : context_.metrics.apiSessionFull)
      .Increment();
  phase_ = Phase::kHttp;
  if (!takeSourceConnectionSlot()) return;
  context_.apiConnections.insert(this);
  if (tls_.alpn() == "h2") {
    if (!startHttp2()) {
      fail();
      return;
    }
    armTimer(kKeepAliveIdleMs);  // replaces the handshake deadline
    flushHttp2();                // our SETTINGS
    return;
  }
  HttpParserLimits limits;
  limits.maxBodyBytes = 1024 * 1024;
  parser_ = std::make_unique<HttpParser>(HttpParser::Kind::kRequest, limits);
  armTimer(kKeepAliveIdleMs);
}

void ApiConnection::onTlsFailed() {
  if (phase_ == Phase::kHandshake) {
    endHandshake();
    context_.metrics.apiHandshakeFailed.Increment();
    kApiConnectionLog.debug("API TLS handshake failed",
                            {{"peer", stream_->peer().toString()}, {"error", tls_.errorText()}});
  }
  fail();
}

void ApiConnection::onTlsDetachResult(tls::DetachResult result) {
  context_.metrics.tlsDetach(result);
  // Once per result for the process: the reason a bridge kept OpenSSL (or that they detach).
  static std::array<bool, 6> logged{};
  const auto index = static_cast<size_t>(result);
  if (index < logged.size() && !logged[index]) {
    logged[index] = true;
    kApiConnectionLog.info("bridge TLS after the handshake",
                           {{"result", tls::detachResultName(result)}});
  }
}

void ApiConnection::onTlsStepDelivered() {
  // The handshake finished on a worker (handshake_workers.h): what feedCiphertext does after
  // TlsStream::receive.
  if (!gotHttp_ || phase_ == Phase::kClosing) return;
  gotHttp_ = false;
  processHttp();
}

bool ApiConnection::wantsTlsPlaintext() const {
  return phase_ != Phase::kClosing && phase_ != Phase::kHandshake;
}

void ApiConnection::onTlsPlaintext(std::span<uint8_t> plain) {
  if (phase_ == Phase::kBridge && bridge_) {
    bridge_->onPlaintext(plain);
  } else {
    httpInput_.insert(httpInput_.end(), plain.begin(), plain.end());
    gotHttp_ = true;
  }
}

void ApiConnection::onTlsCloseNotify() {
  if (bridge_) bridge_->onTransportLost();
  closeTransport(false);
}

bool ApiConnection::takeSourceConnectionSlot() {
  HttpSide& side = http();
  if (side.sourceKey.empty()) return true;  // no IP address: everyone behind the one proxy in front
  const uint64_t limit = context_.config.maxApiConnectionsPerSource;
  side.connectionSource =
      SourceSlot::acquire(context_.apiConnectionsBySource, side.sourceKey, limit);
  if (side.connectionSource.held()) return true;
  context_.metrics.shedSourceApiConnections.Increment();
  static LogThrottle throttle(kApiShedLogEveryMs);
  if (uint64_t suppressed = 0; throttle.allow(context_.nowMs(), suppressed)) {
    kApiConnectionLog.warn(
        "API connection refused: the source holds its share of API connections",
        {{"source", side.sourceKey}, {"limit", limit}, {"suppressed", suppressed}});
  }
  if (tls_.alpn() == "h2") {
    // An HTTP/1.1 answer would be garbage to it: GOAWAY ENHANCE_YOUR_CALM, then the close.
    if (startHttp2()) {
      h2_->refuseConnection();
      flushHttp2();
    }
    if (phase_ != Phase::kClosing) closeTransport(false);
    return false;
  }
  // The handshake is done, so the client can read why; nothing it sent is looked at.
  respondError(429, "RateLimitedError", "too many connections from this address; retry later", true,
               {{"Retry-After", "5"}});
  return false;
}

bool ApiConnection::answersUnread() const {
  return stream_ == nullptr || stream_->writeBacklogged() ||
         stream_->queuedBytes() > kHttpAnswersUnreadMark;
}

bool ApiConnection::pausedForUnreadAnswers() {
  if (!answersUnread()) return false;
  if (!readPausedForAnswers_ && stream_ != nullptr) {
    readPausedForAnswers_ = true;
    context_.metrics.peerBacklogPaused.Increment();
    stream_->stopReading();  // onWritten resumes
  }
  return true;
}

void ApiConnection::sendPlain(std::span<const uint8_t> bytes) {
  if (phase_ == Phase::kHandshake || stream_ == nullptr || stream_->closing()) return;
  if (!tls_.write(bytes)) fail();
}

size_t ApiConnection::queuedBytes() const {
  return stream_ == nullptr ? 0 : stream_->queuedBytes();
}

uint64_t ApiConnection::bytesWritten() const {
  return stream_ == nullptr ? 0 : stream_->bytesWritten();
}

void ApiConnection::pauseReading() {
  readPausedByBridge_ = true;
  if (stream_ != nullptr) stream_->stopReading();
}

void ApiConnection::prefetchOwnLines() const {
  // What a bridge's write and read look at first: the phase, the socket and bridge pointers, the
  // TLS stream (a member).
  prefetchLine(&phase_);
  prefetchLine(&stream_);
  prefetchLine(&tls_);
  prefetchLine(&bridge_);
}

void ApiConnection::prefetchForWrite(unsigned stage) const {
  if (stage == 0) return prefetchOwnLines();
  // The socket is one pointer away; the TLS stream is a member, its engine one pointer away.
  if (stage == 1 && stream_ != nullptr) stream_->prefetch(0);
  tls_.prefetch(stage - 1);
}

void ApiConnection::prefetchForRead(unsigned stage) const {
  if (stage == 0) return prefetchOwnLines();
  // The TLS engine and the bridge session are each one pointer away.
  tls_.prefetch(stage - 1);
  if (stage == 1 && phase_ == Phase::kBridge && bridge_) bridge_->prefetchForRead();
}

void ApiConnection::setIdleReads(bool idle) {
  if (stream_ != nullptr) stream_->setRingReads(idle);
}

void ApiConnection::resumeReading() {
  readPausedByBridge_ = false;
  if (stream_ != nullptr && phase_ != Phase::kClosing) stream_->startReading();
  // TLS may hold decrypted records that arrived while paused.
  if (phase_ == Phase::kBridge) tls_.resume();
}

const std::string& ApiConnection::peerAddress() const {
  static const std::string kEmpty;
  return stream_ == nullptr ? kEmpty : stream_->peerAddress();
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
    if (tls_.handshakeDone()) tls_.closeNotify();
    stream_->stopReading();
    armTimer(kCloseFlushMs);
  }
  if (stream_->queuedBytes() == 0) stream_->close(false);
}

void ApiConnection::fail() {
  if (bridge_) bridge_->onTransportLost();
  if (stream_ != nullptr) {
    tls_.flush();  // the alert, if any
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
  if (phase_ == Phase::kHttp2) {
    if (answersUnread()) return;
    if (readPausedForAnswers_) {
      readPausedForAnswers_ = false;
      stream_->startReading();
    }
    processHttp2();  // input held while paused, then what nghttp2 has left to send
    return;
  }
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

void ApiConnection::armTimer(uint64_t delayMs) {
  context_.wheel.schedule(timer_, context_.nowMs(), delayMs);
}

void ApiConnection::onTimer(TimerEntry*, void* owner) {
  auto* self = static_cast<ApiConnection*>(owner);
  if (self->stream_ == nullptr) return;
  if (self->phase_ == Phase::kHandshake) {
    self->context_.metrics.apiHandshakeTimeout.Increment();
    self->endHandshake();
  }
  if (self->phase_ == Phase::kWaiting || self->phase_ == Phase::kBridge) return;
  if (self->phase_ == Phase::kHttp2) {
    // Idle for a minute with no stream open: GOAWAY, then the close once it is written.
    self->h2GoingAway_ = true;
    self->h2_->goAway();
    self->flushHttp2();
    if (self->phase_ == Phase::kHttp2) self->closeTransport(false);
    return;
  }
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
