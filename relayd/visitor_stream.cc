#include "relayd/visitor_stream.h"

#include <algorithm>
#include <utility>

#include "relayd/visitor_analytics.h"

namespace ot::relayd {

namespace {
// Credit goes back to the client in batches of a quarter window (protocol.md section 7).
constexpr uint32_t kGrantDivisor = 4;
// A visitor holding half its window unwritten must take 64 KiB within 5 s or be reset: a visitor
// that stops reading never holds its bridge or its memory for long.
constexpr size_t kLagThreshold = bridge::kRelayWindow / 2;
}  // namespace

VisitorStream::VisitorStream(RelayContext& context, TcpStream* stream, std::string tunnelId,
                             uint32_t clientWindow)
    : context_(context),
      stream_(stream),
      tunnelId_(std::move(tunnelId)),
      sendCredit_(clientWindow),
      timer_(&VisitorStream::onTimer, this),
      stall_(&VisitorStream::onStall, this) {
  stream_->setHandler(this);
  openedAtMs_ = context_.nowMs();
  lastActivityMs_ = openedAtMs_;
  context_.metrics.visitorConnectionsOpen.Increment();
}

void VisitorStream::start(BridgeForStream* bridge, uint32_t connId, std::vector<uint8_t> hello) {
  bridge_ = bridge;
  connId_ = connId;
  sendToBridge(hello);
  armTimer();
  updateReading();
}

void VisitorStream::sendToBridge(std::span<const uint8_t> bytes) {
  if (bridge_ == nullptr) return;
  while (!bytes.empty() && sendCredit_.available() > 0) {
    // All the credit allows at once: the bridge frames it and writes the frames together.
    const size_t chunk = std::min(bytes.size(), static_cast<size_t>(sendCredit_.available()));
    (void)sendCredit_.consume(chunk);
    bridge_->sendData(connId_, bytes.first(chunk));
    bytesIn_ += chunk;
    bytes = bytes.subspan(chunk);
  }
  if (!bytes.empty()) {
    context_.addBuffered(static_cast<int64_t>(bytes.size()));
    held_.insert(held_.end(), bytes.begin(), bytes.end());
  }
}

void VisitorStream::flushHeld() {
  if (held_.empty()) return;
  std::vector<uint8_t> held;
  held.swap(held_);
  context_.addBuffered(-static_cast<int64_t>(held.size()));
  sendToBridge(held);
  if (held_.empty() && visitorEnded_ && bridge_ != nullptr) bridge_->sendEnd(connId_);
}

void VisitorStream::updateReading() {
  if (socketClosed_ || stream_ == nullptr || finished_) return;
  const bool want = !visitorEnded_ && held_.empty() && !bridgePaused_ && bridge_ != nullptr &&
                    sendCredit_.available() > 0 && !context_.overBufferedLimit();
  if (want) {
    stream_->startReading();
  } else {
    stream_->stopReading();
    // Nothing else would wake a visitor paused only by the process-wide limit.
    if (context_.overBufferedLimit()) context_.waitForBufferRoom(this);
  }
}

void VisitorStream::onRead(std::span<const uint8_t> bytes) {
  touch();
  sendToBridge(bytes);
  updateReading();
}

void VisitorStream::onEof() {
  if (bytesOut_ == 0) {
    // Not one byte came back from the client: the visitor ended before it could have seen a
    // ServerHello, so its TLS handshake can never finish. Waiting out the half-close timeout
    // would let a burst of hello-then-close connections hold the tunnel's slots for 60 s.
    abort(bridge::ResetReason::kVisitorIoError, true);
    return;
  }
  visitorEnded_ = true;
  touch();
  if (held_.empty() && bridge_ != nullptr) bridge_->sendEnd(connId_);
  armTimer();
  finishIfDone();
}

void VisitorStream::onStreamError(int) {
  abort(bridge::ResetReason::kVisitorIoError, true);
}

void VisitorStream::deliver(std::span<const uint8_t> payload) {
  const std::span<const uint8_t> one[] = {payload};
  deliverAll(one);
}

void VisitorStream::deliverAll(std::span<const std::span<const uint8_t>> payloads) {
  if (socketClosed_ || stream_ == nullptr) return;
  touch();
  size_t size = 0;
  for (const auto payload : payloads) size += payload.size();
  bytesOut_ += size;
  pendingToVisitor_ += size;
  if (bridge_ != nullptr) bridge_->visitorBuffered(static_cast<int64_t>(size));
  // Straight from the decrypted records, in one write: only what the socket does not take at
  // once is copied.
  const size_t taken = stream_->writeCopy(payloads);
  if (taken > 0) accountWritten(taken);
  if (pendingToVisitor_ >= kLagThreshold && !stall_.armed()) {
    stallBaseline_ = ackedByVisitor();
    context_.wheel.schedule(stall_, context_.nowMs(), kSlowVisitorWaitMs);
  }
}

void VisitorStream::onStall(TimerEntry*, void* owner) {
  auto* self = static_cast<VisitorStream*>(owner);
  if (self->finished_ || self->pendingToVisitor_ < kLagThreshold) return;  // it caught up
  if (laggingVisitorTooSlow(self->stallBaseline_, self->ackedByVisitor())) {
    self->context_.metrics.backpressureReset.Increment();
    self->abort(bridge::ResetReason::kTooSlow, true);
    return;
  }
  self->stallBaseline_ = self->ackedByVisitor();  // slow but moving: look again in 5 s
  self->context_.wheel.schedule(self->stall_, self->context_.nowMs(), kSlowVisitorWaitMs);
}

void VisitorStream::onWritten(size_t bytes) {
  if (accountWritten(bytes)) finishIfDone();
}

bool VisitorStream::accountWritten(size_t bytes) {
  const size_t taken = std::min(bytes, pendingToVisitor_);
  pendingToVisitor_ -= taken;
  if (bridge_ == nullptr) return false;
  bridge_->visitorBuffered(-static_cast<int64_t>(taken));
  ungranted_ += static_cast<uint32_t>(taken);
  if (!clientEnded_ && ungranted_ >= bridge::kRelayWindow / kGrantDivisor) {
    bridge_->sendCredit(connId_, ungranted_);
    ungranted_ = 0;
  }
  return true;
}

void VisitorStream::peerEnded() {
  clientEnded_ = true;
  touch();
  if (stream_ != nullptr && !socketClosed_) stream_->shutdownWrite();  // after queued writes
  armTimer();
  finishIfDone();
}

void VisitorStream::peerReset() {
  detachFromBridge();
  if (stream_ != nullptr && !socketClosed_) stream_->close(true);
}

bool VisitorStream::addSendCredit(uint32_t increment) {
  if (sendCredit_.grant(increment) != bridge::CreditStatus::kOk) return false;
  flushHeld();
  updateReading();
  return true;
}

void VisitorStream::abort(bridge::ResetReason reason, bool notifyClient) {
  if (notifyClient && bridge_ != nullptr) bridge_->sendReset(connId_, reason);
  detachFromBridge();
  if (stream_ != nullptr && !socketClosed_) stream_->close(true);
}

void VisitorStream::pauseForBridge() {
  bridgePaused_ = true;
  updateReading();
}

void VisitorStream::resumeFromBridge() {
  bridgePaused_ = false;
  updateReading();
}

uint64_t VisitorStream::ackedByVisitor() const {
  return (stream_ != nullptr && !socketClosed_) ? stream_->bytesAcked() : 0;
}

void VisitorStream::touch() {
  lastActivityMs_ = context_.nowMs();
}

void VisitorStream::armTimer() {
  if (finished_) return;
  const bool halfClosed = visitorEnded_ || clientEnded_;
  const uint64_t limit =
      halfClosed ? context_.config.halfCloseTimeoutMs : context_.config.connectionIdleTimeoutMs;
  const uint64_t now = context_.nowMs();
  const uint64_t due = lastActivityMs_ + limit;
  context_.wheel.schedule(timer_, now, due > now ? due - now : 0);
}

void VisitorStream::onTimer(TimerEntry*, void* owner) {
  auto* self = static_cast<VisitorStream*>(owner);
  const bool halfClosed = self->visitorEnded_ || self->clientEnded_;
  const uint64_t limit = halfClosed ? self->context_.config.halfCloseTimeoutMs
                                    : self->context_.config.connectionIdleTimeoutMs;
  if (self->context_.nowMs() < self->lastActivityMs_ + limit) {
    self->armTimer();  // traffic since it was armed: check again later
    return;
  }
  self->abort(
      halfClosed ? bridge::ResetReason::kHalfCloseTimeout : bridge::ResetReason::kIdleTimeout,
      true);
}

void VisitorStream::finishIfDone() {
  // Both directions ended and everything written: the connection is complete.
  if (visitorEnded_ && clientEnded_ && pendingToVisitor_ == 0 && held_.empty()) {
    detachFromBridge();
    if (stream_ != nullptr && !socketClosed_) stream_->close(false);
  }
}

void VisitorStream::detachFromBridge() {
  if (finished_) return;
  finished_ = true;
  timer_.cancel();
  stall_.cancel();
  sourceSlot_.release();
  context_.stopWaitingForBufferRoom(this);
  if (!held_.empty()) {
    context_.addBuffered(-static_cast<int64_t>(held_.size()));
    held_.clear();
    held_.shrink_to_fit();
  }
  if (pendingToVisitor_ > 0) {
    if (bridge_ != nullptr) bridge_->visitorBuffered(-static_cast<int64_t>(pendingToVisitor_));
    pendingToVisitor_ = 0;
  }
  const bool served = bridge_ != nullptr;  // a stream that never started is counted by the relay
  if (bridge_ != nullptr) {
    BridgeForStream* bridge = bridge_;
    bridge_ = nullptr;
    bridge->streamFinished(this, bytesIn_, bytesOut_);
  }
  const uint64_t durationMs = context_.nowMs() - openedAtMs_;
  context_.metrics.visitorBytesIn.Increment(static_cast<double>(bytesIn_));
  context_.metrics.visitorBytesOut.Increment(static_cast<double>(bytesOut_));
  context_.metrics.visitorDuration.Observe(static_cast<double>(durationMs) / 1000.0);
  if (served) {
    emitVisitorServed(context_, tunnelId_, forwardedIn_, bytesIn_, bytesOut_, durationMs);
  }
}

void VisitorStream::onClosed() {
  context_.stopWaitingForBufferRoom(this);
  socketClosed_ = true;
  stream_ = nullptr;
  detachFromBridge();
  context_.metrics.visitorConnectionsOpen.Decrement();
  if (context_.openConnections > 0) --context_.openConnections;
  delete this;  // the close callback is a top-level loop callback
}

}  // namespace ot::relayd
