// BridgeSession's output: frames to the client (batched into one transport write where several
// go together: an `open` and its ClientHello, the data frames of one visitor read), pongs, and
// the socket watermarks that pause and resume the visitors. Input and flow control are in
// bridge_session.cc.
#include <algorithm>
#include <span>
#include <vector>

#include "relayd/bridge_session.h"

namespace ot::relayd {

namespace {

void appendFrame(std::vector<uint8_t>& out, ws::Opcode opcode, std::span<const uint8_t> head,
                 std::span<const uint8_t> payload) {
  const auto header = ws::encodeFrameHeader(opcode, true, head.size() + payload.size());
  out.insert(out.end(), header.view().begin(), header.view().end());
  out.insert(out.end(), head.begin(), head.end());
  out.insert(out.end(), payload.begin(), payload.end());
}

}  // namespace

void BridgeSession::sendFrame(ws::Opcode opcode, std::span<const uint8_t> head,
                              std::span<const uint8_t> payload) {
  std::vector<uint8_t> local;
  const bool own = beginBatch(local);
  appendFrame(*batch_, opcode, head, payload);
  endBatch(local, own);
}

bool BridgeSession::beginBatch(std::vector<uint8_t>& local) {
  if (batch_ != nullptr) return false;
  local = std::move(context_.frameScratch);  // one buffer for the whole loop, reused
  local.clear();
  batch_ = &local;
  return true;
}

void BridgeSession::endBatch(std::vector<uint8_t>& local, bool own) {
  if (!own) return;
  batch_ = nullptr;
  if (!local.empty()) transport_.sendPlain(local);  // encrypted (copied) by TLS when this returns
  context_.frameScratch = std::move(local);
}

void BridgeSession::sendText(const std::string& text) {
  sendFrame(ws::Opcode::kText, {},
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

void BridgeSession::sendStreamFrame(std::vector<uint8_t> frame) {
  sendFrame(ws::Opcode::kBinary, {}, frame);
}

void BridgeSession::sendData(uint32_t connId, std::span<const uint8_t> payload) {
  if (closed()) return;
  const auto head = bridge::encodeFrameHeader(bridge::FrameKind::kData, connId);
  std::vector<uint8_t> local;
  const bool own = beginBatch(local);
  while (!payload.empty()) {
    const size_t size = std::min(payload.size(), bridge::kMaxDataPayload);
    appendFrame(*batch_, ws::Opcode::kBinary, head, payload.first(size));
    payload = payload.subspan(size);
  }
  endBatch(local, own);
  if (!visitorsPaused_ && transport_.queuedBytes() > kBridgeSocketHighMark) {
    visitorsPaused_ = true;
    for (auto& [id, entry] : streams_) entry.visitor->pauseForBridge();
  }
}

void BridgeSession::sendEnd(uint32_t connId) {
  if (!closed()) sendStreamFrame(bridge::encodeEnd(connId));
}

void BridgeSession::sendReset(uint32_t connId, bridge::ResetReason reason) {
  if (!closed()) sendStreamFrame(bridge::encodeReset(connId, reason));
}

void BridgeSession::sendCredit(uint32_t connId, uint32_t increment) {
  if (closed()) return;
  auto it = streams_.find(connId);
  if (it == streams_.end()) return;
  if (it->second.receiveCredit.grant(increment) != bridge::CreditStatus::kOk) return;
  sendStreamFrame(bridge::encodeCredit(connId, increment));
}

void BridgeSession::sendPendingPong() {
  if (!pongWanted_ || closed() || transport_.bytesWritten() < pongQueuedEnd_) return;
  pongWanted_ = false;
  sendFrame(ws::Opcode::kPong, {}, pongPayload_);
  pongPayload_.clear();
  pongQueuedEnd_ = transport_.bytesWritten() + transport_.queuedBytes();
}

void BridgeSession::onTransportWritten() {
  sendPendingPong();
  if (visitorsPaused_ && transport_.queuedBytes() <= kBridgeSocketLowMark) {
    visitorsPaused_ = false;
    for (auto& [id, entry] : streams_) entry.visitor->resumeFromBridge();
  }
}

}  // namespace ot::relayd
