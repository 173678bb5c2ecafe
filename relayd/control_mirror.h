// The pure state behind relayd's control session (relayd/control_client.h): the mirror of the
// attached bridges that every (re)connect reports as a snapshot, the per-tunnel usage summed
// between two Counters messages, and the backoff between session attempts. No I/O and no locking:
// ControlClient keeps the mirror on its loop thread (snapshots are copied there and handed to the
// session thread) and guards the usage tally with its mutex. Also how the writer packs what it
// took from the outbox into RelayBatch messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "opentunnel/control/v1/control.pb.h"

namespace ot::relayd {

namespace v1 = ::opentunnel::control::v1;

// The bridges attached right now, by bridge_id: hashed, so an attach or detach costs the same at
// 20 bridges as at 100,000 (an ordered map cost a chain of string compares on cold nodes). A
// snapshot, taken once per session, sorts by bridge_id so that it stays deterministic. Each
// bridge is kept as its serialized message (one block of ~60-100 bytes) rather than a v1::Bridge
// (the message and a heap string per field: ~300 bytes more per idle bridge); a snapshot parses
// them back.
class BridgeMirror {
 public:
  static constexpr size_t kMaxBridgesPerPart = 1000;

  // Inserts or replaces the bridge with that bridge_id (moved in: the caller's copy is not kept).
  void attached(v1::Bridge bridge);
  // False when no such bridge was held.
  bool detached(const std::string& bridgeId);

  // The BridgeSnapshot messages for exactly the bridges held now: parts of at most
  // `maxPerPart` bridges (0 counts as 1), `last` set on the final one. No bridges: one empty part
  // with `last`.
  [[nodiscard]] std::vector<v1::RelayMessage> snapshot(
      size_t maxPerPart = kMaxBridgesPerPart) const;

  [[nodiscard]] size_t size() const { return bridges_.size(); }
  [[nodiscard]] bool contains(const std::string& bridgeId) const {
    return bridges_.contains(bridgeId);
  }

 private:
  using Entries =
      std::unordered_map<std::string, std::string>;  // bridge_id -> the rest, serialized
  Entries bridges_;
};

// Usage summed per tunnel until it is taken into a Counters message, and split per named origin
// (TunnelCounters.origins; docs/pools-usage.md). Bounded by the number of tunnels that had
// traffic since the last report, times kMaxOriginsPerTunnel origins each.
class UsageTally {
 public:
  // Origins kept per tunnel and interval (controld allows as many per tunnel). Usage of further
  // origins in the same interval counts in the tunnel's totals only.
  static constexpr size_t kMaxOriginsPerTunnel = 32;

  // All-zero usage adds nothing (no entry for the tunnel). `origin` empty (an unnamed bridge,
  // or a rejected visitor): the tunnel's totals only; named: its totals and that origin's share.
  void add(const std::string& tunnelId, uint64_t bytesIn, uint64_t bytesOut, uint64_t connections,
           uint64_t rejected, const std::string& origin = {});
  // Adds back a Counters that could not be sent, so its usage goes out with the next one.
  void restore(const v1::Counters& counters);

  // A Counters message with one entry per tunnel that had usage (in tunnel_id order, origins by
  // name), and clears the tally; nullopt (and nothing cleared) when there is no usage.
  [[nodiscard]] std::optional<v1::RelayMessage> take(int64_t intervalStartUnixMs,
                                                     int64_t intervalEndUnixMs);

  [[nodiscard]] bool empty() const { return tunnels_.empty(); }
  [[nodiscard]] size_t size() const { return tunnels_.size(); }

 private:
  std::map<std::string, v1::TunnelCounters> tunnels_;
};

// Waits between session attempts: starts at initialMs, doubles after each attempt up to maxMs;
// each wait is drawn in [step/2, step] so that restarts do not retry in lockstep.
class ReconnectBackoff {
 public:
  ReconnectBackoff(uint64_t initialMs, uint64_t maxMs);

  // The next wait; `unit` in [0, 1] is the jitter draw (injected for tests).
  [[nodiscard]] uint64_t next(double unit);
  // After an accepted session: the next failure waits initialMs again.
  void reset() { step_ = initialMs_; }
  [[nodiscard]] uint64_t step() const { return step_; }

 private:
  uint64_t initialMs_;
  uint64_t maxMs_;
  uint64_t step_;
};

// The messages the writer took from the outbox, in order, packed for a controld that reads
// RelayBatch: consecutive messages go into one RelayBatch of at most maxMessages messages and
// about maxBytes serialized (a message larger than that alone still goes, alone); a group of one
// stays the message itself. Without batches (`batches` false) the messages are returned as they
// are.
[[nodiscard]] std::vector<v1::RelayMessage> packRelayBatches(std::deque<v1::RelayMessage> messages,
                                                             bool batches, size_t maxMessages,
                                                             size_t maxBytes);

}  // namespace ot::relayd
