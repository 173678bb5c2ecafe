// The mesh's table of which other machine holds which tunnel's bridges and routes (issue 14).
//
// Each machine is the only writer of its own entries: the table holds, per peer machine, the
// entries its own link announced (a snapshot, then attached/detached deltas numbered by that
// machine's sequence), so nothing needs consensus. This machine's own bridges are NOT here: relayd
// has them (and controld's BridgeRegistry mirrors them); a visitor with a local bridge never asks
// this table, and every answer here is "another machine".
//
// Who calls it: controld's mesh link loop, one call per frame it decoded from a linked peer
// (applySnapshot once all snapshot parts of a link are in, applyAttached / applyDetached in the
// order received, setDraining on "leaving", dropMachine when the link is judged gone), and the
// attach path (routeHolders, for route checks) and the admin stats (machines). The forward path
// lives in relayd, which keeps its own copy of holder answers (see docs/mesh.md "The bridge
// table"). Pure and single-threaded: no locks, no I/O; the owner serialises calls (the link loop's
// thread). Answers are copies, valid after the table changes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "controld/mesh/mesh_types.h"
#include "controld/mesh/route_ids.h"

namespace ot::mesh {

// One bridge as a peer announces it (snapshot entry or attached delta) and as the table lists it:
// BridgeEntry (mesh_types.h), the struct the link frames decode, so a decoded snapshot goes in
// without a copy. On input its `machine` is empty or the writer's own ID.

// One life of a peer machine, from its hello.
struct MachineLife {
  std::string machineId;
  uint64_t epoch = 0;  // random per start
  int64_t startedAtMs = 0;
  std::string internalAddress;  // where forwards and route checks to its bridges go
  std::string region;
  bool draining = false;
};

[[nodiscard]] bool newerLife(const MachineLife& candidate, const MachineLife& known);

enum class TableUpdate {
  kApplied,
  kStaleLife,       // not the life the table holds for the machine (an older one): ignored
  kUnknownMachine,  // a delta or event before the machine's snapshot: the link is broken
  kSequenceGap,     // not the next number: the link loop closes the link, it comes back with a
                    // fresh snapshot
  kForeignEntry,    // an entry naming another machine, or a snapshot from this machine's own ID:
                    // refused whole, nothing changed
};

[[nodiscard]] const char* tableUpdateName(TableUpdate update);

// Where a visitor or a route check goes.
struct PeerTarget {
  std::string machineId;
  std::string internalAddress;
  int64_t attachedAtMs = 0;  // the newest matching attach on that machine (clamped, see below)
};

// A machine's row of the cluster view and its metric gauge.
struct MachineSummary {
  MachineLife life;
  uint64_t sequence = 0;  // last delta number applied
  size_t bridges = 0;
  size_t tunnels = 0;  // distinct tunnels among its bridges
  size_t routes = 0;   // distinct (tunnel, route) pairs among its bridges
};

// Told of every change the table applies, in order, on the table's thread (the mesh feed to
// relayd, route_feed.h, listens). Only applied changes are told; a refused update tells nothing.
class TableObserver {
 public:
  // A snapshot replaces the machine's entries: every bridge it held is gone, `life` is its
  // address and draining flag from now on; bridgeAdded follows for each new entry.
  virtual void machineCleared(const MachineLife& life) = 0;
  // A bridge added or announced again (the same ID replaces), with the attach time as the table
  // keeps it (clamped, see kFutureClampMs).
  virtual void bridgeAdded(const std::string& machineId, const BridgeEntry& bridge,
                           int64_t attachedAtMs) = 0;
  virtual void bridgeRemoved(const std::string& machineId, std::string_view bridgeId) = 0;
  virtual void machineDraining(const std::string& machineId, bool draining) = 0;
  virtual void machineDropped(const std::string& machineId) = 0;

 protected:
  ~TableObserver() = default;
};

class BridgeTable {
 public:
  // A peer's attached_at further than this ahead of our clock counts as our now, so a peer with a
  // fast clock (or a lying one) cannot hold the newest attach of every route forever.
  static constexpr int64_t kFutureClampMs = 5'000;

  // `selfMachineId`: this machine, whose entries never come through here. `clock`: Unix ms
  // (unixNowMs when empty).
  explicit BridgeTable(std::string selfMachineId, Clock clock = {});

  // A link's full snapshot (all its parts) replaces the machine's entries: the same life
  // reconnecting, or a newer life (later started_at, then higher epoch) replacing the previous
  // one's at once. `sequence` is the number of the last delta it includes; the next delta must be
  // sequence + 1. Also takes the life's address, region and draining flag from its hello.
  TableUpdate applySnapshot(const MachineLife& life, uint64_t sequence,
                            std::vector<BridgeEntry> bridges);
  // Deltas, in the order the link delivered them. A repeated bridge ID replaces that bridge;
  // detaching one the table does not hold only advances the sequence.
  TableUpdate applyAttached(std::string_view machineId, uint64_t epoch, uint64_t sequence,
                            const BridgeEntry& bridge);
  TableUpdate applyDetached(std::string_view machineId, uint64_t epoch, uint64_t sequence,
                            std::string_view bridgeId);
  // "leaving": its bridges stop being forward targets and route holders at once. Kept for the
  // cluster view until the machine is dropped.
  TableUpdate setDraining(std::string_view machineId, uint64_t epoch, bool draining);
  // The link closed or went silent past the dead time: everything of the machine goes at once.
  // Returns how many bridges were dropped (0 for an unknown machine).
  size_t dropMachine(std::string_view machineId);

  // The machine a visitor for (tunnel, route) is forwarded to: the newest attach among machines
  // that are not draining, ties to the lower machine ID (so every machine picks the same one).
  // `skipMachineId`: the one that answered 0 or failed, for the single retry.
  [[nodiscard]] std::optional<PeerTarget> holder(std::string_view tunnelId, std::string_view route,
                                                 std::string_view skipMachineId = {}) const;
  // Whether any machine that is not draining holds a bridge of the tunnel.
  [[nodiscard]] bool onlineElsewhere(std::string_view tunnelId) const;
  // The machines (not draining) holding any of `routes` of the tunnel: whom an attach must ask.
  [[nodiscard]] std::vector<PeerTarget> routeHolders(std::string_view tunnelId,
                                                     std::span<const std::string> routes) const;

  [[nodiscard]] std::vector<MachineSummary> machines() const;  // sorted by machine ID
  // Bridges per machine, sorted by machine ID, without machines()' distinct counts (for scrapes).
  [[nodiscard]] std::vector<std::pair<std::string, size_t>> bridgesByMachine() const;
  [[nodiscard]] std::vector<BridgeEntry> bridgesOf(std::string_view machineId) const;
  // Whether a snapshot of the machine is in (a link's first, complete snapshot, until dropped).
  [[nodiscard]] bool knowsMachine(std::string_view machineId) const {
    return machineIndex_.find(machineId) != machineIndex_.end();
  }
  [[nodiscard]] size_t bridgeCount() const { return entryCount_; }
  [[nodiscard]] size_t tunnelCount() const { return tunnelIndex_.size(); }
  [[nodiscard]] size_t routeNameCount() const { return routeIndex_.size(); }  // interned
  [[nodiscard]] const std::string& selfMachineId() const { return selfMachineId_; }
  // At most one; nullptr removes it. Not owned.
  void setObserver(TableObserver* observer) { observer_ = observer; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
  };
  template <typename Value>
  using Index = std::unordered_map<std::string, Value, Hash, std::equal_to<>>;

  static constexpr uint32_t kNone = UINT32_MAX;

  // 40 bytes; the bridge ID lives only as its machine's index key.
  struct Entry {
    uint32_t tunnel = kNone;  // slot in tunnels_; kNone while the slot is free
    uint32_t machine = kNone;
    int64_t attachedAtMs = 0;
    RouteIds routes;
    // The origin's name, interned with the route names (kNone: origin ""), and its profile's
    // place: kept so bridgesOf gives back what the peer announced.
    uint32_t origin = kNone;
    uint32_t profileIndex = 0;
  };
  struct Tunnel {
    const std::string* id = nullptr;  // the key in tunnelIndex_ (node keys do not move)
    std::vector<uint32_t> entries;    // slots in entries_: at most 16 per machine holding it
  };
  struct Route {
    const std::string* name = nullptr;  // the key in routeIndex_
    uint32_t refs = 0;
  };
  struct Machine {
    MachineLife life;
    uint64_t sequence = 0;
    Index<uint32_t> bridges;  // bridge ID -> slot in entries_
  };

  [[nodiscard]] int64_t clampAttachedAt(int64_t attachedAtMs) const;
  [[nodiscard]] bool foreign(const BridgeEntry& bridge, std::string_view machineId) const;
  Machine* deltaTarget(std::string_view machineId, uint64_t epoch, uint64_t sequence,
                       TableUpdate& refusal);
  void addEntry(uint32_t machineSlot, Machine& machine, const BridgeEntry& bridge);
  void removeEntry(uint32_t slot);
  void clearMachine(Machine& machine);
  uint32_t internTunnel(const std::string& id);
  uint32_t internRoute(const std::string& name);
  void releaseRoute(uint32_t slot);
  [[nodiscard]] const Tunnel* findTunnel(std::string_view id) const;
  [[nodiscard]] uint32_t findRoute(std::string_view name) const;
  [[nodiscard]] const Machine* liveMachine(uint32_t slot, std::string_view skip) const;

  std::string selfMachineId_;
  Clock clock_;
  Index<uint32_t> machineIndex_;  // machine ID -> slot in machines_
  std::vector<Machine> machines_;
  std::vector<uint32_t> freeMachines_;
  Index<uint32_t> tunnelIndex_;  // tunnel ID -> slot in tunnels_
  std::vector<Tunnel> tunnels_;
  std::vector<uint32_t> freeTunnels_;
  Index<uint32_t> routeIndex_;  // route name -> slot in routes_
  std::vector<Route> routes_;
  std::vector<uint32_t> freeRoutes_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> freeEntries_;
  size_t entryCount_ = 0;
  TableObserver* observer_ = nullptr;
};

}  // namespace ot::mesh
