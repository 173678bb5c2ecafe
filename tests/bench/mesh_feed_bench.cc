// The mesh feed to relayd (docs/mesh.md "The control-session feed"): what relayd's copy costs
// controld. Fills a real BridgeTable observed by a RouteFeed with N bridges (default 20,000) over
// 10 peer machines (shaped as in mesh_table_bench.cc), then applies a stream of changes (a detach
// and a fresh attach per pair), taking one delta after every pair (near the worst case: at 100
// changes a second each 10 ms batch holds about one change) and encoding it as relayd gets it.
// Prints the heap per bridge of the table and the feed, the CPU per change (table + feed + delta
// + encoding, and the table alone), and the time and bytes of a snapshot. Built by CMake, never
// run by CI: numbers only.
//
//   build/tests/bench/ot_mesh_feed_bench [bridges, default 20000] [changes, default 60000]
#include <malloc.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "controld/mesh/bridge_table.h"
#include "controld/mesh/route_feed.h"
#include "controld/relays/mesh_table_proto.h"

namespace {

using ot::mesh::BridgeEntry;
using ot::mesh::BridgeTable;
using ot::mesh::MachineLife;
using ot::mesh::RouteFeed;

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

std::string machineId(size_t index) {
  return "machine-" + std::to_string(index);
}

struct Run {
  explicit Run(bool withFeed) : table("self", [] { return kNowMs; }) {
    if (withFeed) table.setObserver(&feed);
  }
  BridgeTable table;
  RouteFeed feed;
};

}  // namespace

int main(int argc, char** argv) {
  const size_t bridges = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20'000;
  const size_t changes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 60'000;
  const size_t perMachine = bridges / kMachines;

  double perChange[2] = {0, 0};
  for (int withFeed = 0; withFeed < 2; ++withFeed) {
    const size_t heapBefore = heapInUse();
    Run run(withFeed == 1);
    std::vector<std::vector<std::string>> ids(kMachines);
    std::vector<uint64_t> sequences(kMachines, 0);
    uint64_t serial = 0;
    for (size_t m = 0; m < kMachines; ++m) {
      std::vector<BridgeEntry> list;
      for (size_t i = 0; i < perMachine; ++i) {
        list.push_back(makeBridge(m, ++serial, static_cast<int>((m * perMachine + i) / 2)));
        ids[m].push_back(list.back().bridgeId);
      }
      MachineLife life{machineId(m), 1,    kNowMs - 1000, "10.0.0." + std::to_string(m) + ":9000",
                       "r",          false};
      run.table.applySnapshot(life, 0, std::move(list));
    }
    if (withFeed == 1) {
      (void)run.feed.takeDelta();  // the fill, published
      const size_t heapAfter = heapInUse();
      std::printf("holders %zu (bridges %zu), table + feed heap %.0f bytes per bridge\n",
                  run.feed.holderCount(), bridges,
                  static_cast<double>(heapAfter - heapBefore) / static_cast<double>(bridges));
      const double start = cpuSeconds();
      auto parts = ot::controld::meshSnapshotMessages(run.feed.snapshot());
      size_t bytes = 0;
      for (const auto& part : parts) bytes += part.SerializeAsString().size();
      std::printf("snapshot: %zu parts, %zu bytes, %.1f ms CPU to build and encode\n", parts.size(),
                  bytes, (cpuSeconds() - start) * 1000);
    }
    size_t encoded = 0;
    const double start = cpuSeconds();
    for (size_t c = 0; c < changes; ++c) {
      const size_t m = c % kMachines;
      const size_t slot = (c / kMachines) % perMachine;
      run.table.applyDetached(machineId(m), 1, ++sequences[m], ids[m][slot]);
      BridgeEntry fresh = makeBridge(m, ++serial, static_cast<int>((m * perMachine + slot) / 2));
      ids[m][slot] = fresh.bridgeId;
      run.table.applyAttached(machineId(m), 1, ++sequences[m], fresh);
      if (withFeed == 1) {
        if (auto delta = run.feed.takeDelta()) {
          encoded += ot::controld::meshDeltaMessage(*delta).SerializeAsString().size();
        }
      }
    }
    perChange[withFeed] = (cpuSeconds() - start) / static_cast<double>(2 * changes) * 1e6;
    if (withFeed == 1) {
      std::printf("deltas: %.1f bytes encoded per change\n",
                  static_cast<double>(encoded) / static_cast<double>(2 * changes));
    }
  }
  std::printf(
      "CPU per change (detach or attach): table alone %.2f us, table + feed + delta %.2f us"
      " (feed %.2f us); at 100 changes/s: %.4f%% of a core\n",
      perChange[0], perChange[1], perChange[1] - perChange[0], perChange[1] * 100 / 1e4);
  return 0;
}
