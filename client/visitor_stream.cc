#include "client/visitor_stream.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "client/address_resolver.h"
#include "client/local_unreachable.h"

namespace ot::client {
namespace {

constexpr size_t kReadBufferSize = 64 * 1024;
constexpr size_t kPlaintextBufferSize = 16 * 1024;
constexpr size_t kMinReadSize = 16 * 1024;

// Used only within one callback at a time on the loop thread. Separate from the transport's,
// which is still in use while a stream handles a frame.
thread_local std::array<uint8_t, kReadBufferSize> tReadBuffer;
thread_local std::array<uint8_t, kPlaintextBufferSize> tPlaintext;

std::string describeUv(std::string_view what, int status) {
  return std::string(what) + ": " + uv_strerror(status);
}

}  // namespace

struct VisitorStream::WriteRequest {
  uv_write_t req{};
  std::vector<uint8_t> data;
  VisitorStream* owner = nullptr;
};

VisitorStream::VisitorStream(uv_loop_t* loop, StreamHost& host, StreamOptions options)
    : loop_(loop),
      host_(host),
      options_(std::move(options)),
      receive_(options_.receiveWindow),
      sendCredit_(options_.sendWindow) {
  if (options_.maxPayload == 0) options_.maxPayload = 1;
}

VisitorStream::~VisitorStream() = default;

VisitorStream* VisitorStream::create(uv_loop_t* loop, StreamHost& host, StreamOptions options) {
  tls::SslCtxPtr context = options.tlsContext;
  auto* self = new VisitorStream(loop, host, std::move(options));
  if (context) self->tls_ = tls::TlsEngine::server(std::move(context));
  if ((self->options_.tlsContext && !self->tls_) || uv_tcp_init(loop, &self->socket_) != 0) {
    delete self;
    return nullptr;
  }
  self->socket_.data = self;
  self->connectReq_.data = self;
  self->shutdownReq_.data = self;
  return self;
}

// --- Connecting -------------------------------------------------------------------------------

void VisitorStream::start() {
  if (local_ != Local::kIdle) return;
  local_ = Local::kResolving;
  deadlineMs_ = uv_now(loop_) + options_.connectTimeoutMs;
  if (terminating()) handshakeDeadlineMs_ = uv_now(loop_) + options_.handshakeTimeoutMs;
  host_.onStreamDeadlineChanged();
  const LocalTarget& target = options_.target;
  if (auto address = resolveWithoutDns(target.host, target.port)) {
    connectTo(*address);
    return;
  }
  int error = 0;
  dns_ = DnsQuery::start(
      loop_, target.host, target.port,
      [this](int status, const sockaddr_storage& address) {
        dns_ = nullptr;
        if (status != 0) {
          localConnectFailed(describeUv("resolving " + options_.target.host, status));
          return;
        }
        connectTo(address);
      },
      &error);
  if (dns_ == nullptr) localConnectFailed(describeUv("resolving " + target.host, error));
}

void VisitorStream::connectTo(const sockaddr_storage& address) {
  if (local_ != Local::kResolving) return;
  local_ = Local::kConnecting;
  const int rc = uv_tcp_connect(&connectReq_, &socket_,
                                reinterpret_cast<const sockaddr*>(&address), &onConnect);
  if (rc != 0) localConnectFailed(uv_strerror(rc));
}

void VisitorStream::onConnect(uv_connect_t* req, int status) {
  auto* self = static_cast<VisitorStream*>(req->data);
  // Also ignored once the connect deadline gave up on it (kUnreachable).
  if (status == UV_ECANCELED || self->local_ != Local::kConnecting) return;
  if (status != 0) {
    self->localConnectFailed(uv_strerror(status));
    return;
  }
  self->onConnected();
}

void VisitorStream::onConnected() {
  local_ = Local::kConnected;
  deadlineMs_ = 0;
  (void)uv_tcp_nodelay(&socket_, 1);
  if (!pendingLocal_.empty()) writeLocal(std::exchange(pendingLocal_, {}));
  if (closing()) return;
  maybeShutdown();
  if (closing()) return;
  updateReading();
}

void VisitorStream::resume() {
  if (handshakeDeadlineMs_ != 0) handshakeHeldByBridge_ = true;  // the bridge was congested
  updateReading();
}

void VisitorStream::onTimer(uint64_t nowMs) {
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
  if (local_ == Local::kResolving || local_ == Local::kConnecting) {
    if (dns_ != nullptr) {
      dns_->cancel();
      dns_ = nullptr;
    }
    localConnectFailed("connecting to " + options_.target.host + ":" +
                       std::to_string(options_.target.port) + " timed out");
  } else if (local_ == Local::kUnreachable) {
    // The visitor neither asked nor ended in time.
    resetStream(bridge::ResetReason::kConnectFailed, unreachableError_);
  }
}

void VisitorStream::localConnectFailed(std::string error) {
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

void VisitorStream::answerUnreachable() {
  if (answered_ || closing()) return;
  // An HTTP/2 visitor would not read an HTTP/1.1 answer.
  if (tls_->alpn() == "h2") {
    resetStream(bridge::ResetReason::kConnectFailed, unreachableError_);
    return;
  }
  answered_ = true;
  const std::string response = badGatewayResponse(options_.target, unreachableError_);
  if (tls_->write({reinterpret_cast<const uint8_t*>(response.data()), response.size()}) ==
      tls::TlsStatus::kError) {
    tlsFailed();
    return;
  }
  tls_->shutdown();  // close_notify after the answer, as Connection: close says
  sendTlsOutput();
  if (closing()) return;
  localEof_ = true;                      // nothing more will come "from the local service"
  if (pendingRelay_.empty()) sendEnd();  // otherwise flushToRelay ends once credit drains it
}

// --- Frames from the relay --------------------------------------------------------------------

FrameVerdict VisitorStream::onData(std::span<const uint8_t> payload) {
  if (protocolClosed()) return FrameVerdict::kOk;  // a frame that crossed our reset
  if (gotEnd_) return FrameVerdict::kProtocolError;
  if (!receive_.received(payload.size())) return FrameVerdict::kFlowControlViolation;
  if (closing()) return FrameVerdict::kOk;
  if (terminating()) {
    tls_->feed(payload);
    receive_.taken(payload.size());
    pumpTls();
    maybeGrant();
  } else {
    toLocal(payload);
  }
  return FrameVerdict::kOk;
}

FrameVerdict VisitorStream::onEnd() {
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

void VisitorStream::onReset() {
  if (protocolClosed()) return;
  reset_ = true;
  closeLocal(true);
}

FrameVerdict VisitorStream::onCredit(uint32_t increment) {
  if (protocolClosed() || sentEnd_) return FrameVerdict::kOk;  // pointless after our end
  if (sendCredit_.grant(increment) != bridge::CreditStatus::kOk) {
    return FrameVerdict::kProtocolError;
  }
  flushToRelay();
  return FrameVerdict::kOk;
}

void VisitorStream::abort() {
  reset_ = true;
  closeLocal(true);
}

// --- The visitor's TLS (terminating mode) -----------------------------------------------------

void VisitorStream::pumpTls() {
  if (!tls_->handshakeDone()) {
    const tls::TlsStatus status = tls_->handshake();
    sendTlsOutput();
    if (closing()) return;
    if (status == tls::TlsStatus::kError) {
      tlsFailed();
      return;
    }
    if (!tls_->handshakeDone()) return;
    handshakeDeadlineMs_ = 0;
    updateReading();  // the local service's bytes can be encrypted from now on
  }
  for (;;) {
    const tls::ReadResult result = tls_->read(tPlaintext);
    if (result.bytes > 0) toLocal({tPlaintext.data(), result.bytes});
    if (closing()) return;
    if (result.status == tls::TlsStatus::kClosed) {
      visitorTlsClosed_ = true;  // like a FIN: no more data toward the local service
      maybeShutdown();
      break;
    }
    if (result.status == tls::TlsStatus::kError) {
      tlsFailed();
      return;
    }
    if (result.bytes < tPlaintext.size()) break;
  }
  if (!closing()) sendTlsOutput();  // session tickets, key update answers
}

void VisitorStream::sendTlsOutput() {
  if (tls_->pendingOutputSize() == 0) return;
  const std::vector<uint8_t> output = tls_->takeOutput();
  sendToRelay(output);
}

void VisitorStream::tlsFailed() {
  sendTlsOutput();  // the alert, as far as credit allows
  if (closing()) return;
  resetStream(bridge::ResetReason::kClientIoError, "tls: " + tls_->errorText());
}

// --- Toward the local service -----------------------------------------------------------------

void VisitorStream::toLocal(std::span<const uint8_t> bytes) {
  if (bytes.empty() || closing()) return;
  if (local_ == Local::kUnreachable) {
    answerUnreachable();  // the request goes nowhere; its first bytes are enough to answer
    return;
  }
  if (local_ == Local::kConnected) {
    writeLocal(std::vector<uint8_t>(bytes.begin(), bytes.end()));
  } else {
    // Before the connection is up; bounded by the receive window, which we do not extend for
    // bytes still held here.
    pendingLocal_.insert(pendingLocal_.end(), bytes.begin(), bytes.end());
  }
}

void VisitorStream::writeLocal(std::vector<uint8_t> bytes) {
  auto* request = new WriteRequest;
  request->data = std::move(bytes);
  request->owner = this;
  request->req.data = request;
  const uv_buf_t buf = uv_buf_init(reinterpret_cast<char*>(request->data.data()),
                                   static_cast<unsigned>(request->data.size()));
  const size_t size = request->data.size();
  const int rc =
      uv_write(&request->req, reinterpret_cast<uv_stream_t*>(&socket_), &buf, 1, &onWrite);
  if (rc != 0) {
    delete request;
    resetStream(bridge::ResetReason::kClientIoError,
                describeUv("writing to the local service", rc));
    return;
  }
  localInFlight_ += size;
}

void VisitorStream::onWrite(uv_write_t* req, int status) {
  auto* request = static_cast<WriteRequest*>(req->data);
  VisitorStream* self = request->owner;
  const size_t size = request->data.size();
  delete request;
  self->localInFlight_ -= size;
  if (status == UV_ECANCELED || self->closing()) return;
  if (status != 0) {
    self->resetStream(bridge::ResetReason::kClientIoError,
                      describeUv("writing to the local service", status));
    return;
  }
  self->onLocalWritten(size);
}

void VisitorStream::onLocalWritten(size_t bytes) {
  // Passthrough bytes count as taken once written; terminating mode counted its ciphertext when
  // the engine took it and now only waits for the plaintext backlog to shrink.
  if (!terminating()) receive_.taken(bytes);
  maybeGrant();
  maybeShutdown();
}

void VisitorStream::maybeGrant() {
  if (protocolClosed() || gotEnd_ || closing()) return;  // grants for an ended direction are moot
  const size_t held = terminating() ? pendingLocal_.size() + localInFlight_ : 0;
  const uint32_t increment = receive_.grantNow(held);
  if (increment == 0) return;
  const std::vector<uint8_t> frame = bridge::encodeCredit(options_.connId, increment);
  host_.sendStreamFrame(frame, {});
}

void VisitorStream::maybeShutdown() {
  if (local_ != Local::kConnected || shutdownStarted_) return;
  if (!gotEnd_ && !visitorTlsClosed_) return;
  if (!pendingLocal_.empty() || localInFlight_ > 0) return;  // the last bytes first
  shutdownStarted_ = true;
  const int rc =
      uv_shutdown(&shutdownReq_, reinterpret_cast<uv_stream_t*>(&socket_), &onShutdown);
  if (rc != 0) {
    resetStream(bridge::ResetReason::kClientIoError, describeUv("closing the local socket", rc));
  }
}

void VisitorStream::onShutdown(uv_shutdown_t* req, int status) {
  auto* self = static_cast<VisitorStream*>(req->data);
  if (status == UV_ECANCELED || self->closing()) return;
  if (status != 0) {
    self->resetStream(bridge::ResetReason::kClientIoError,
                      describeUv("closing the local socket", status));
    return;
  }
  self->shutdownDone_ = true;
  self->maybeFinish();
}

void VisitorStream::maybeFinish() {
  // Both directions finished: ours ended, the relay's ended and flushed to the local service
  // (or there is no local service: the visitor was answered 502).
  if (closing() || !sentEnd_ || !gotEnd_) return;
  if (shutdownDone_ || local_ == Local::kUnreachable) closeLocal(false);
}

// --- From the local service toward the relay --------------------------------------------------

void VisitorStream::onAlloc(uv_handle_t* handle, size_t, uv_buf_t* buf) {
  auto* self = static_cast<VisitorStream*>(handle->data);
  // Read about as much as the credit covers and leave the rest in the kernel (backpressure).
  // A small credit still gets a 16 KiB read, so TLS records stay full-sized; what does not fit
  // waits in pendingRelay_, and reading stops until credit arrives.
  const size_t credit = std::max<size_t>(self->sendCredit_.available(), kMinReadSize);
  buf->base = reinterpret_cast<char*>(tReadBuffer.data());
  buf->len = std::min(tReadBuffer.size(), credit);
}

void VisitorStream::onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  auto* self = static_cast<VisitorStream*>(stream->data);
  if (self->closing() || nread == 0) return;
  if (nread == UV_EOF) {
    self->onLocalEof();
    return;
  }
  if (nread < 0) {
    self->resetStream(bridge::ResetReason::kClientIoError,
                      describeUv("reading from the local service", static_cast<int>(nread)));
    return;
  }
  self->onLocalBytes({reinterpret_cast<const uint8_t*>(buf->base), static_cast<size_t>(nread)});
}

void VisitorStream::onLocalBytes(std::span<const uint8_t> bytes) {
  if (!terminating()) {
    sendToRelay(bytes);
    return;
  }
  if (tls_->write(bytes) == tls::TlsStatus::kError) {
    tlsFailed();
    return;
  }
  sendTlsOutput();
}

void VisitorStream::onLocalEof() {
  localEof_ = true;
  updateReading();
  if (terminating() && tls_->handshakeDone()) {
    tls_->shutdown();  // close_notify: the visitor's view of our FIN
    sendTlsOutput();
    if (closing()) return;
  }
  if (pendingRelay_.empty()) sendEnd();
}

void VisitorStream::sendToRelay(std::span<const uint8_t> bytes) {
  if (bytes.empty() || sentEnd_ || protocolClosed()) return;
  if (pendingRelay_.empty()) bytes = bytes.subspan(sendData(bytes));
  pendingRelay_.insert(pendingRelay_.end(), bytes.begin(), bytes.end());
  updateReading();
}

size_t VisitorStream::sendData(std::span<const uint8_t> bytes) {
  const std::array<uint8_t, bridge::kFrameHeaderSize> head =
      bridge::encodeFrameHeader(bridge::FrameKind::kData, options_.connId);
  size_t sent = 0;
  while (sent < bytes.size() && sendCredit_.available() > 0) {
    const size_t n = std::min({bytes.size() - sent, static_cast<size_t>(sendCredit_.available()),
                               static_cast<size_t>(options_.maxPayload)});
    (void)sendCredit_.consume(n);
    host_.sendStreamFrame(head, bytes.subspan(sent, n));
    sent += n;
  }
  return sent;
}

void VisitorStream::flushToRelay() {
  if (!pendingRelay_.empty()) {
    const size_t sent = sendData(pendingRelay_);
    pendingRelay_.erase(pendingRelay_.begin(),
                        pendingRelay_.begin() + static_cast<std::ptrdiff_t>(sent));
    if (pendingRelay_.empty()) pendingRelay_.shrink_to_fit();
  }
  if (pendingRelay_.empty() && localEof_) sendEnd();
  updateReading();
}

void VisitorStream::sendEnd() {
  if (sentEnd_ || protocolClosed()) return;
  sentEnd_ = true;
  const std::vector<uint8_t> frame = bridge::encodeEnd(options_.connId);
  host_.sendStreamFrame(frame, {});
  maybeFinish();
}

void VisitorStream::updateReading() {
  if (closing()) return;
  const bool want = local_ == Local::kConnected && !localEof_ && !sentEnd_ && !protocolClosed() &&
                    pendingRelay_.empty() && sendCredit_.available() > 0 &&
                    (!terminating() || tls_->handshakeDone()) && !host_.bridgeCongested();
  auto* stream = reinterpret_cast<uv_stream_t*>(&socket_);
  if (want && !reading_) {
    const int rc = uv_read_start(stream, &onAlloc, &onRead);
    if (rc != 0) {
      resetStream(bridge::ResetReason::kClientIoError,
                  describeUv("reading from the local service", rc));
      return;
    }
    reading_ = true;
  } else if (!want && reading_) {
    (void)uv_read_stop(stream);
    reading_ = false;
  }
}

// --- Ending -----------------------------------------------------------------------------------

void VisitorStream::resetStream(bridge::ResetReason reason, std::string_view text) {
  if (!protocolClosed()) {
    reset_ = true;
    const std::vector<uint8_t> frame = bridge::encodeReset(options_.connId, reason, text);
    host_.sendStreamFrame(frame, {});
  }
  closeLocal(true);
}

void VisitorStream::closeLocal(bool abortive) {
  if (closing()) return;
  const Local previous = local_;
  local_ = Local::kClosing;
  deadlineMs_ = 0;
  handshakeDeadlineMs_ = 0;
  reading_ = false;
  pendingLocal_ = {};
  pendingRelay_ = {};
  if (dns_ != nullptr) {
    dns_->cancel();
    dns_ = nullptr;
  }
  auto* handle = reinterpret_cast<uv_handle_t*>(&socket_);
  // An RST tells the local service the visitor aborted; it is refused while a shutdown is in
  // flight, and then a plain close has to do.
  if (abortive && previous == Local::kConnected && uv_tcp_close_reset(&socket_, &onClosed) == 0) {
    return;
  }
  uv_close(handle, &onClosed);
}

void VisitorStream::onClosed(uv_handle_t* handle) {
  auto* self = static_cast<VisitorStream*>(handle->data);
  StreamHost& host = self->host_;
  const uint32_t id = self->options_.connId;
  delete self;
  host.onStreamFreed(id);
}

}  // namespace ot::client
