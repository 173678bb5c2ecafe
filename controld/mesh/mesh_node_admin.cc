// MeshNode's answers for the Admin service: which linked machines hold bridges of given tunnels,
// read from the bridge table on the link loop, where the table is written.
#include <future>
#include <memory>
#include <set>
#include <utility>

#include "controld/mesh/mesh_node.h"

namespace ot::mesh {

std::vector<BridgeEntry> MeshNode::peerBridgesOf(const std::vector<std::string>& tunnelIds) {
  auto promise = std::make_shared<std::promise<std::vector<BridgeEntry>>>();
  auto future = promise->get_future();
  {
    std::lock_guard lock(tasksMutex_);
    if (!accepting_) return {};
    tasks_.emplace_back(
        [this, promise,
         wanted = std::set<std::string, std::less<>>(tunnelIds.begin(), tunnelIds.end())] {
          // Every peer's bridges once: an operator's occasional question, linear in the table.
          std::vector<BridgeEntry> found;
          for (const MachineSummary& machine : table_.machines()) {
            if (machine.life.machineId == settings_.machineId) continue;
            for (BridgeEntry& bridge : table_.bridgesOf(machine.life.machineId)) {
              if (wanted.count(bridge.tunnelId) == 0) continue;
              bridge.machine = machine.life.machineId;
              found.push_back(std::move(bridge));
            }
          }
          promise->set_value(std::move(found));
        });
    uv_async_send(&wake_);
  }
  return future.get();
}

}  // namespace ot::mesh
