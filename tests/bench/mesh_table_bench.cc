// The mesh bridge table's memory per entry and CPU per change (issue 14's report for
// docs/capacity.md). Fills a real BridgeTable with N bridges (default 20,000) over 10 peer
// machines (two bridges per tunnel on different machines, one or two routes each, bridge IDs and
// tunnel IDs shaped like relayd's and the store's), then applies a stream of attached/detached
// deltas (a detach and a fresh attach per pair, 100 changes a second for a simulated 10 minutes by
// default) and forward lookups. Prints heap bytes per entry (malloc's in-use bytes before and
// after the snapshots) and the process CPU per change and per lookup. Built by CMake, never run
// by CI: numbers, never assertions.
//
//   build/tests/bench/ot_mesh_table_bench [bridges, default 20000] [changes, default 60000]
#include <malloc.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "controld/mesh/bridge_table.h"

namespace {

using ot::mesh::BridgeEntry;
using ot::mesh::BridgeTable;
using ot::mesh::MachineLife;
using ot::mesh::TableUpdate;

constexpr size_t kMachines = 10;
constexpr int64_t kNowMs = 1'800'000'000'000;

double cpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

size_t heapInUse() {
  return mallinfo2().uordblks;
}

std::string tunnelId(int index) {
  char text[32];
  std::snprintf(text, sizeof(text), "t%011x", static_cast<unsigned>(index) * 2654435761U);
  return text;
}

BridgeEntry makeBridge(size_t machine, uint64_t serial, int tunnel) {
  BridgeEntry bridge;
  char id[40];
  std::snprintf(id, sizeof(id), "br_%08x_%llu", 0x5eed0000U + static_cast<unsigned>(machine),
                static_cast<unsigned long long>(serial));
  bridge.bridgeId = id;
  bridge.tunnelId = tunnelId(tunnel);
  bridge.routes = {""};
  if (tunnel % 4 == 0) bridge.routes.push_back("api");
  bridge.attachedAtMs = kNowMs - static_cast<int64_t>(serial % 100'000);
  return bridge;
}

}  // namespace

int main(int argc, char** argv) {
  const int bridges = argc > 1 ? std::atoi(argv[1]) : 20'000;
  const int changes = argc > 2 ? std::atoi(argv[2]) : 60'000;
  const int tunnels = bridges / 2;

  std::vector<std::vector<BridgeEntry>> snapshots(kMachines);
  std::vector<uint64_t> serials(kMachines, 0);
  for (int index = 0; index < bridges; ++index) {
    const int tunnel = index % tunnels;
    const size_t machine = static_cast<size_t>(tunnel + index / tunnels * 3) % kMachines;
    snapshots[machine].push_back(makeBridge(machine, ++serials[machine], tunnel));
  }

  malloc_trim(0);
  const size_t before = heapInUse();
  BridgeTable table("self", [] { return kNowMs; });
  for (size_t machine = 0; machine < kMachines; ++machine) {
    MachineLife life;
    life.machineId = "m-" + std::to_string(100'000'000'000U + machine);
    life.epoch = 1;
    life.startedAtMs = kNowMs - 60'000;
    life.internalAddress = "fdaa:0:1:a7b:" + std::to_string(machine) + "::2";
    life.region = "lhr";
    if (table.applySnapshot(life, serials[machine], snapshots[machine]) != TableUpdate::kApplied) {
      std::fprintf(stderr, "snapshot refused\n");
      return 1;
    }
  }
  const size_t after = heapInUse();
  std::printf("bridges %zu tunnels %zu machines %zu\n", table.bridgeCount(), table.tunnelCount(),
              kMachines);
  std::printf("heap per entry: %.1f bytes (%.2f MiB in all)\n",
              static_cast<double>(after - before) / static_cast<double>(table.bridgeCount()),
              static_cast<double>(after - before) / (1024.0 * 1024.0));

  // Each change pair: a machine's oldest listed bridge detaches and a new one of the same tunnel
  // attaches (a client reconnecting), so the table stays at its size.
  std::vector<std::vector<BridgeEntry>> live = snapshots;
  std::vector<size_t> next(kMachines, 0);
  std::vector<uint64_t> sequence = serials;
  const double start = cpuSeconds();
  for (int change = 0; change < changes; change += 2) {
    const size_t machine = static_cast<size_t>(change / 2) % kMachines;
    const std::string id = "m-" + std::to_string(100'000'000'000U + machine);
    BridgeEntry& old = live[machine][next[machine] % live[machine].size()];
    if (table.applyDetached(id, 1, ++sequence[machine], old.bridgeId) != TableUpdate::kApplied) {
      std::fprintf(stderr, "detach refused\n");
      return 1;
    }
    BridgeEntry fresh = makeBridge(machine, ++serials[machine], 0);
    fresh.tunnelId = old.tunnelId;
    fresh.routes = old.routes;
    if (table.applyAttached(id, 1, ++sequence[machine], fresh) != TableUpdate::kApplied) {
      std::fprintf(stderr, "attach refused\n");
      return 1;
    }
    old = std::move(fresh);
    ++next[machine];
  }
  const double changeSeconds = cpuSeconds() - start;
  const double nsPerChange = changeSeconds * 1e9 / changes;
  std::printf("changes %d: %.0f ns CPU per change, %.4f %% of a core at 100 changes/s\n", changes,
              nsPerChange, nsPerChange * 100 / 1e9 * 100);

  const int lookups = 1'000'000;
  size_t hits = 0;
  const double lookupStart = cpuSeconds();
  for (int lookup = 0; lookup < lookups; ++lookup) {
    const int tunnel = lookup % (tunnels + tunnels / 10);  // ~9 % misses
    if (table.holder(tunnelId(tunnel), "")) ++hits;
  }
  const double lookupSeconds = cpuSeconds() - lookupStart;
  std::printf("lookups %d (%zu hits): %.0f ns CPU per lookup (tunnel ID formatting included)\n",
              lookups, hits, lookupSeconds * 1e9 / lookups);
  const double snapshotStart = cpuSeconds();
  for (size_t machine = 0; machine < kMachines; ++machine) {
    MachineLife life;
    life.machineId = "m-" + std::to_string(100'000'000'000U + machine);
    life.epoch = 2;
    life.startedAtMs = kNowMs;
    (void)table.applySnapshot(life, 0, live[machine]);
  }
  std::printf(
      "replacing every machine's entries by a new life's snapshot (copy included): %.2f ms CPU\n",
      (cpuSeconds() - snapshotStart) * 1e3);
  return 0;
}
