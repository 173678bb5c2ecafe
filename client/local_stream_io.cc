// LocalStream's bytes through the local socket (local_stream.h): toward the local service
// (writes, the half-close, credit grants) and from it toward the relay (reads sized by the send
// credit, data frames, end).
#include "client/local_stream.h"

#include <algorithm>
#include <array>
#include <utility>

namespace ot::client {
namespace {

constexpr size_t kReadBufferSize = 64 * 1024;
constexpr size_t kMinReadSize = 16 * 1024;

// Used only within one callback at a time on the loop thread. Separate from the transport's,
// which is still in use while a stream handles a frame.
thread_local std::array<uint8_t, kReadBufferSize> tReadBuffer;

}  // namespace

struct LocalStream::WriteRequest {
  uv_write_t req{};
  std::vector<uint8_t> data;
  LocalStream* owner = nullptr;
};

// --- Toward the local service -----------------------------------------------------------------

void LocalStream::toLocal(std::span<const uint8_t> bytes) {
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

void LocalStream::writeLocal(std::vector<uint8_t> bytes) {
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

void LocalStream::onWrite(uv_write_t* req, int status) {
  auto* request = static_cast<WriteRequest*>(req->data);
  LocalStream* self = request->owner;
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

void LocalStream::onLocalWritten(size_t bytes) {
  // Passthrough bytes count as taken once written; terminating mode counted its ciphertext when
  // the engine took it and now only waits for the plaintext backlog to shrink.
  if (!terminating()) receive_.taken(bytes);
  maybeGrant();
  maybeShutdown();
}

void LocalStream::maybeGrant() {
  if (protocolClosed() || gotEnd_ || closing()) return;  // grants for an ended direction are moot
  const size_t held = terminating() ? pendingLocal_.size() + localInFlight_ : 0;
  const uint32_t increment = receive_.grantNow(held);
  if (increment == 0) return;
  const std::vector<uint8_t> frame = bridge::encodeCredit(options_.connId, increment);
  host_.sendStreamFrame(frame, {});
}

void LocalStream::maybeShutdown() {
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

void LocalStream::onShutdown(uv_shutdown_t* req, int status) {
  auto* self = static_cast<LocalStream*>(req->data);
  if (status == UV_ECANCELED || self->closing()) return;
  if (status != 0) {
    self->resetStream(bridge::ResetReason::kClientIoError,
                      describeUv("closing the local socket", status));
    return;
  }
  self->shutdownDone_ = true;
  self->maybeFinish();
}

void LocalStream::maybeFinish() {
  // Both directions finished: ours ended, the relay's ended and flushed to the local service
  // (or there is no local service: the visitor was answered 502).
  if (closing() || !sentEnd_ || !gotEnd_) return;
  if (shutdownDone_ || local_ == Local::kUnreachable) closeLocal(false);
}

// --- From the local service toward the relay --------------------------------------------------

void LocalStream::onAlloc(uv_handle_t* handle, size_t, uv_buf_t* buf) {
  auto* self = static_cast<LocalStream*>(handle->data);
  // Read about as much as the credit covers and leave the rest in the kernel (backpressure).
  // A small credit still gets a 16 KiB read, so TLS records stay full-sized; what does not fit
  // waits in pendingRelay_, and reading stops until credit arrives.
  const size_t credit = std::max<size_t>(self->sendCredit_.available(), kMinReadSize);
  buf->base = reinterpret_cast<char*>(tReadBuffer.data());
  buf->len = std::min(tReadBuffer.size(), credit);
}

void LocalStream::onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  auto* self = static_cast<LocalStream*>(stream->data);
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

void LocalStream::onLocalBytes(std::span<const uint8_t> bytes) {
  if (!terminating()) {
    sendToRelay(bytes);
    return;
  }
  if (!tls_->write(bytes)) onTlsFailed();
}

void LocalStream::onLocalEof() {
  localEof_ = true;
  updateReading();
  if (terminating() && tls_->handshakeDone()) {
    tls_->closeNotify();  // the visitor's view of our FIN
    if (closing()) return;
  }
  if (pendingRelay_.empty()) sendEnd();
}

void LocalStream::sendToRelay(std::span<const uint8_t> bytes) {
  if (bytes.empty() || sentEnd_ || protocolClosed()) return;
  if (pendingRelay_.empty()) bytes = bytes.subspan(sendData(bytes));
  pendingRelay_.insert(pendingRelay_.end(), bytes.begin(), bytes.end());
  updateReading();
}

size_t LocalStream::sendData(std::span<const uint8_t> bytes) {
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

void LocalStream::flushToRelay() {
  if (!pendingRelay_.empty()) {
    const size_t sent = sendData(pendingRelay_);
    pendingRelay_.erase(pendingRelay_.begin(),
                        pendingRelay_.begin() + static_cast<std::ptrdiff_t>(sent));
    if (pendingRelay_.empty()) pendingRelay_.shrink_to_fit();
  }
  if (pendingRelay_.empty() && localEof_) sendEnd();
  updateReading();
}

void LocalStream::sendEnd() {
  if (sentEnd_ || protocolClosed()) return;
  sentEnd_ = true;
  const std::vector<uint8_t> frame = bridge::encodeEnd(options_.connId);
  host_.sendStreamFrame(frame, {});
  maybeFinish();
}

void LocalStream::updateReading() {
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

}  // namespace ot::client
