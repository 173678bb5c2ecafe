// BridgeSession's liveness and closing: the attach deadline and heartbeat pings, drain, the
// close handshake and the loss of the transport. The rest is in bridge_session.cc.
#include <algorithm>
#include <string>

#include "common/prefetch.h"
#include "relayd/bridge_session.h"

namespace ot::relayd {

void BridgeSession::scheduleHeartbeat() {
  const uint64_t now = context_.nowMs();
  const uint64_t due = lastHeardMs_ + context_.config.bridgeHeartbeatMs;
  context_.wheel.schedule(heartbeat_, now, due > now ? due - now : 0);
}

bool BridgeSession::pingDue(uint64_t nowMs) const {
  return (phase_ == Phase::kAttached || phase_ == Phase::kDraining) && !pingOutstanding_ &&
         nowMs - lastHeardMs_ >= context_.config.bridgeHeartbeatMs;
}

void BridgeSession::prefetchHeartbeat(const void* owner, unsigned stage) {
  const auto* self = static_cast<const BridgeSession*>(owner);
  if (stage == 0) {
    prefetchLine(self);  // the references to the context and the transport
    prefetchLine(&self->phase_);
    prefetchLine(&self->lastHeardMs_);
    return;
  }
  if (self->pingDue(self->context_.nowMs())) self->transport_.prefetchForWrite(stage - 1);
}

void BridgeSession::onHeartbeat(TimerEntry*, void* owner) {
  auto* self = static_cast<BridgeSession*>(owner);
  if (self->closed()) return;
  if (self->phase_ == Phase::kAwaitAttach || self->phase_ == Phase::kAuthorizing) {
    if (self->phase_ == Phase::kAwaitAttach) {
      self->close(ws::kClosePolicyViolation, DetachOutcome::kServerClose, "no attach within 10 s");
    } else {
      self->context_.wheel.schedule(self->heartbeat_, self->context_.nowMs(),
                                    kBridgeAttachTimeoutMs);
    }
    return;
  }
  const uint64_t now = self->context_.nowMs();
  const uint64_t silent = now - self->lastHeardMs_;
  // Retired after the idle timeout plus one heartbeat of silence: 45 s by default.
  const uint64_t heartbeat = self->context_.config.bridgeHeartbeatMs;
  const uint64_t retireAfter = self->context_.config.bridgeIdleTimeoutMs + heartbeat;
  if (silent >= retireAfter) {
    self->close(ws::kCloseGoingAway, DetachOutcome::kIdleRetire, "silent");
    self->finishClose();  // no answer is waited for
    return;
  }
  // Only a bridge silent for a whole heartbeat is pinged: any frame from the client counts as
  // life (onPlaintext), so a bridge that carries traffic, or whose client pings on its own, costs
  // no ping, only this entry's one wake-up per heartbeat.
  if (self->pingDue(now)) {
    self->pingOutstanding_ = true;
    self->sendFrame(ws::Opcode::kPing, {}, {});
  }
  // Not silent: look again a heartbeat after the last sign of life. Silent: a heartbeat from now,
  // so a client that answered and fell silent again is pinged after one more heartbeat (not only
  // when the retirement is due), and at the latest at the retirement.
  const uint64_t next = silent < heartbeat
                            ? self->lastHeardMs_ + heartbeat
                            : std::min(now + heartbeat, self->lastHeardMs_ + retireAfter);
  self->context_.wheel.schedule(self->heartbeat_, now, next > now ? next - now : 0);
}

void BridgeSession::drain() {
  if (phase_ == Phase::kAttached) {
    phase_ = Phase::kDraining;
    relay_.bridgeDraining(tunnelId_, key_);
    sendText(bridge::serializeDrain());
    if (streams_.empty()) close(ws::kCloseServiceRestart, DetachOutcome::kDrain);
  } else if (phase_ == Phase::kAwaitAttach || phase_ == Phase::kAuthorizing) {
    phase_ = Phase::kAwaitAttach;
    sendText(bridge::serializeDrain());
    close(ws::kCloseServiceRestart, DetachOutcome::kDrain);
  }
}

void BridgeSession::close(uint16_t code, DetachOutcome reason, const std::string& text) {
  if (phase_ == Phase::kClosing || phase_ == Phase::kClosed) return;
  const bool wasAttached = attached();
  detachReason_ = reason;
  phase_ = Phase::kClosing;  // first: aborted streams call back into streamFinished
  abortStreams(code == ws::kCloseServiceRestart ? bridge::ResetReason::kShuttingDown
                                                : bridge::ResetReason::kUnspecified,
               false);
  const auto body = ws::buildClose(code, text.substr(0, std::min<size_t>(text.size(), 120)));
  transport_.sendPlain(body);
  heartbeat_.cancel();
  stall_.cancel();
  if (wasAttached) relay_.bridgeDetached(this, reason);
  if (readPaused_) {
    readPaused_ = false;
    transport_.resumeReading();
  }
  context_.wheel.schedule(closeWait_, context_.nowMs(), kBridgeCloseWaitMs);
}

void BridgeSession::onCloseWait(TimerEntry*, void* owner) {
  static_cast<BridgeSession*>(owner)->finishClose();
}

void BridgeSession::finishClose() {
  if (phase_ == Phase::kClosed) return;
  if (phase_ != Phase::kClosing) close(ws::kCloseGoingAway, detachReason_);
  phase_ = Phase::kClosed;
  closeWait_.cancel();
  transport_.closeTransport(false);
}

void BridgeSession::onTransportLost() {
  if (phase_ == Phase::kClosed) return;
  if (phase_ != Phase::kClosing) {
    const bool wasAttached = attached();
    detachReason_ = DetachOutcome::kDrop;
    phase_ = Phase::kClosed;
    abortStreams(bridge::ResetReason::kUnspecified, false);
    if (wasAttached) relay_.bridgeDetached(this, DetachOutcome::kDrop);
  }
  phase_ = Phase::kClosed;
  heartbeat_.cancel();
  stall_.cancel();
  closeWait_.cancel();
}

}  // namespace ot::relayd
