// BridgeSession's input (attach, stream frames) and flow control (the streams, the visitors'
// budget, stalls). Output is in bridge_session_output.cc; liveness, drain and close in
// bridge_session_close.cc.
#include "relayd/bridge_session.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "common/prefetch.h"

namespace ot::relayd {

namespace {

const log::Logger kBridgeSessionLog("relayd.bridge");

// Relay -> client ids stop before wrapping: a bridge that used them all is drained.
constexpr uint32_t kLastConnId = 0xFFFFFFF0u;

}  // namespace

BridgeSession::BridgeSession(RelayContext& context, RelayForBridge& relay,
                             BridgeTransport& transport, std::string tunnelId)
    : context_(context),
      relay_(relay),
      transport_(transport),
      tunnelId_(std::move(tunnelId)),
      key_(0),
      reader_(ws::Role::kServer, bridge::kMaxMessageBeforeAttach, ws::Delivery::kWholeView),
      heartbeat_(&BridgeSession::onHeartbeat, this, &BridgeSession::prefetchHeartbeat),
      stall_(&BridgeSession::onStall, this),
      closeWait_(&BridgeSession::onCloseWait, this) {
  key_ = relay_.registerBridge(this);
  lastHeardMs_ = context_.nowMs();
  // Until attach arrives the heartbeat entry is the attach deadline.
  context_.wheel.schedule(heartbeat_, context_.nowMs(), kBridgeAttachTimeoutMs);
}

BridgeSession::~BridgeSession() {
  context_.stopWaitingForBufferRoom(this);
  if (phase_ != Phase::kClosed) {
    const bool wasAttached = attached();
    phase_ = Phase::kClosed;
    abortStreams(bridge::ResetReason::kUnspecified, false);
    if (wasAttached) relay_.bridgeDetached(this, detachReason_);
  }
  relay_.unregisterBridge(key_);
}

// ---------------------------------------------------------------------------------------------
// Input

void BridgeSession::prefetchForRead() const {
  prefetchLine(this);
  prefetchLine(&phase_);
  prefetchLine(&reader_);
  prefetchLine(&lastHeardMs_);
}

void BridgeSession::onPlaintext(std::span<uint8_t> bytes) {
  // An outer call's frames (attachAllowed replays deferred input from inside one) go first.
  flushGather();
  Gather gather;
  Gather* outer = std::exchange(gather_, &gather);
  readInput(bytes);
  flushGather();
  gather_ = outer;
}

void BridgeSession::flushGather() {
  if (gather_ == nullptr || gather_->count == 0) return;
  StreamForBridge* visitor = gather_->visitor;
  const size_t count = std::exchange(gather_->count, 0);
  if (!closed()) {  // else its streams were aborted
    visitor->deliverAll(std::span<const std::span<const uint8_t>>(gather_->payloads.data(), count));
  }
  checkBudgets();
}

void BridgeSession::readInput(std::span<uint8_t> bytes) {
  if (closed() && phase_ != Phase::kClosing) return;
  lastHeardMs_ = context_.nowMs();
  pingOutstanding_ = false;
  if (phase_ == Phase::kAuthorizing) {
    deferredInput_.insert(deferredInput_.end(), bytes.begin(), bytes.end());
    return;
  }
  while (!bytes.empty()) {
    if (phase_ == Phase::kClosed || phase_ == Phase::kAuthorizing) break;
    ws::ReadStep step = reader_.next(bytes);
    bytes = bytes.subspan(step.consumed);
    if (step.event == ws::ReadEvent::kNeedMore) break;
    if (step.event != ws::ReadEvent::kMessage || step.opcode != ws::Opcode::kBinary) {
      flushGather();  // a data frame's stream hears of it before anything that follows
    }
    if (step.event == ws::ReadEvent::kError) {
      kBridgeSessionLog.debug("bridge protocol error",
                              {{"bridge", bridgeId_}, {"error", ws::errorName(step.error)}});
      if (step.error == ws::Error::kTooManyFragments)
        context_.metrics.bridgeFragmentLimit.Increment();
      close(ws::closeCodeFor(step.error), DetachOutcome::kServerClose,
            std::string(ws::errorName(step.error)));
      return;
    }
    handleMessage(step);
  }
  if (phase_ == Phase::kAuthorizing && !bytes.empty()) {
    deferredInput_.insert(deferredInput_.end(), bytes.begin(), bytes.end());
  }
  sendPendingPong();  // one pong for the pings of this read
}

void BridgeSession::handleMessage(ws::ReadStep& step) {
  if (step.event == ws::ReadEvent::kControl) {
    if (step.opcode == ws::Opcode::kPing) {
      if (phase_ != Phase::kClosing) {
        pongPayload_ = std::move(step.payload);
        pongWanted_ = true;
      }
    } else if (step.opcode == ws::Opcode::kClose) {
      if (phase_ == Phase::kClosing) {
        finishClose();  // the answer to our close
      } else {
        // The client closes: echo its code and go.
        const uint16_t code =
            step.closeCode == ws::kCloseNoStatus ? ws::kCloseNormal : step.closeCode;
        close(code, DetachOutcome::kClientClose);
        finishClose();
      }
    }
    return;
  }
  if (step.event != ws::ReadEvent::kMessage || phase_ == Phase::kClosing) return;
  if (step.opcode == ws::Opcode::kText) {
    if (phase_ == Phase::kAwaitAttach) {
      const std::span<const uint8_t> text = step.message();
      handleAttach(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()));
    }
    // Text after attach: a `status` report is kept, anything else ignored (protocol.md 4.5).
    if (phase_ == Phase::kAttached) {
      const std::span<const uint8_t> text = step.message();
      relay_.bridgeStatus(
          this, std::string_view(reinterpret_cast<const char*>(text.data()), text.size()));
    }
    return;
  }
  if (phase_ == Phase::kAwaitAttach) {
    protocolError("binary message before attach");
    return;
  }
  // Often in place in the decrypted record: written to the visitor from there.
  if (step.payload.empty() || gather_ == nullptr) {
    handleFrame(step.message(), step.payload.empty());
    return;
  }
  // Collected across two reads: kept alive in the gather, so it goes out in the same write as
  // the frames that follow it in this read.
  flushGather();  // nothing gathered may point into the message it replaces
  gather_->owned = std::move(step.payload);
  handleFrame(gather_->owned, true);
}

void BridgeSession::handleAttach(std::string_view text) {
  auto parsed = bridge::parseClientMessage(text);
  if (!parsed.ok()) {
    const auto& error = parsed.error();
    AttachOutcome outcome = AttachOutcome::kError;
    if (error.code == bridge::AttachErrorCode::kTooManyRoutes)
      outcome = AttachOutcome::kTooManyRoutes;
    if (error.code == bridge::AttachErrorCode::kInvalidRoute)
      outcome = AttachOutcome::kInvalidRoute;
    if (error.code == bridge::AttachErrorCode::kBadToken) outcome = AttachOutcome::kBadToken;
    context_.metrics.attach(outcome);
    attachRefused(error.code,
                  error.message.empty() ? std::string(bridge::attachErrorCodeName(error.code))
                                        : error.message,
                  error.closeCode);
    return;
  }
  attach_ = std::move(parsed).value();
  bridgeId_ = relay_.newBridgeId(key_);
  phase_ = Phase::kAuthorizing;
  transport_.pauseReading();
  relay_.authorizeAttach(this);
}

void BridgeSession::attachAllowed(uint32_t maxConns) {
  if (phase_ != Phase::kAuthorizing) return;
  maxConns_ = maxConns;
  if (context_.draining) {
    phase_ = Phase::kAwaitAttach;
    sendText(bridge::serializeDrain());
    close(ws::kCloseServiceRestart, DetachOutcome::kDrain);
    return;
  }
  phase_ = Phase::kAttached;
  attachedAtUnixMs_ = static_cast<uint64_t>(unixNowMs());
  bridge::Attached attached;
  attached.bridgeId = bridgeId_;
  attached.limits.maxConns = maxConns;
  attached.heartbeatMs = static_cast<uint32_t>(context_.config.bridgeHeartbeatMs);
  attached.protocol = bridge::kBridgeProtocolVersion;
  sendText(bridge::serializeAttached(attached));
  reader_.setMaxMessageSize(bridge::kMaxMessageAfterAttach);
  context_.metrics.attach(AttachOutcome::kOk);
  transport_.setIdleReads(true);  // no stream yet
  relay_.bridgeAttached(this);
  // What an attached bridge no longer needs: the token (authorized) and the route error.
  std::string().swap(attach_.token);
  std::string().swap(attach_.routeError);
  scheduleHeartbeat();
  transport_.resumeReading();
  if (!deferredInput_.empty()) {
    std::vector<uint8_t> pending;
    pending.swap(deferredInput_);
    onPlaintext(pending);
  }
}

void BridgeSession::attachRefused(bridge::AttachErrorCode code, const std::string& message,
                                  uint16_t closeCode) {
  if (phase_ != Phase::kAuthorizing && phase_ != Phase::kAwaitAttach) return;
  phase_ = Phase::kAwaitAttach;  // not attached: nothing to report as a detach
  if (code == bridge::AttachErrorCode::kBadToken) relay_.attachFailed(*this);
  bridge::AttachError error;
  error.code = code;
  error.message = message;
  sendText(bridge::serializeAttachError(error));
  if (closeCode == 0) closeCode = bridge::closeCodeFor(code);
  close(closeCode, DetachOutcome::kServerClose, std::string(bridge::attachErrorCodeName(code)));
  transport_.resumeReading();  // to read the client's close answer
}

void BridgeSession::handleFrame(std::span<const uint8_t> message, bool inPlace) {
  auto decoded = bridge::decodeFrame(message);
  const bool gathers = inPlace && gather_ != nullptr && decoded.ok() &&
                       decoded.value().kind == bridge::FrameKind::kData;
  if (!gathers) flushGather();
  if (!decoded.ok()) {
    protocolError(std::string(bridge::frameErrorName(decoded.error())).c_str());
    return;
  }
  const bridge::Frame& frame = decoded.value();
  if (frame.kind == bridge::FrameKind::kOpen) {
    protocolError("open from the client");
    return;
  }
  auto it = streams_.find(frame.connId);
  if (it == streams_.end()) {
    // Above every id opened: never used (protocol error); otherwise closed here: ignore.
    if (frame.connId >= nextConnId_) protocolError("frame for an unused connection");
    return;
  }
  StreamEntry& entry = it->second;
  switch (frame.kind) {
    case bridge::FrameKind::kData: {
      if (gathers && gather_->count > 0 && gather_->visitor != entry.visitor) flushGather();
      if (entry.clientEnded) {
        protocolError("data after end");
        return;
      }
      if (entry.receiveCredit.consume(frame.payload.size()) != bridge::CreditStatus::kOk) {
        protocolError("flow-control violation");
        return;
      }
      if (gathers) {
        Gather& gather = *gather_;
        if (gather.count == gather.payloads.size()) flushGather();
        gather.visitor = entry.visitor;
        gather.payloads[gather.count++] = frame.payload;
        return;
      }
      entry.visitor->deliver(frame.payload);
      checkBudgets();
      return;
    }
    case bridge::FrameKind::kEnd:
      if (entry.clientEnded) {
        protocolError("end after end");
        return;
      }
      entry.clientEnded = true;
      entry.visitor->peerEnded();
      return;
    case bridge::FrameKind::kReset:
      entry.visitor->peerReset();  // calls streamFinished
      return;
    case bridge::FrameKind::kCredit: {
      // The visitor holds the send ledger (credit for an ended direction is harmless).
      if (!entry.visitor->addSendCredit(frame.increment)) protocolError("credit past 2^31 - 1");
      return;
    }
    case bridge::FrameKind::kOpen:
      return;
  }
}

void BridgeSession::protocolError(const char* what) {
  flushGather();  // what the client sent before the error still reaches its visitors
  kBridgeSessionLog.info("bridge protocol error", {{"bridge", bridgeId_}, {"error", what}});
  close(ws::kCloseProtocolError, DetachOutcome::kServerClose, what);
}

// ---------------------------------------------------------------------------------------------
// Streams

bool BridgeSession::openStream(StreamForBridge* visitor, const std::string& route,
                               const std::string& visitorAddress, std::vector<uint8_t> hello) {
  if (phase_ != Phase::kAttached || nextConnId_ >= kLastConnId) return false;
  auto open = bridge::encodeOpen(nextConnId_, route, visitorAddress);
  if (!open) open = bridge::encodeOpen(nextConnId_, route, "");
  if (!open) return false;
  const uint32_t connId = nextConnId_++;
  // `open` and the ClientHello's data frame in one write.
  std::vector<uint8_t> local;
  const bool own = beginBatch(local);
  sendStreamFrame(std::move(*open));
  streams_.emplace(connId, StreamEntry{visitor, bridge::StreamCredit(bridge::kRelayWindow), false});
  if (streams_.size() == 1) transport_.setIdleReads(false);  // a stream's data: libuv's reads
  if (visitorsPaused_) visitor->pauseForBridge();
  visitor->start(this, connId, std::move(hello));
  endBatch(local, own);
  return true;
}

void BridgeSession::streamFinished(StreamForBridge* visitor, uint64_t bytesIn, uint64_t bytesOut) {
  auto it = streams_.find(visitor->connId());
  if (it == streams_.end() || it->second.visitor != visitor) return;
  streams_.erase(it);
  if (streams_.empty() && phase_ == Phase::kAttached) transport_.setIdleReads(true);
  stallAcked_.erase(visitor->connId());
  relay_.streamClosed(tunnelId_, key_, attach_.origin, bytesIn, bytesOut);
  checkBudgets();
  if (phase_ == Phase::kDraining && streams_.empty())
    close(ws::kCloseServiceRestart, DetachOutcome::kDrain);
}

void BridgeSession::visitorBuffered(int64_t delta) {
  pendingToVisitors_ += delta;
}

void BridgeSession::abortStreams(bridge::ResetReason reason, bool notifyClient) {
  std::vector<StreamForBridge*> visitors;
  visitors.reserve(streams_.size());
  for (auto& [id, entry] : streams_) visitors.push_back(entry.visitor);
  for (StreamForBridge* visitor : visitors) visitor->abort(reason, notifyClient);
  streams_.clear();
}

// Client data waits in user space for visitors; past the bridge's budget (or the machine's) stop
// reading the client, and after 5 s reset the visitors that took nothing meanwhile.
void BridgeSession::checkBudgets() {
  const bool over = pendingToVisitors_ > kBridgeVisitorBudget || context_.overBufferedLimit();
  if (over && context_.overBufferedLimit()) context_.waitForBufferRoom(this);
  if (over && !readPaused_ && attached()) {
    readPaused_ = true;
    transport_.pauseReading();
    if (!stall_.armed()) {  // a wait already running covers this pause too
      stallStartedMs_ = context_.nowMs();
      stallAcked_.clear();
      for (auto& [id, entry] : streams_) stallAcked_[id] = entry.visitor->ackedByVisitor();
      context_.wheel.schedule(stall_, context_.nowMs(), kSlowVisitorWaitMs);
    }
  } else if (!over && readPaused_) {
    // Back under budget (often because stalled visitors were reset one by one). The stall wait
    // stays armed: at its end every visitor that took nothing meanwhile is reset together, so a
    // crowd of stalled visitors costs the bridge one wait, not one per batch.
    readPaused_ = false;
    transport_.resumeReading();
  }
}

void BridgeSession::onStall(TimerEntry*, void* owner) {
  auto* self = static_cast<BridgeSession*>(owner);
  if (self->closed()) return;
  self->context_.metrics.backpressureStall.Increment();
  std::vector<StreamForBridge*> slow;
  for (auto& [id, entry] : self->streams_) {
    if (entry.visitor->pendingToVisitor() == 0) continue;
    // A visitor that arrived during the wait had less than the whole wait to take anything (a
    // new one may only hold its TLS ServerHello, written and not yet confirmed): the next wait
    // judges it, if the bridge is still over budget then.
    auto before = self->stallAcked_.find(id);
    if (before == self->stallAcked_.end()) continue;
    if (entry.visitor->tookTooLittleSince(before->second)) slow.push_back(entry.visitor);
  }
  for (StreamForBridge* visitor : slow) {
    self->context_.metrics.backpressureReset.Increment();
    visitor->abort(bridge::ResetReason::kTooSlow, true);
  }
  if (self->readPaused_) {
    self->readPaused_ = false;  // re-evaluated now
    self->transport_.resumeReading();
  }
  self->checkBudgets();
}

}  // namespace ot::relayd
