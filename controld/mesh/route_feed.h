// What relayd needs of the bridge table to forward visitors (docs/mesh.md "The control-session
// feed"), kept up to date from the table's changes and handed out as versioned deltas and
// snapshots: per (tunnel, route), every peer machine and origin holding it with its newest attach
// there (one holder per machine and origin, so relayd sees every origin of the mesh), and
// the peers with their internal address and whether a link to them is up now.
//
// The table tells the feed each change it applies (TableObserver); the mesh node tells it when a
// link to a machine comes up or ends (setLinked). Changes only mark (tunnel, route, machine) keys
// dirty; takeDelta() compares each dirty key's holder with what was last published and returns
// the difference as one delta numbered one above the last, so a burst of changes within a batch
// costs one delta, and a change undone within a batch costs nothing. No call scans the whole
// table except snapshot().
//
// Rules: a draining machine holds nothing (its bridges are kept, and come back if a new life's
// snapshot is not draining); a machine is a peer while the table holds it (from its snapshot to its
// drop), linked when setLinked says so, whatever the table holds.
//
// Pure: no I/O, no clock, no locks; the mesh node's loop thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "controld/mesh/bridge_table.h"

namespace ot::mesh {

struct FeedHolder {
  std::string tunnelId;
  std::string route;
  std::string machineId;
  int64_t attachedAtMs = 0;  // 0 in a removal
  std::string origin;        // the bridges' origin ("" for bridges attached without one)
  friend bool operator==(const FeedHolder&, const FeedHolder&) = default;
};

struct FeedPeer {
  std::string machineId;
  std::string internalAddress;
  bool linked = false;
  friend bool operator==(const FeedPeer&, const FeedPeer&) = default;
};

struct FeedDelta {
  uint64_t version = 0;
  std::vector<FeedHolder> added;               // new holders, or a holder's newest attach changed
  std::vector<FeedHolder> removed;             // attachedAtMs 0
  std::optional<std::vector<FeedPeer>> peers;  // the whole list, when it changed
};

struct FeedSnapshot {
  uint64_t version = 0;
  std::vector<FeedPeer> peers;      // sorted by machine ID
  std::vector<FeedHolder> holders;  // in no particular order
};

class RouteFeed final : public TableObserver {
 public:
  // TableObserver
  void machineCleared(const MachineLife& life) override;
  void bridgeAdded(const std::string& machineId, const BridgeEntry& bridge,
                   int64_t attachedAtMs) override;
  void bridgeRemoved(const std::string& machineId, std::string_view bridgeId) override;
  void machineDraining(const std::string& machineId, bool draining) override;
  void machineDropped(const std::string& machineId) override;

  // A link to `machineId` is up (true) or ended (false).
  void setLinked(const std::string& machineId, bool linked);

  // Something changed since the last takeDelta (it may still cancel out).
  [[nodiscard]] bool pending() const { return peersDirty_ || !dirty_.empty(); }
  // The published state's difference with the current one, numbered version() + 1; nullopt (and
  // the version unchanged) when nothing differs.
  [[nodiscard]] std::optional<FeedDelta> takeDelta();
  // The published state at version(): call takeDelta first so it is also the current one.
  [[nodiscard]] FeedSnapshot snapshot() const;

  [[nodiscard]] uint64_t version() const { return version_; }
  [[nodiscard]] size_t holderCount() const { return published_.size(); }

 private:
  struct Bridge {
    std::string tunnelId;
    std::vector<std::string> routes;  // deduplicated
    int64_t attachedAtMs = 0;
    std::string origin;
  };
  struct Machine {
    std::string internalAddress;
    bool draining = false;
    std::unordered_map<std::string, Bridge> bridges;  // bridge ID -> bridge
  };

  void addTimes(const std::string& machineId, const Bridge& bridge);
  void removeTimes(const std::string& machineId, const Bridge& bridge);
  void markMachineDirty(const std::string& machineId, const Machine& machine);
  [[nodiscard]] std::vector<FeedPeer> currentPeers() const;

  std::unordered_map<std::string, Machine> machines_;  // as the table holds them
  std::set<std::string> linked_;
  // key (tunnel '\0' route '\0' machine '\0' origin) -> the attach times of that machine's bridges
  // on it
  std::unordered_map<std::string, std::vector<int64_t>> times_;
  // key -> the newest attach as last published
  std::unordered_map<std::string, int64_t> published_;
  std::unordered_set<std::string> dirty_;
  std::vector<FeedPeer> publishedPeers_;
  bool peersDirty_ = false;
  uint64_t version_ = 0;
};

}  // namespace ot::mesh
