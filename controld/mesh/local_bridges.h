// This machine's own bridges as the mesh announces them (docs/mesh.md "Announcing this machine's
// bridges"): fed the changes controld's BridgeRegistry applies (relayd's session snapshot,
// attached / detached deltas, a relay dropped), it keeps what the snapshot of a new link carries
// and turns each change into the attached / detached frames numbered by this machine's sequence.
// A relay's whole set replaced becomes the difference (detached for the bridges gone, attached for
// the new or changed ones), so peers never see a bridge vanish and come back. Pure; owned by the
// mesh node's loop thread.
//
// A bridge is announced when controld authorizes it (kAuthorized), before relayd tells the client
// `attached`; it is then pending until relayd's attached report (or a session snapshot carrying
// it) confirms it, which announces nothing more. A pending bridge whose attach fails is announced
// detached: relayd's detached report, a session snapshot or a dropped relay without it, or no
// confirmation within kPendingAttachMs (expirePending).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "controld/mesh/link_frames.h"
#include "controld/relays/bridge_registry.h"

namespace ot::mesh {

struct LocalChange {
  enum class Kind : uint8_t { kReplaced, kAttached, kDetached, kDropped, kAuthorized };
  Kind kind = Kind::kAttached;
  std::string relayKey;
  std::vector<controld::BridgeEntry>
      bridges;           // kReplaced: the whole set; kAttached/kAuthorized: one
  std::string bridgeId;  // kDetached
};

// An authorized bridge not confirmed by relayd within this long is announced detached.
inline constexpr int64_t kPendingAttachMs = 10'000;

class LocalBridges {
 public:
  explicit LocalBridges(std::string machineId) : machineId_(std::move(machineId)) {}

  // The frames (Attached / Detached bodies) the change makes, numbered from sequence() + 1 on.
  // `nowMs`: a monotonic clock, for the pending bridges' bound.
  [[nodiscard]] std::vector<FrameBody> apply(const LocalChange& change, int64_t nowMs = 0);
  // Detached frames for the bridges authorized at least `boundMs` ago and never confirmed.
  [[nodiscard]] std::vector<FrameBody> expirePending(int64_t nowMs,
                                                     int64_t boundMs = kPendingAttachMs);

  // Every bridge, sorted by bridge ID, machine filled in: what a new link's snapshot carries,
  // taken at sequence().
  [[nodiscard]] std::vector<BridgeEntry> snapshot() const;
  // The tunnels with a bridge here, sorted, each once (a link-up's check for lost deletions).
  [[nodiscard]] std::vector<std::string> tunnelIds() const;
  [[nodiscard]] uint64_t sequence() const { return sequence_; }
  [[nodiscard]] size_t size() const { return bridges_.size(); }
  [[nodiscard]] size_t pending() const { return pendingCount_; }
  // The tunnel's bridges here, pending ones included (what a route check answers). A pass over
  // every bridge: route checks are rare (an attach whose routes another machine holds).
  [[nodiscard]] std::vector<BridgeEntry> bridgesOf(std::string_view tunnelId) const;

 private:
  struct Held {
    std::string relayKey;
    BridgeEntry entry;
    bool pending = false;  // authorized, not yet reported attached by relayd
    int64_t authorizedAtMs = 0;
  };

  [[nodiscard]] BridgeEntry convert(const controld::BridgeEntry& bridge) const;
  void attach(const std::string& relayKey, BridgeEntry entry, std::vector<FrameBody>& out,
              bool pending = false, int64_t nowMs = 0);
  void detach(const std::string& bridgeId, std::vector<FrameBody>& out);

  std::string machineId_;
  // bridge ID -> its relay and entry; a bridge ID is announced once, whichever relay holds it.
  std::unordered_map<std::string, Held> bridges_;
  // Pending bridges in authorization order (time, bridge ID), so the tick's expiry looks only at
  // the oldest: a pass over every bridge every tick was a tenth of a busy controld's CPU. An item
  // whose bridge was confirmed, detached or authorized again since is skipped when it comes up.
  std::deque<std::pair<int64_t, std::string>> pendingOrder_;
  size_t pendingCount_ = 0;
  uint64_t sequence_ = 0;
};

}  // namespace ot::mesh
