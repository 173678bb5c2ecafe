// LocalStream's bytes through the local socket (local_stream.h, a TcpStream): toward the local
// service (writes, the half-close, credit grants) and from it toward the relay (reads sized by the
// send credit, data frames, end).
#include <algorithm>
#include <array>
#include <utility>

#include "client/local_stream.h"

namespace ot::client {
namespace {

constexpr size_t kMinReadSize = 16 * 1024;

}  // namespace

// --- Toward the local service -----------------------------------------------------------------

void LocalStream::toLocal(std::span<const uint8_t> bytes) {
  if (bytes.empty() || closing()) return;
  if (local_ == Local::kUnreachable) {
    answerUnreachable();  // the request goes nowhere; its first bytes are enough to answer
    return;
  }
  if (local_ == Local::kConnected) {
    // Straight from the decrypted record: only what the socket does not take at once is copied.
    const size_t taken = tcp_->writeCopy(bytes);  // a failure is reported inside (onWriteError)
    if (taken > 0 && !closing()) onLocalWritten(taken);
  } else {
    // Before the connection is up; bounded by the receive window, which we do not extend for
    // bytes still held here.
    pendingLocal_.insert(pendingLocal_.end(), bytes.begin(), bytes.end());
  }
}

void LocalStream::writeLocal(std::vector<uint8_t> bytes) {
  // Written at once where the socket takes it (no write request, no write watcher to arm): those
  // bytes count as written now, the rest through onWritten when its queued write completes.
  const size_t taken = tcp_->writeNow(std::move(bytes));  // a failure is reported inside
  if (taken > 0 && !closing()) onLocalWritten(taken);
}

void LocalStream::onWriteError(int status) {
  if (closing()) return;
  resetStream(bridge::ResetReason::kClientIoError,
              describeUv("writing to the local service", status));
}

void LocalStream::onWritten(size_t bytes) {
  if (closing()) return;
  onLocalWritten(bytes);
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
  const size_t held = terminating() ? pendingLocal_.size() + tcp_->queuedBytes() : 0;
  const uint32_t increment =
      receive_.grantNow(held, host_.receiveAllowance(options_.connId, options_.receiveWindow));
  if (increment == 0) return;
  const std::vector<uint8_t> frame = bridge::encodeCredit(options_.connId, increment);
  host_.sendStreamFrame(frame, {});
}

void LocalStream::maybeShutdown() {
  if (local_ != Local::kConnected || shutdownStarted_) return;
  if (!gotEnd_ && !visitorTlsClosed_) return;
  if (!pendingLocal_.empty() || tcp_->queuedBytes() > 0) return;  // the last bytes first
  shutdownStarted_ = true;
  if (const int rc = tcp_->shutdownWrite(); rc != 0) {
    resetStream(bridge::ResetReason::kClientIoError, describeUv("closing the local socket", rc));
  }
}

void LocalStream::onShutdownDone(int status) {
  if (closing()) return;
  if (status != 0) {
    resetStream(bridge::ResetReason::kClientIoError,
                describeUv("closing the local socket", status));
    return;
  }
  shutdownDone_ = true;
  maybeFinish();
}

void LocalStream::maybeFinish() {
  // Both directions finished: ours ended, the relay's ended and flushed to the local service
  // (or there is no local service: the visitor was answered 502).
  if (closing() || !sentEnd_ || !gotEnd_) return;
  if (shutdownDone_ || local_ == Local::kUnreachable) closeLocal(false);
}

// --- From the local service toward the relay --------------------------------------------------

size_t LocalStream::readSizeLimit() const {
  // Read about as much as the credit covers and leave the rest in the kernel (backpressure).
  // A small credit still gets a 16 KiB read, so TLS records stay full-sized; what does not fit
  // waits in pendingRelay_, and reading stops until credit arrives. (At most the 64 KiB buffer.)
  return std::max<size_t>(usableCredit(), kMinReadSize);
}

size_t LocalStream::usableCredit() const {
  const size_t available = sendCredit_.available();
  const size_t window = options_.sendWindow;
  const size_t allowance = host_.sendAllowance(options_.connId, window);
  // In flight: the window minus what is left of it (grants beyond the window count as none).
  const size_t inFlight = window - std::min(window, available);
  return allowance > inFlight ? std::min(available, allowance - inFlight) : 0;
}

void LocalStream::onRead(std::span<const uint8_t> bytes) {
  if (closing()) return;
  onLocalBytes(bytes);
}

void LocalStream::onEof() {
  if (closing()) return;
  onLocalEof();
}

void LocalStream::onStreamError(int status) {
  if (closing()) return;
  resetStream(bridge::ResetReason::kClientIoError,
              describeUv("reading from the local service", status));
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
  // Straight out while the bridge has room and no other stream waits for a turn; the rest
  // waits for this stream's turns (StreamScheduler), one frame each.
  if (pendingRelay_.empty() && host_.bridgeHasRoom()) bytes = bytes.subspan(sendData(bytes));
  if (!bytes.empty()) {
    pendingRelay_.insert(pendingRelay_.end(), bytes.begin(), bytes.end());
    if (usableCredit() > 0) requestTurn();
  }
  updateReading();
}

size_t LocalStream::sendData(std::span<const uint8_t> bytes, size_t limit) {
  const std::array<uint8_t, bridge::kFrameHeaderSize> head =
      bridge::encodeFrameHeader(bridge::FrameKind::kData, options_.connId);
  size_t sent = 0;
  const size_t usable = usableCredit();
  if (usable == 0) return 0;
  host_.onStreamActive(options_.connId);
  host_.beginFrameBatch();  // this read's (or turn's) frames leave in one write
  while (sent < bytes.size() && sent < limit && sent < usable) {
    const size_t n = std::min({bytes.size() - sent, limit - sent, usable - sent,
                               static_cast<size_t>(options_.maxPayload)});
    (void)sendCredit_.consume(n);
    host_.sendBorrowedFrame(head, bytes.subspan(sent, n));  // `bytes` outlives the batch
    sent += n;
  }
  host_.endFrameBatch();
  return sent;
}

size_t LocalStream::onTurn(size_t quantum) {
  if (closing()) return 0;
  size_t sent = 0;
  if (!pendingRelay_.empty()) {
    sent = sendData(std::span<const uint8_t>(pendingRelay_).subspan(pendingOffset_), quantum);
    pendingOffset_ += sent;
    if (pendingOffset_ == pendingRelay_.size()) {
      pendingRelay_.clear();
      pendingOffset_ = 0;
    }
    if (!pendingRelay_.empty()) {
      if (usableCredit() > 0) requestTurn();
      return sent;
    }
    if (localEof_) sendEnd();
  }
  updateReading(true);
  return sent;
}

void LocalStream::requestTurn() {
  host_.onStreamReady(options_.connId);
}

void LocalStream::flushToRelay() {
  // New credit: what waits goes out in turns.
  if (!pendingRelay_.empty()) {
    if (usableCredit() > 0) requestTurn();
    return;
  }
  if (localEof_) sendEnd();
  updateReading();
}

void LocalStream::sendEnd() {
  if (sentEnd_ || protocolClosed()) return;
  sentEnd_ = true;
  const std::vector<uint8_t> frame = bridge::encodeEnd(options_.connId);
  host_.sendStreamFrame(frame, {});
  maybeFinish();
}

void LocalStream::updateReading(bool turn) {
  if (closing()) return;
  bool want = local_ == Local::kConnected && !localEof_ && !sentEnd_ && !protocolClosed() &&
              pendingRelay_.empty() && usableCredit() > 0 &&
              (!terminating() || tls_->handshakeDone()) && !host_.bridgeCongested();
  // A read may queue up to 64 KiB more: only with room on the bridge, else after a turn.
  if (want && !turn && !host_.bridgeHasRoom()) {
    want = false;
    requestTurn();
  }
  if (want && !tcp_->reading()) {
    if (const int rc = tcp_->startReading(); rc != 0) {
      resetStream(bridge::ResetReason::kClientIoError,
                  describeUv("reading from the local service", rc));
    }
  } else if (!want && tcp_->reading()) {
    tcp_->stopReading();
  }
}

}  // namespace ot::client
