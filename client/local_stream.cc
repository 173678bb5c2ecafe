// LocalStream (local_stream.h): creation, the connect to the local service, frames from the
// relay, the visitor's TLS and the end. The bytes both ways through the local socket are in
// local_stream_io.cc.
#include "client/local_stream.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "client/local_unreachable.h"

namespace ot::client {
namespace {

constexpr size_t kPlaintextBufferSize = 16 * 1024;
constexpr size_t kReadBufferSize = 64 * 1024;

// Used only within one callback at a time on the loop thread. Separate from the transport's,
// which is still in use while a stream handles a frame.
thread_local std::array<uint8_t, kPlaintextBufferSize> tPlaintext;
thread_local std::array<uint8_t, kReadBufferSize> tReadBuffer;  // the local sockets' reads

}  // namespace

std::string LocalStream::describeUv(std::string_view what, int status) {
  return std::string(what) + ": " + uv_strerror(status);
}

LocalStream::LocalStream(uv_loop_t* loop, StreamHost& host, StreamOptions options)
    : loop_(loop),
      host_(host),
      options_(std::move(options)),
      tcpContext_(loop, tReadBuffer),
      receive_(options_.receiveWindow),
      sendCredit_(options_.sendWindow) {
  if (options_.maxPayload == 0) options_.maxPayload = 1;
}

LocalStream::~LocalStream() = default;

LocalStream* LocalStream::create(uv_loop_t* loop, StreamHost& host, StreamOptions options) {
  tls::SslCtxPtr context = options.tlsContext;
  auto* self = new LocalStream(loop, host, std::move(options));
  if (context) {
    self->tls_ =
        std::make_unique<tls::TlsStream>(tls::TlsEngine::server(std::move(context)),
                                         static_cast<tls::TlsStream::Owner&>(*self), tPlaintext);
  }
  if (self->tls_ && !self->tls_->valid()) {
    delete self;
    return nullptr;
  }
  self->tcp_ = TcpStream::open(self->tcpContext_, self);
  if (self->tcp_ == nullptr) {
    delete self;
    return nullptr;
  }
  return self;
}

// --- Connecting -------------------------------------------------------------------------------

void LocalStream::start() {
  if (local_ != Local::kIdle) return;
  local_ = Local::kConnecting;
  deadlineMs_ = uv_now(loop_) + options_.connectTimeoutMs;
  if (terminating()) handshakeDeadlineMs_ = uv_now(loop_) + options_.handshakeTimeoutMs;
  host_.onStreamDeadlineChanged();
  tcp_->connect(options_.target.host, options_.target.port);
}

void LocalStream::onConnectFailed(const ConnectFailure& failure) {
  if (local_ != Local::kConnecting) return;
  if (failure.stage == ConnectFailure::Stage::kResolve) {
    localConnectFailed(describeUv("resolving " + options_.target.host, failure.status));
    return;
  }
  localConnectFailed(uv_strerror(failure.status));
}

void LocalStream::onConnected() {
  // Also ignored once the connect deadline gave up on it (kUnreachable).
  if (local_ != Local::kConnecting) return;
  local_ = Local::kConnected;
  deadlineMs_ = 0;
  tcp_->setNoDelay(true);
  if (!pendingLocal_.empty()) writeLocal(std::exchange(pendingLocal_, {}));
  if (closing()) return;
  maybeShutdown();
  if (closing()) return;
  updateReading();
}

void LocalStream::resume() {
  if (handshakeDeadlineMs_ != 0) handshakeHeldByBridge_ = true;  // the bridge was congested
  updateReading();
}

void LocalStream::onAllowanceChanged() {
  if (closing() || protocolClosed() || sentEnd_) return;
  flushToRelay();
  maybeGrant();
}

void LocalStream::onTimer(uint64_t nowMs) {
  if (closing()) return;
  if (handshakeDeadlineMs_ != 0 && nowMs >= handshakeDeadlineMs_ && !tls_->handshakeDone()) {
    // The visitor had its time only if the relay was taking our bytes: a relay that holds the
    // bridge back (over its budget, docs/relayd.md) keeps our ServerHello from the visitor. Then
    // the visitor gets another period; the relay's own stall waits bound how often that happens.
    if (handshakeHeldByBridge_ || host_.bridgeCongested()) {
      handshakeHeldByBridge_ = false;
      handshakeDeadlineMs_ = nowMs + options_.handshakeTimeoutMs;
      host_.onStreamDeadlineChanged();
    } else {
      resetStream(bridge::ResetReason::kClientIoError,
                  "tls: the visitor's handshake did not finish within " +
                      std::to_string(options_.handshakeTimeoutMs / 1000) + " s");
      return;
    }
  }
  if (deadlineMs_ == 0 || nowMs < deadlineMs_) return;
  if (local_ == Local::kConnecting) {
    tcp_->abandonConnect();
    localConnectFailed("connecting to " + options_.target.host + ":" +
                       std::to_string(options_.target.port) + " timed out");
  } else if (local_ == Local::kUnreachable) {
    // The visitor neither asked nor ended in time.
    resetStream(bridge::ResetReason::kConnectFailed, unreachableError_);
  }
}

void LocalStream::localConnectFailed(std::string error) {
  if (closing()) return;
  host_.onLocalServiceUnreachable(options_.target, error);
  // Passthrough cannot answer inside the visitor's TLS: the reset is all it can say.
  if (!terminating()) {
    resetStream(bridge::ResetReason::kConnectFailed, error);
    return;
  }
  local_ = Local::kUnreachable;
  unreachableError_ = std::move(error);
  deadlineMs_ = uv_now(loop_) + kUnreachableAnswerMs;
  host_.onStreamDeadlineChanged();
  // Plaintext already held is the start of the request: answer it now.
  const bool requested = !pendingLocal_.empty();
  pendingLocal_ = {};
  maybeGrant();
  if (requested) answerUnreachable();
}

void LocalStream::answerUnreachable() {
  if (answered_ || closing()) return;
  // An HTTP/2 visitor would not read an HTTP/1.1 answer.
  if (tls_->alpn() == "h2") {
    resetStream(bridge::ResetReason::kConnectFailed, unreachableError_);
    return;
  }
  answered_ = true;
  const std::string response = badGatewayResponse(options_.target, unreachableError_);
  // close_notify after the answer, as Connection: close says
  if (!tls_->writeThenCloseNotify(
          {reinterpret_cast<const uint8_t*>(response.data()), response.size()})) {
    onTlsFailed();
    return;
  }
  if (closing()) return;
  localEof_ = true;                      // nothing more will come "from the local service"
  if (pendingRelay_.empty()) sendEnd();  // otherwise flushToRelay ends once credit drains it
}

// --- Frames from the relay --------------------------------------------------------------------

FrameVerdict LocalStream::onData(std::span<const uint8_t> payload) {
  if (protocolClosed()) return FrameVerdict::kOk;  // a frame that crossed our reset
  if (gotEnd_) return FrameVerdict::kProtocolError;
  if (!receive_.received(payload.size())) return FrameVerdict::kFlowControlViolation;
  if (closing()) return FrameVerdict::kOk;
  host_.onStreamActive(options_.connId);
  if (terminating()) {
    receive_.taken(payload.size());
    tls_->receive(payload);
    maybeGrant();
  } else {
    toLocal(payload);
  }
  return FrameVerdict::kOk;
}

FrameVerdict LocalStream::onEnd() {
  if (protocolClosed()) return FrameVerdict::kOk;
  if (gotEnd_) return FrameVerdict::kProtocolError;
  gotEnd_ = true;
  if (local_ == Local::kUnreachable && !answered_) {
    // The visitor left without a request to answer.
    resetStream(bridge::ResetReason::kConnectFailed, unreachableError_);
    return FrameVerdict::kOk;
  }
  if (terminating() && !tls_->handshakeDone()) {
    // A visitor that ended before its handshake finished never will: free its slot now rather
    // than wait for the local service or the relay's half-close timeout.
    resetStream(bridge::ResetReason::kClientIoError, "tls: the visitor ended during the handshake");
    return FrameVerdict::kOk;
  }
  maybeShutdown();
  maybeFinish();
  return FrameVerdict::kOk;
}

void LocalStream::onReset() {
  if (protocolClosed()) return;
  reset_ = true;
  closeLocal(true);
}

FrameVerdict LocalStream::onCredit(uint32_t increment) {
  if (protocolClosed() || sentEnd_) return FrameVerdict::kOk;  // pointless after our end
  if (sendCredit_.grant(increment) != bridge::CreditStatus::kOk) {
    return FrameVerdict::kProtocolError;
  }
  flushToRelay();
  return FrameVerdict::kOk;
}

void LocalStream::abort() {
  reset_ = true;
  closeLocal(true);
}

// --- The visitor's TLS (terminating mode) -----------------------------------------------------

bool LocalStream::sendCiphertext(std::vector<uint8_t> bytes) {
  sendToRelay(bytes);
  return !closing();
}

void LocalStream::onTlsHandshakeDone() {
  handshakeDeadlineMs_ = 0;
  updateReading();  // the local service's bytes can be encrypted from now on
}

void LocalStream::onTlsPlaintext(std::span<uint8_t> bytes) {
  toLocal(bytes);
}

void LocalStream::onTlsCloseNotify() {
  visitorTlsClosed_ = true;  // like a FIN: no more data toward the local service
  maybeShutdown();
  if (!closing()) tls_->flush();  // session tickets, key update answers
}

void LocalStream::onTlsFailed() {
  tls_->flush();  // the alert, as far as credit allows
  if (closing()) return;
  resetStream(bridge::ResetReason::kClientIoError, "tls: " + tls_->errorText());
}

// --- Ending -----------------------------------------------------------------------------------

void LocalStream::resetStream(bridge::ResetReason reason, std::string_view text) {
  if (!protocolClosed()) {
    reset_ = true;
    const std::vector<uint8_t> frame = bridge::encodeReset(options_.connId, reason, text);
    host_.sendStreamFrame(frame, {});
  }
  closeLocal(true);
}

void LocalStream::closeLocal(bool abortive) {
  if (closing()) return;
  const Local previous = local_;
  local_ = Local::kClosing;
  deadlineMs_ = 0;
  handshakeDeadlineMs_ = 0;
  pendingLocal_ = {};
  pendingRelay_ = {};
  pendingOffset_ = 0;
  // An RST tells the local service the visitor aborted (TcpStream falls back to a plain close
  // after a shutdown). Closing also cancels a lookup in flight.
  tcp_->close(abortive && previous == Local::kConnected);
}

void LocalStream::onClosed() {
  StreamHost& host = host_;
  const uint32_t id = options_.connId;
  delete this;
  host.onStreamFreed(id);
}

}  // namespace ot::client
