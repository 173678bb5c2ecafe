// BridgeClient's part in the fairness between a bridge's streams (issue 12 item 5; protocol.md
// section 7, "Fairness"): it tells StreamScheduler which stream had data when, hands the streams
// their in-flight allowances (scaled by the bridge's min_rtt), and wakes streams held back by an
// allowance once the activity behind it has ended, so that a stream left alone gets its whole
// window back without waiting for the relay's next grant (which a stalled visitor never sends).
#include <algorithm>
#include <vector>

#include "client/bridge_client.h"
#include "client/local_stream.h"

namespace ot::client {

void BridgeClient::onStreamActive(uint32_t connId) {
  scheduler_.noteActive(connId, uv_now(loop_));
}

size_t BridgeClient::sendAllowance(uint32_t connId, size_t window) const {
  if (transport_ == nullptr) return window;
  const uint64_t now = uv_now(loop_);
  if (!scheduler_.othersActive(connId, now)) return window;  // no TCP_INFO read when alone
  armAllowanceRecheck(connId, now);
  return scheduler_.sendAllowance(connId, window, now, transport_->minRttUs(now));
}

size_t BridgeClient::receiveAllowance(uint32_t connId, size_t window) const {
  if (transport_ == nullptr) return window;
  const uint64_t now = uv_now(loop_);
  if (!scheduler_.othersActive(connId, now)) return window;
  armAllowanceRecheck(connId, now);
  return scheduler_.receiveAllowance(connId, window, now, transport_->minRttUs(now));
}

void BridgeClient::armAllowanceRecheck(uint32_t connId, uint64_t nowMs) const {
  if (allowanceRecheckMs_ != 0) return;  // armed: the recheck arms the next one if still due
  allowanceRecheckMs_ = std::max(scheduler_.othersActiveUntil(connId, nowMs), nowMs + 1);
  host_.rescheduleTimer();
}

void BridgeClient::recheckAllowances() {
  allowanceRecheckMs_ = 0;
  std::vector<LocalStream*> all;
  all.reserve(streams_.size());
  for (const auto& [id, stream] : streams_) all.push_back(stream);
  for (LocalStream* stream : all) {
    if (ended_) return;
    stream->onAllowanceChanged();
  }
}

}  // namespace ot::client
