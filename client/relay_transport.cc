#include "client/relay_transport.h"

#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <utility>

#include "client/backoff.h"
#include "client/relay_frame.h"
#include "common/address_resolver.h"
#include "common/bridge_frame.h"

namespace ot::client {
namespace {

constexpr uint64_t kCloseWaitMs = 5000;  // protocol.md section 9
constexpr unsigned kKeepAliveSeconds = 30;
constexpr size_t kReadBufferSize = 64 * 1024;
constexpr size_t kPlaintextBufferSize = 16 * 1024;
constexpr size_t kHighWatermark = 1024 * 1024;
constexpr size_t kLowWatermark = 256 * 1024;

// Both are used only inside one callback at a time on the loop thread; the visitor streams have
// their own, because a transport callback runs stream code while it still holds these.
thread_local std::array<uint8_t, kReadBufferSize> tReadBuffer;
thread_local std::array<uint8_t, kPlaintextBufferSize> tPlaintext;

std::string describeUv(std::string_view what, int status) {
  return std::string(what) + ": " + uv_strerror(status);
}

}  // namespace

RelayTransport::RelayTransport(uv_loop_t* loop, RelayEndpoint endpoint,
                               RelayTransportListener& listener)
    : loop_(loop),
      endpoint_(std::move(endpoint)),
      listener_(listener),
      tcpContext_(loop, tReadBuffer),
      reader_(ws::Role::kClient, bridge::kMaxMessageBeforeAttach, ws::Delivery::kWhole) {}

RelayTransport::~RelayTransport() = default;

RelayTransport* RelayTransport::create(uv_loop_t* loop, RelayEndpoint endpoint,
                                       RelayTransportListener& listener) {
  auto* self = new RelayTransport(loop, std::move(endpoint), listener);
  self->tcp_ = TcpStream::open(self->tcpContext_, self);
  if (self->tcp_ == nullptr) {
    delete self;
    return nullptr;
  }
  self->lastReceiveMs_ = uv_now(loop);
  return self;
}

RelayTransport* RelayTransport::adopt(uv_loop_t* loop, RelayEndpoint endpoint,
                                      RelayTransportListener& listener, int fd) {
  auto* self = new RelayTransport(loop, std::move(endpoint), listener);
  self->tcp_ = TcpStream::adopt(self->tcpContext_, fd, self);
  if (self->tcp_ == nullptr) {
    // A failed uv_tcp_open leaves a handle closing that still calls into tcpContext_: this
    // (never seen) case keeps the few bytes rather than free them under it.
    return nullptr;
  }
  self->accepted_ = true;
  self->lastReceiveMs_ = uv_now(loop);
  return self;
}

void RelayTransport::start() {
  if (state_ != State::kIdle) return;
  state_ = State::kConnecting;
  if (accepted_) {
    onConnected();
    return;
  }
  tcp_->connect(endpoint_.host, endpoint_.port);
}

void RelayTransport::onConnectFailed(const ConnectFailure& failure) {
  switch (failure.stage) {
    case ConnectFailure::Stage::kResolve:
      fail(describeUv("resolving " + endpoint_.host, failure.status));
      return;
    case ConnectFailure::Stage::kStartConnect:
      failAs(describeUv("connecting to " + formatAddress(failure.address), failure.status),
             {AttemptEnd::Cause::kConnectFailed, failure.status});
      return;
    case ConnectFailure::Stage::kConnect:
      failAs(describeUv("connecting to " + endpoint_.host + ":" + std::to_string(endpoint_.port),
                        failure.status),
             {AttemptEnd::Cause::kConnectFailed, failure.status});
      return;
  }
}

void RelayTransport::onConnected() {
  if (closing()) return;
  tcp_->setNoDelay(true);
  tcp_->setKeepAlive(kKeepAliveSeconds);
  tcp_->setNotSentLowat(kNotSentLowat);
  lastReceiveMs_ = uv_now(loop_);
  // Keeps the traffic secrets: after the upgrade the engine detaches (onUpgradeStep) and seals
  // our frames with its own record layer, straight from the batch into the socket's buffer.
  tls_ = std::make_unique<tls::TlsStream>(
      tls::TlsEngine::client(endpoint_.tlsContext, endpoint_.domain, true, {}, true),
      static_cast<tls::TlsStream::Owner&>(*this), tPlaintext);
  if (!tls_->valid()) {
    fail("tls: cannot create a client session");
    return;
  }
  const int rc = tcp_->startReading();
  if (rc != 0) {
    fail(describeUv("reading from the relay", rc));
    return;
  }
  state_ = State::kTlsHandshake;
  if (!tls_->startHandshake()) fail("tls: " + tls_->errorText());  // else the ClientHello is out
}

void RelayTransport::onRead(std::span<const uint8_t> bytes) {
  if (closing()) return;
  lastReceiveMs_ = uv_now(loop_);
  tls_->receive(bytes);
}

bool RelayTransport::sendCiphertext(std::vector<uint8_t> bytes) {
  if (!closing()) writeRaw(std::move(bytes));
  return !closing();
}

void RelayTransport::onTlsHandshakeDone() {
  sendUpgradeRequest();
}

bool RelayTransport::wantsTlsPlaintext() const {
  return state_ >= State::kUpgrading && state_ <= State::kCloseSent;
}

void RelayTransport::onTlsPlaintext(std::span<uint8_t> bytes) {
  consumePlaintext(bytes);
}

void RelayTransport::onTlsCloseNotify() {
  onEndOfStream(UV_EOF);
}

void RelayTransport::onTlsFailed() {
  fail("tls: " + tls_->errorText());
}

void RelayTransport::onEndOfStream(int status) {
  const std::string why = status == UV_EOF ? "the relay closed the connection"
                                           : describeUv("reading from the relay", status);
  if (upgraded_) {
    lose(ws::kCloseAbnormal, why);
    return;
  }
  if (state_ == State::kUpgrading && upgrade_) {
    // A refusal whose body runs to the end of the connection completes now.
    onUpgradeStep(upgrade_->finish());
    return;
  }
  if (state_ == State::kTlsHandshake) {
    // A relay that sheds or drains closes before the handshake: "come back soon".
    failAs(why + " during the TLS handshake", {AttemptEnd::Cause::kClosedInHandshake, status});
    return;
  }
  fail(why);
}

void RelayTransport::consumePlaintext(std::span<uint8_t> data) {
  if (state_ == State::kUpgrading) {
    const RelayUpgrade::Step step = upgrade_->feed(data);
    onUpgradeStep(step);
    if (state_ != State::kOpen) return;
    data = data.subspan(step.consumed);
  }
  consumeWebSocket(data);
}

void RelayTransport::sendUpgradeRequest() {
  std::array<uint8_t, 16> nonce{};
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
    fail("cannot draw a WebSocket key");
    return;
  }
  upgrade_ = RelayUpgrade::create(endpoint_.domain, endpoint_.path, endpoint_.userAgent, nonce);
  if (!upgrade_) {
    fail("cannot build the upgrade request for " + endpoint_.domain + endpoint_.path, 0, {}, true);
    return;
  }
  state_ = State::kUpgrading;
  const std::string& request = upgrade_->request();
  if (!tls_->write({reinterpret_cast<const uint8_t*>(request.data()), request.size()})) {
    fail("tls: " + tls_->errorText());
  }
}

void RelayTransport::onUpgradeStep(const RelayUpgrade::Step& step) {
  switch (step.outcome) {
    case RelayUpgrade::Outcome::kNeedMore:
      return;
    case RelayUpgrade::Outcome::kFailed: {
      const TransportFailure& f = step.failure;
      fail(f.text, f.httpStatus, f.tag, f.permanent, f.retry);
      return;
    }
    case RelayUpgrade::Outcome::kUpgraded:
      upgrade_.reset();
      upgraded_ = true;
      state_ = State::kOpen;
      // The relay's tickets came before its 101, so OpenSSL has filed them: from `attach` on,
      // the record layer can take over (proven on attach and the relay's answer).
      tls_->releaseHandshakeState();
      listener_.onUpgraded();
      return;
  }
}

void RelayTransport::consumeWebSocket(std::span<uint8_t> data) {
  while (!data.empty() && (state_ == State::kOpen || state_ == State::kCloseSent)) {
    ws::ReadStep step = reader_.next(data);
    data = data.subspan(step.consumed);
    switch (step.event) {
      case ws::ReadEvent::kNeedMore:
      case ws::ReadEvent::kData:  // not produced in whole-message delivery
        break;
      case ws::ReadEvent::kMessage:
        if (state_ != State::kOpen) break;  // after our close, only the relay's close matters
        if (step.opcode == ws::Opcode::kText) {
          listener_.onTextMessage(
              {reinterpret_cast<const char*>(step.payload.data()), step.payload.size()});
        } else {
          listener_.onBinaryMessage(step.payload);
        }
        break;
      case ws::ReadEvent::kControl:
        if (step.opcode == ws::Opcode::kPing && state_ == State::kOpen) {
          sendPong(step.payload);
        } else if (step.opcode == ws::Opcode::kClose) {
          onPeerClose(step.closeCode, step.closeReason());
        }
        break;
      case ws::ReadEvent::kError:
        protocolClose(ws::closeCodeFor(step.error),
                      "websocket: " + std::string(ws::errorName(step.error)));
        return;
    }
  }
}

void RelayTransport::onPeerClose(uint16_t code, std::string_view reason) {
  if (state_ == State::kCloseSent) {
    closeSocket();  // the handshake is complete
    return;
  }
  // Echo the code (RFC 6455 5.5.1), let the echo drain, then close.
  const std::vector<uint8_t> body = [&] {
    if (!ws::isValidWireCloseCode(code)) return std::vector<uint8_t>{};
    return std::vector<uint8_t>{static_cast<uint8_t>(code >> 8), static_cast<uint8_t>(code)};
  }();
  (void)sendFrame(ws::Opcode::kClose, {}, body);
  if (closing()) return;
  state_ = State::kFlushing;
  if (tcp_->queuedBytes() == 0) closeSocket();
  if (!reported_) {
    reported_ = true;
    listener_.onDisconnected(code, reason);
  }
}

void RelayTransport::sendPong(std::span<const uint8_t> payload) {
  if (heldTextSinceMs_ == 0) {
    (void)sendFrame(ws::Opcode::kPong, {}, payload);
    return;
  }
  // Both frames in one buffer: one TLS record, one write.
  if (!flushBatch()) return;
  std::vector<uint8_t> frames = std::move(frameScratch_);
  frames.clear();
  appendBridgeFrame(frames, ws::Opcode::kPong, {}, payload);
  appendBridgeFrame(frames, ws::Opcode::kText, {},
                    {reinterpret_cast<const uint8_t*>(heldText_.data()), heldText_.size()});
  dropHeldText();
  const bool written = tls_->write(frames);
  frameScratch_ = std::move(frames);
  if (!written) lose(ws::kCloseAbnormal, "tls: " + tls_->errorText());
}

bool RelayTransport::holdTextForPong(std::string text) {
  if (state_ != State::kOpen) return false;
  if (heldTextSinceMs_ == 0) heldTextSinceMs_ = uv_now(loop_);
  heldText_ = std::move(text);
  return true;
}

bool RelayTransport::flushHeldText() {
  if (heldTextSinceMs_ == 0) return true;
  const std::string text = std::move(heldText_);
  return sendText(text);  // drops the held one
}

void RelayTransport::dropHeldText() {
  heldText_.clear();
  heldTextSinceMs_ = 0;
}

bool RelayTransport::sendText(std::string_view text) {
  dropHeldText();  // a message sent now is newer than a held one
  return sendFrame(ws::Opcode::kText, {},
                   {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

bool RelayTransport::sendBinary(std::span<const uint8_t> head, std::span<const uint8_t> payload) {
  return sendFrame(ws::Opcode::kBinary, head, payload);
}

bool RelayTransport::sendPing(std::span<const uint8_t> payload) {
  return sendFrame(ws::Opcode::kPing, {},
                   payload.first(std::min(payload.size(), ws::kMaxControlPayload)));
}

bool RelayTransport::sendFrame(ws::Opcode opcode, std::span<const uint8_t> head,
                               std::span<const uint8_t> payload) {
  if (state_ != State::kOpen) return false;
  if (batchDepth_ > 0 && opcode == ws::Opcode::kBinary) {
    const size_t from = batch_.size();
    appendBridgeFrame(batch_, opcode, head, payload);
    holdCopied(from);
    return true;
  }
  if (!flushBatch()) return false;  // what is held goes first
  // Assembled in a reused buffer (moved out, so a nested send finds it empty); TLS copies it.
  std::vector<uint8_t> frame = std::move(frameScratch_);
  frame.clear();
  appendBridgeFrame(frame, opcode, head, payload);
  const bool written = tls_->write(frame);
  frameScratch_ = std::move(frame);
  if (!written) {
    lose(ws::kCloseAbnormal, "tls: " + tls_->errorText());
    return false;
  }
  return !closing();
}

void RelayTransport::close(uint16_t code, std::string_view reason) {
  reported_ = true;  // the owner knows why
  if (state_ != State::kOpen) {
    if (state_ < State::kOpen || state_ == State::kCloseSent) closeSocket();
    return;
  }
  std::vector<uint8_t> payload;
  if (ws::isValidWireCloseCode(code)) {
    payload = {static_cast<uint8_t>(code >> 8), static_cast<uint8_t>(code)};
    // Our reasons are short ASCII; the cut only guards the 125-byte control frame limit.
    const std::string_view cut = reason.substr(0, ws::kMaxControlPayload - 2);
    payload.insert(payload.end(), cut.begin(), cut.end());
  }
  if (!sendFrame(ws::Opcode::kClose, {}, payload)) {
    closeSocket();
    return;
  }
  state_ = State::kCloseSent;
  closeDeadlineMs_ = uv_now(loop_) + kCloseWaitMs;
}

void RelayTransport::abort() {
  reported_ = true;
  closeSocket();
}

void RelayTransport::writeRaw(std::vector<uint8_t> bytes) {
  // Straight to the socket where it takes it: no write request, no write watcher to arm and
  // disarm. Bytes taken at once need no onWritten: the watermarks and the streams' turns
  // (StreamScheduler) look at what is queued, and a write taken whole queued nothing.
  (void)tcp_->writeNow(std::move(bytes));  // a failure is reported inside (onWriteError)
  if (!closing() && tcp_->queuedBytes() >= kHighWatermark) congested_ = true;
}

void RelayTransport::onWriteError(int status) {
  if (closing()) return;
  if (state_ == State::kTlsHandshake) {
    failAs(describeUv("writing to the relay", status) + " during the TLS handshake",
           {AttemptEnd::Cause::kClosedInHandshake, status});
    return;
  }
  fail(describeUv("writing to the relay", status));
}

void RelayTransport::onWritten(size_t) {
  if (closing()) return;
  if (state_ == State::kFlushing && tcp_->queuedBytes() == 0) {
    closeSocket();
    return;
  }
  if (congested_ && tcp_->queuedBytes() <= kLowWatermark) {
    congested_ = false;
    if (state_ == State::kOpen) listener_.onWritable();
  }
  if (state_ == State::kOpen && !closing()) listener_.onBytesWritten();
}

void RelayTransport::failAs(std::string text, const AttemptEnd& end) {
  const RetryHint retry = classifyAttemptEnd(end);
  if (retry.kind == RetryKind::kBusy) text += " (the relay is restarting or busy)";
  fail(std::move(text), 0, {}, false, retry);
}

void RelayTransport::fail(std::string text, int httpStatus, std::string tag, bool permanent,
                          RetryHint retry) {
  if (upgraded_) {
    lose(ws::kCloseAbnormal, std::move(text));
    return;
  }
  closeSocket();
  if (reported_) return;
  reported_ = true;
  listener_.onTransportFailed({httpStatus, std::move(tag), std::move(text), permanent, retry});
}

void RelayTransport::lose(uint16_t code, std::string text) {
  closeSocket();
  if (reported_) return;
  reported_ = true;
  listener_.onDisconnected(code, text);
}

void RelayTransport::protocolClose(uint16_t code, std::string text) {
  const bool wasReported = reported_;
  close(code);  // waits for the relay's answer like any close of ours
  if (!wasReported) listener_.onDisconnected(code, text);
}

void RelayTransport::closeSocket() {
  if (closing()) return;
  state_ = State::kClosing;
  batch_ = {};
  pieces_ = {};
  heldBytes_ = 0;
  closeDeadlineMs_ = 0;
  tcp_->close(false);  // also cancels a lookup in flight
}

void RelayTransport::onClosed() {
  RelayTransportListener& listener = listener_;
  delete this;
  listener.onTransportClosed();
}

}  // namespace ot::client
