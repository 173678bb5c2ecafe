// MeshNode's cluster view for the admin stats (cluster_view.h), built on the link loop so the
// table, the peer directory and this machine's bridges are read where they are written.
#include <future>
#include <memory>
#include <set>
#include <utility>

#include "controld/mesh/mesh_node.h"

namespace ot::mesh {
namespace {

// This machine's row: its bridges as announced (LocalBridges mirrors relayd's, via the registry).
SelfSummary selfSummary(const MachineLife& life, uint64_t sequence,
                        const std::vector<BridgeEntry>& bridges) {
  SelfSummary self{life, sequence, bridges.size(), 0, 0};
  std::set<std::string_view> tunnels;
  std::set<std::pair<std::string_view, std::string_view>> routes;
  for (const BridgeEntry& bridge : bridges) {
    tunnels.insert(bridge.tunnelId);
    for (const std::string& route : bridge.routes) routes.emplace(bridge.tunnelId, route);
  }
  self.tunnels = tunnels.size();
  self.routes = routes.size();
  return self;
}

}  // namespace

std::optional<ClusterView> MeshNode::clusterView() {
  auto promise = std::make_shared<std::promise<ClusterView>>();
  auto future = promise->get_future();
  {
    std::lock_guard lock(tasksMutex_);
    if (!accepting_) return std::nullopt;
    tasks_.emplace_back([this, promise] {
      const MachineLife life{settings_.machineId, epoch_,           startedAtMs_,
                             selfAddress_,        settings_.region, stopping_ || leaving_};
      std::vector<PeerLink> peers;
      for (PeerView& peer : directory_.view()) {
        peers.push_back({std::move(peer.address), std::move(peer.machine), peer.state});
      }
      promise->set_value(buildClusterView(
          table_, selfSummary(life, local_.sequence(), local_.snapshot()), std::move(peers)));
    });
    uv_async_send(&wake_);
  }
  return future.get();
}

}  // namespace ot::mesh
