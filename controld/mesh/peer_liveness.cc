#include "controld/mesh/peer_liveness.h"

#include <algorithm>

namespace ot::mesh {

std::string_view aliveCheckResultName(AliveCheckResult result) {
  switch (result) {
    case AliveCheckResult::kServing:
      return "serving";
    case AliveCheckResult::kControlDown:
      return "control_down";
    case AliveCheckResult::kDraining:
      return "draining";
    case AliveCheckResult::kRefused:
      return "refused";
    case AliveCheckResult::kClosed:
      return "closed";
    case AliveCheckResult::kBadAnswer:
      return "bad_answer";
    case AliveCheckResult::kTimeout:
      return "timeout";
  }
  return "closed";
}

bool keepsHold(AliveCheckResult result) {
  return result == AliveCheckResult::kServing || result == AliveCheckResult::kControlDown;
}

bool lostLink(std::string_view closeReason) {
  return closeReason == "closed" || closeReason == "read_error" || closeReason == "write_error" ||
         closeReason == "dead" || closeReason == "too_far_behind";
}

void PeerLiveness::hold(const std::string& machine, const std::string& address, int64_t lastHeardMs,
                        int64_t nowMs) {
  auto [found, inserted] = held_.try_emplace(machine);
  Held& held = found->second;
  held.address = address;
  if (!inserted) return;
  held.holdStartMs = nowMs;
  // A link declared dead was silent for MESH_DEAD_MS already: its relayd gets one ping interval to
  // answer, so a frozen machine goes soon after its link; a link that closed gets the dead time.
  held.deadlineMs = std::max(lastHeardMs + times_.deadMs, nowMs + times_.pingMs);
  held.nextAskMs = nowMs;
}

bool PeerLiveness::release(const std::string& machine) {
  return held_.erase(machine) > 0;
}

std::vector<PeerLiveness::Ask> PeerLiveness::dueAsks(int64_t nowMs) {
  std::vector<Ask> due;
  for (auto& [machine, held] : held_) {
    if (held.asking || nowMs < held.nextAskMs) continue;
    held.asking = true;
    held.askedAtMs = nowMs;
    const int64_t until = std::min(held.deadlineMs, holdEndMs(held));
    due.push_back({machine, held.address, std::max<int64_t>(1, until - nowMs)});
  }
  return due;
}

PeerLiveness::Verdict PeerLiveness::answered(const std::string& machine, AliveCheckResult result,
                                             int64_t nowMs) {
  auto found = held_.find(machine);
  if (found == held_.end() || !found->second.asking) return Verdict::kUnknown;
  Held& held = found->second;
  held.asking = false;
  if (!keepsHold(result) || nowMs >= holdEndMs(held)) {
    held_.erase(found);
    return Verdict::kDrop;
  }
  held.deadlineMs = nowMs + times_.deadMs;
  held.nextAskMs = std::max(nowMs, held.askedAtMs + times_.pingMs);
  return Verdict::kKeep;
}

std::vector<PeerLiveness::Expired> PeerLiveness::expire(int64_t nowMs) {
  std::vector<Expired> expired;
  for (auto it = held_.begin(); it != held_.end();) {
    const Held& held = it->second;
    if (nowMs >= holdEndMs(held)) {
      expired.push_back({it->first, "hold_expired"});
    } else if (nowMs >= held.deadlineMs) {
      expired.push_back({it->first, "timeout"});
    } else {
      ++it;
      continue;
    }
    it = held_.erase(it);
  }
  return expired;
}

bool PeerLiveness::asking(const std::string& machine) const {
  auto found = held_.find(machine);
  return found != held_.end() && found->second.asking;
}

std::vector<std::string> PeerLiveness::heldMachines() const {
  std::vector<std::string> machines;
  machines.reserve(held_.size());
  for (const auto& [machine, held] : held_) machines.push_back(machine);
  return machines;
}

}  // namespace ot::mesh
