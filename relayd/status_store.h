// What relayd knows about a tunnel's health (docs/pools-status.md): the `status` reports the
// origins' otunnels send over their bridges, kept per tunnel and origin (the newest wins), and
// the reply to controld's TunnelStatusQuery, which puts next to them what relayd sees itself: the
// bridges attached here per origin and profile and their open streams.
//
// Memory is bounded: one report per (tunnel, origin) with a bridge here that sent one, at most
// kMaxStatusEntries of them (a report for a new origin beyond that is dropped and counted), each
// report bounded by the message limits (bridge_control.h). A report goes when the last bridge of
// its origin that sent one detaches. Pure: no I/O, time is passed in. Loop thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/bridge_control.h"
#include "opentunnel/control/v1/control.pb.h"

namespace ot::relayd {

inline constexpr size_t kMaxStatusEntries = 4096;

// One attached bridge as the reply counts it.
struct StatusBridge {
  std::string origin;
  std::string profile;
  uint32_t profileIndex = 0;
  uint32_t streams = 0;
};

class StatusStore {
 public:
  // A bridge of tunnel/origin sent `report`. false when dropped (the store is full).
  bool record(const std::string& tunnelId, const std::string& origin, uint64_t bridgeKey,
              bridge::StatusReport report, uint64_t nowMs);
  // The bridge detached: its origin's report goes once no bridge that sent one is left.
  void forget(const std::string& tunnelId, const std::string& origin, uint64_t bridgeKey);

  // The reply for a tunnel, from its bridges attached here and the stored reports.
  [[nodiscard]] opentunnel::control::v1::TunnelStatusReply reply(
      const std::string& tunnelId, const std::vector<StatusBridge>& bridges, uint64_t nowMs) const;

  [[nodiscard]] size_t size() const { return entries_.size(); }
  [[nodiscard]] uint64_t dropped() const { return dropped_; }

 private:
  struct Entry {
    bridge::StatusReport report;
    uint64_t receivedAtMs = 0;
    std::vector<uint64_t> senders;  // bridges of the origin that sent a report
  };
  using Key = std::pair<std::string, std::string>;  // tunnel, origin
  std::map<Key, Entry> entries_;
  uint64_t dropped_ = 0;
};

}  // namespace ot::relayd
