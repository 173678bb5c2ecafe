// What relayd knows about a tunnel's health (docs/pools-status.md): the `status` reports the
// origins' otunnels send over their bridges, kept per tunnel and origin (the newest wins), and
// the reply to controld's TunnelStatusQuery, which puts next to them what relayd sees itself: the
// bridges attached here per origin and profile and their open streams.
//
// Memory is bounded: one report per (tunnel, origin) with a bridge here that sent one, so never
// more than the bridges, and at most `maxEntries` (the relay passes its connection cap; a report
// for a new origin beyond it is dropped and counted), each report bounded by the message limits
// (bridge_control.h). A report goes when the last bridge of its origin that sent one detaches.
//
// Reports arrive once a minute from every bridge (otunnel's refresh), so the lookup is a hash
// over (tunnel, origin) without copying either, and a report whose text is the stored one's
// (the refresh, and the same report on the origin's other links) only has the stored one's age
// reset (touch), without being parsed again. A bridge keeps a pointer to the entry its reports
// went to (`known`), so its refreshes after the first find the entry without the hash lookup,
// whose misses (the bucket, the nodes, their keys' strings) were most of a refresh's cost with
// tens of thousands of idle bridges. Pure: no I/O, time is passed in. Loop thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/bridge_control.h"
#include "opentunnel/control/v1/control.pb.h"

namespace ot::relayd {

// The bound when none is given (tests); relayd passes its connection cap.
inline constexpr size_t kMaxStatusEntries = 4096;

// An origin's kept report. A bridge that sent it may hold a pointer to it: the entry stays while
// any bridge that sent it is attached (forget), and entries never move (a node-based map).
struct StatusEntry {
  bridge::StatusReport report;
  std::string text;  // what it was parsed from
  uint64_t receivedAtMs = 0;
  std::vector<uint64_t> senders;  // bridges of the origin that sent a report
};

// One attached bridge as the reply counts it.
struct StatusBridge {
  std::string origin;
  std::string profile;
  uint32_t profileIndex = 0;
  uint32_t streams = 0;
};

class StatusStore {
 public:
  explicit StatusStore(size_t maxEntries = kMaxStatusEntries) : maxEntries_(maxEntries) {}

  // `known`, where given, is the bridge's own pointer to the entry its reports went to: nullptr
  // until the store sets it (record, or a touch that took), then used instead of a lookup until
  // forget clears it. The bridge's tunnel and origin must not change in between.

  // A bridge of tunnel/origin sent `report`. false when dropped (the store is full).
  // `text` is the message it was parsed from.
  bool record(const std::string& tunnelId, const std::string& origin, uint64_t bridgeKey,
              bridge::StatusReport report, std::string_view text, uint64_t nowMs,
              StatusEntry** known = nullptr);
  // A bridge of tunnel/origin sent `text`: when it is the text of the stored report, that report
  // counts as received now from this bridge too (true). false otherwise: parse it and record().
  bool touch(const std::string& tunnelId, const std::string& origin, uint64_t bridgeKey,
             std::string_view text, uint64_t nowMs, StatusEntry** known = nullptr);
  // The bridge detached: its origin's report goes once no bridge that sent one is left.
  void forget(const std::string& tunnelId, const std::string& origin, uint64_t bridgeKey,
              StatusEntry** known = nullptr);

  // The reply for a tunnel, from its bridges attached here and the stored reports.
  [[nodiscard]] opentunnel::control::v1::TunnelStatusReply reply(
      const std::string& tunnelId, const std::vector<StatusBridge>& bridges, uint64_t nowMs) const;

  [[nodiscard]] size_t size() const { return entries_.size(); }
  [[nodiscard]] uint64_t dropped() const { return dropped_; }

 private:
  using Entry = StatusEntry;
  using Key = std::pair<std::string, std::string>;  // tunnel, origin
  using KeyView = std::pair<std::string_view, std::string_view>;
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(const KeyView& key) const noexcept;
    size_t operator()(const Key& key) const noexcept { return (*this)(KeyView(key)); }
  };
  struct KeyEqual {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const noexcept {
      return std::string_view(a.first) == std::string_view(b.first) &&
             std::string_view(a.second) == std::string_view(b.second);
    }
  };
  static void addSender(Entry& entry, uint64_t bridgeKey);

  std::unordered_map<Key, Entry, KeyHash, KeyEqual> entries_;
  size_t maxEntries_;
  uint64_t dropped_ = 0;
};

}  // namespace ot::relayd
