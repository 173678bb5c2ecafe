#include "controld/mesh/bridge_table.h"

#include <algorithm>
#include <tuple>
#include <unordered_set>
#include <utility>

namespace ot::mesh {

bool newerLife(const MachineLife& candidate, const MachineLife& known) {
  return std::tie(candidate.startedAtMs, candidate.epoch) >
         std::tie(known.startedAtMs, known.epoch);
}

const char* tableUpdateName(TableUpdate update) {
  switch (update) {
    case TableUpdate::kApplied:
      return "applied";
    case TableUpdate::kStaleLife:
      return "stale_life";
    case TableUpdate::kUnknownMachine:
      return "unknown_machine";
    case TableUpdate::kSequenceGap:
      return "sequence_gap";
    case TableUpdate::kForeignEntry:
      return "foreign_entry";
  }
  return "unknown";
}

BridgeTable::BridgeTable(std::string selfMachineId, Clock clock)
    : selfMachineId_(std::move(selfMachineId)),
      clock_(clock ? std::move(clock) : Clock(&unixNowMs)) {}

int64_t BridgeTable::clampAttachedAt(int64_t attachedAtMs) const {
  const int64_t now = clock_();
  return attachedAtMs > now + kFutureClampMs ? now : attachedAtMs;
}

bool BridgeTable::foreign(const BridgeEntry& bridge, std::string_view machineId) const {
  return !bridge.machine.empty() && bridge.machine != machineId;
}

TableUpdate BridgeTable::applySnapshot(const MachineLife& life, uint64_t sequence,
                                       std::vector<BridgeEntry> bridges) {
  if (life.machineId.empty() || life.machineId == selfMachineId_) {
    return TableUpdate::kForeignEntry;
  }
  for (const BridgeEntry& bridge : bridges) {
    if (foreign(bridge, life.machineId)) return TableUpdate::kForeignEntry;
  }
  uint32_t slot = kNone;
  if (auto found = machineIndex_.find(life.machineId); found != machineIndex_.end()) {
    slot = found->second;
    const MachineLife& known = machines_[slot].life;
    const bool sameLife = known.epoch == life.epoch && known.startedAtMs == life.startedAtMs;
    if (!sameLife && !newerLife(life, known)) return TableUpdate::kStaleLife;
    clearMachine(machines_[slot]);
  } else {
    if (freeMachines_.empty()) {
      slot = static_cast<uint32_t>(machines_.size());
      machines_.emplace_back();
    } else {
      slot = freeMachines_.back();
      freeMachines_.pop_back();
    }
    machineIndex_.emplace(life.machineId, slot);
  }
  Machine& machine = machines_[slot];
  machine.life = life;
  machine.sequence = sequence;
  if (observer_ != nullptr) observer_->machineCleared(life);
  machine.bridges.reserve(bridges.size());
  for (const BridgeEntry& bridge : bridges) addEntry(slot, machine, bridge);
  return TableUpdate::kApplied;
}

BridgeTable::Machine* BridgeTable::deltaTarget(std::string_view machineId, uint64_t epoch,
                                               uint64_t sequence, TableUpdate& refusal) {
  auto found = machineIndex_.find(machineId);
  if (found == machineIndex_.end()) {
    refusal = TableUpdate::kUnknownMachine;
    return nullptr;
  }
  Machine& machine = machines_[found->second];
  if (machine.life.epoch != epoch) {
    refusal = TableUpdate::kStaleLife;
    return nullptr;
  }
  if (sequence != machine.sequence + 1) {
    refusal = TableUpdate::kSequenceGap;
    return nullptr;
  }
  machine.sequence = sequence;
  return &machine;
}

TableUpdate BridgeTable::applyAttached(std::string_view machineId, uint64_t epoch,
                                       uint64_t sequence, const BridgeEntry& bridge) {
  if (foreign(bridge, machineId)) return TableUpdate::kForeignEntry;
  TableUpdate refusal = TableUpdate::kApplied;
  Machine* machine = deltaTarget(machineId, epoch, sequence, refusal);
  if (machine == nullptr) return refusal;
  addEntry(machineIndex_.find(machineId)->second, *machine, bridge);
  return TableUpdate::kApplied;
}

TableUpdate BridgeTable::applyDetached(std::string_view machineId, uint64_t epoch,
                                       uint64_t sequence, std::string_view bridgeId) {
  TableUpdate refusal = TableUpdate::kApplied;
  Machine* machine = deltaTarget(machineId, epoch, sequence, refusal);
  if (machine == nullptr) return refusal;
  if (auto found = machine->bridges.find(bridgeId); found != machine->bridges.end()) {
    removeEntry(found->second);
    machine->bridges.erase(found);
    if (observer_ != nullptr) observer_->bridgeRemoved(machine->life.machineId, bridgeId);
  }
  return TableUpdate::kApplied;
}

TableUpdate BridgeTable::setDraining(std::string_view machineId, uint64_t epoch, bool draining) {
  auto found = machineIndex_.find(machineId);
  if (found == machineIndex_.end()) return TableUpdate::kUnknownMachine;
  Machine& machine = machines_[found->second];
  if (machine.life.epoch != epoch) return TableUpdate::kStaleLife;
  machine.life.draining = draining;
  if (observer_ != nullptr) observer_->machineDraining(machine.life.machineId, draining);
  return TableUpdate::kApplied;
}

size_t BridgeTable::dropMachine(std::string_view machineId) {
  auto found = machineIndex_.find(machineId);
  if (found == machineIndex_.end()) return 0;
  const uint32_t slot = found->second;
  Machine& machine = machines_[slot];
  const size_t dropped = machine.bridges.size();
  if (observer_ != nullptr) observer_->machineDropped(machine.life.machineId);
  clearMachine(machine);
  machine = Machine{};
  machineIndex_.erase(found);
  freeMachines_.push_back(slot);
  return dropped;
}

void BridgeTable::addEntry(uint32_t machineSlot, Machine& machine, const BridgeEntry& bridge) {
  auto [position, inserted] = machine.bridges.try_emplace(bridge.bridgeId, kNone);
  if (!inserted) removeEntry(position->second);  // the same bridge announced again: replace it

  std::vector<uint32_t> routeSlots;
  routeSlots.reserve(bridge.routes.size());
  for (const std::string& route : bridge.routes) {
    const uint32_t routeSlot = internRoute(route);
    if (std::find(routeSlots.begin(), routeSlots.end(), routeSlot) != routeSlots.end()) {
      releaseRoute(routeSlot);  // a route listed twice counts once
      continue;
    }
    routeSlots.push_back(routeSlot);
  }

  uint32_t slot = kNone;
  if (freeEntries_.empty()) {
    slot = static_cast<uint32_t>(entries_.size());
    entries_.emplace_back();
  } else {
    slot = freeEntries_.back();
    freeEntries_.pop_back();
  }
  Entry& entry = entries_[slot];
  entry.tunnel = internTunnel(bridge.tunnelId);
  entry.machine = machineSlot;
  entry.attachedAtMs = clampAttachedAt(bridge.attachedAtMs);
  entry.routes = RouteIds(routeSlots);
  entry.origin = bridge.origin.empty() ? kNone : internRoute(bridge.origin);
  entry.profileIndex = bridge.profileIndex;
  tunnels_[entry.tunnel].entries.push_back(slot);
  position->second = slot;
  ++entryCount_;
  if (observer_ != nullptr)
    observer_->bridgeAdded(machine.life.machineId, bridge, entry.attachedAtMs);
}

void BridgeTable::removeEntry(uint32_t slot) {
  Entry& entry = entries_[slot];
  Tunnel& tunnel = tunnels_[entry.tunnel];
  auto position = std::find(tunnel.entries.begin(), tunnel.entries.end(), slot);
  *position = tunnel.entries.back();
  tunnel.entries.pop_back();
  if (tunnel.entries.empty()) {
    tunnelIndex_.erase(*tunnel.id);
    tunnels_[entry.tunnel] = Tunnel{};
    freeTunnels_.push_back(entry.tunnel);
  }
  for (const uint32_t route : entry.routes.ids()) releaseRoute(route);
  if (entry.origin != kNone) releaseRoute(entry.origin);
  entry = Entry{};
  freeEntries_.push_back(slot);
  --entryCount_;
}

void BridgeTable::clearMachine(Machine& machine) {
  for (const auto& [bridgeId, slot] : machine.bridges) removeEntry(slot);
  machine.bridges.clear();
}

uint32_t BridgeTable::internTunnel(const std::string& id) {
  auto [position, inserted] = tunnelIndex_.try_emplace(id, kNone);
  if (!inserted) return position->second;
  uint32_t slot = kNone;
  if (freeTunnels_.empty()) {
    slot = static_cast<uint32_t>(tunnels_.size());
    tunnels_.emplace_back();
  } else {
    slot = freeTunnels_.back();
    freeTunnels_.pop_back();
  }
  tunnels_[slot].id = &position->first;
  position->second = slot;
  return slot;
}

uint32_t BridgeTable::internRoute(const std::string& name) {
  auto [position, inserted] = routeIndex_.try_emplace(name, kNone);
  if (inserted) {
    uint32_t slot = kNone;
    if (freeRoutes_.empty()) {
      slot = static_cast<uint32_t>(routes_.size());
      routes_.emplace_back();
    } else {
      slot = freeRoutes_.back();
      freeRoutes_.pop_back();
    }
    routes_[slot].name = &position->first;
    position->second = slot;
  }
  ++routes_[position->second].refs;
  return position->second;
}

void BridgeTable::releaseRoute(uint32_t slot) {
  Route& route = routes_[slot];
  if (--route.refs > 0) return;
  routeIndex_.erase(*route.name);
  route = Route{};
  freeRoutes_.push_back(slot);
}

const BridgeTable::Tunnel* BridgeTable::findTunnel(std::string_view id) const {
  auto found = tunnelIndex_.find(id);
  return found == tunnelIndex_.end() ? nullptr : &tunnels_[found->second];
}

uint32_t BridgeTable::findRoute(std::string_view name) const {
  auto found = routeIndex_.find(name);
  return found == routeIndex_.end() ? kNone : found->second;
}

const BridgeTable::Machine* BridgeTable::liveMachine(uint32_t slot, std::string_view skip) const {
  const Machine& machine = machines_[slot];
  if (machine.life.draining) return nullptr;
  if (!skip.empty() && machine.life.machineId == skip) return nullptr;
  return &machine;
}

std::optional<PeerTarget> BridgeTable::holder(std::string_view tunnelId, std::string_view route,
                                              std::string_view skipMachineId) const {
  const Tunnel* tunnel = findTunnel(tunnelId);
  const uint32_t routeSlot = findRoute(route);
  if (tunnel == nullptr || routeSlot == kNone) return std::nullopt;
  const Entry* best = nullptr;
  const Machine* bestMachine = nullptr;
  for (const uint32_t slot : tunnel->entries) {
    const Entry& entry = entries_[slot];
    const Machine* machine = liveMachine(entry.machine, skipMachineId);
    if (machine == nullptr || !entry.routes.contains(routeSlot)) continue;
    if (best == nullptr || entry.attachedAtMs > best->attachedAtMs ||
        (entry.attachedAtMs == best->attachedAtMs &&
         machine->life.machineId < bestMachine->life.machineId)) {
      best = &entry;
      bestMachine = machine;
    }
  }
  if (best == nullptr) return std::nullopt;
  return PeerTarget{bestMachine->life.machineId, bestMachine->life.internalAddress,
                    best->attachedAtMs};
}

bool BridgeTable::onlineElsewhere(std::string_view tunnelId) const {
  const Tunnel* tunnel = findTunnel(tunnelId);
  if (tunnel == nullptr) return false;
  return std::any_of(tunnel->entries.begin(), tunnel->entries.end(), [this](uint32_t slot) {
    return liveMachine(entries_[slot].machine, {}) != nullptr;
  });
}

std::vector<PeerTarget> BridgeTable::routeHolders(std::string_view tunnelId,
                                                  std::span<const std::string> routes) const {
  std::vector<PeerTarget> holders;
  const Tunnel* tunnel = findTunnel(tunnelId);
  if (tunnel == nullptr) return holders;
  std::vector<uint32_t> routeSlots;
  for (const std::string& route : routes) {
    if (const uint32_t slot = findRoute(route); slot != kNone) routeSlots.push_back(slot);
  }
  for (const uint32_t slot : tunnel->entries) {
    const Entry& entry = entries_[slot];
    const Machine* machine = liveMachine(entry.machine, {});
    if (machine == nullptr) continue;
    if (std::none_of(routeSlots.begin(), routeSlots.end(),
                     [&entry](uint32_t route) { return entry.routes.contains(route); })) {
      continue;
    }
    auto known = std::find_if(holders.begin(), holders.end(), [machine](const PeerTarget& target) {
      return target.machineId == machine->life.machineId;
    });
    if (known == holders.end()) {
      holders.push_back(
          {machine->life.machineId, machine->life.internalAddress, entry.attachedAtMs});
    } else {
      known->attachedAtMs = std::max(known->attachedAtMs, entry.attachedAtMs);
    }
  }
  std::sort(holders.begin(), holders.end(),
            [](const PeerTarget& a, const PeerTarget& b) { return a.machineId < b.machineId; });
  return holders;
}

std::vector<MachineSummary> BridgeTable::machines() const {
  std::vector<MachineSummary> summaries;
  summaries.reserve(machineIndex_.size());
  for (const auto& [machineId, machineSlot] : machineIndex_) {
    const Machine& machine = machines_[machineSlot];
    MachineSummary summary{machine.life, machine.sequence, machine.bridges.size(), 0, 0};
    std::unordered_set<uint32_t> tunnels;
    std::unordered_set<uint64_t> routes;
    for (const auto& [bridgeId, slot] : machine.bridges) {
      const Entry& entry = entries_[slot];
      tunnels.insert(entry.tunnel);
      for (const uint32_t route : entry.routes.ids()) {
        routes.insert((uint64_t{entry.tunnel} << 32) | route);
      }
    }
    summary.tunnels = tunnels.size();
    summary.routes = routes.size();
    summaries.push_back(std::move(summary));
  }
  std::sort(summaries.begin(), summaries.end(),
            [](const auto& a, const auto& b) { return a.life.machineId < b.life.machineId; });
  return summaries;
}

std::vector<std::pair<std::string, size_t>> BridgeTable::bridgesByMachine() const {
  std::vector<std::pair<std::string, size_t>> counts;
  counts.reserve(machineIndex_.size());
  for (const auto& [machineId, slot] : machineIndex_) {
    counts.emplace_back(machineId, machines_[slot].bridges.size());
  }
  std::sort(counts.begin(), counts.end());
  return counts;
}

std::vector<BridgeEntry> BridgeTable::bridgesOf(std::string_view machineId) const {
  std::vector<BridgeEntry> bridges;
  auto found = machineIndex_.find(machineId);
  if (found == machineIndex_.end()) return bridges;
  const Machine& machine = machines_[found->second];
  for (const auto& [bridgeId, slot] : machine.bridges) {
    const Entry& entry = entries_[slot];
    BridgeEntry bridge{machine.life.machineId,
                       *tunnels_[entry.tunnel].id,
                       bridgeId,
                       {},
                       entry.attachedAtMs,
                       {},
                       0};
    for (const uint32_t route : entry.routes.ids()) bridge.routes.push_back(*routes_[route].name);
    if (entry.origin != kNone) bridge.origin = *routes_[entry.origin].name;
    bridge.profileIndex = entry.profileIndex;
    bridges.push_back(std::move(bridge));
  }
  std::sort(bridges.begin(), bridges.end(),
            [](const BridgeEntry& a, const BridgeEntry& b) { return a.bridgeId < b.bridgeId; });
  return bridges;
}

}  // namespace ot::mesh
