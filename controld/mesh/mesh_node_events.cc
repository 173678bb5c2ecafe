// MeshNode's events (docs/mesh.md "Events"): this machine's changes broadcast to every proven
// link, encoded once; a tunnel reset's event with who it reached. Peers' events reach
// setPeerEvents' handler from applyTable.
#include <future>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "controld/mesh/mesh_node.h"

namespace ot::mesh {

void MeshNode::broadcast(FrameBody event) {
  post([this, event = std::move(event)]() mutable {
    const Frame frame{unixNowMs(), std::move(event)};
    const std::string encoded = encodeFrame(frame);
    const auto type = frameTypeName(frame.body);
    for (auto& [pointer, link] : links_) {
      if (link->proven()) link->sendEncoded(encoded, type);
    }
  });
}

std::vector<PeerReset> MeshNode::announceReset(const std::string& tunnelId) {
  auto promise = std::make_shared<std::promise<std::vector<PeerReset>>>();
  auto future = promise->get_future();
  {
    std::lock_guard lock(tasksMutex_);
    if (!accepting_) return {};
    tasks_.emplace_back([this, promise, tunnelId] {
      const Frame frame{unixNowMs(), TunnelReset{tunnelId}};
      const std::string encoded = encodeFrame(frame);
      std::map<std::string, PeerReset> machines;
      for (auto& [pointer, link] : links_) {
        if (!link->proven()) continue;
        link->sendEncoded(encoded, frameTypeName(frame.body));
        const std::string& machine = link->peerMachine();
        if (!machine.empty()) machines[machine] = PeerReset{machine, true, 0};
      }
      // The table's count per machine: what the peer's relayd should close (it counts its own).
      for (const MachineSummary& summary : table_.machines()) {
        const std::string& machine = summary.life.machineId;
        if (machine == settings_.machineId) continue;
        size_t bridges = 0;
        for (const BridgeEntry& bridge : table_.bridgesOf(machine)) {
          if (bridge.tunnelId == tunnelId) ++bridges;
        }
        if (bridges == 0) continue;
        auto [it, added] = machines.try_emplace(machine, PeerReset{machine, false, 0});
        it->second.bridges = bridges;
      }
      std::vector<PeerReset> answer;
      answer.reserve(machines.size());
      for (auto& [machine, reset] : machines) answer.push_back(std::move(reset));
      promise->set_value(std::move(answer));
    });
    uv_async_send(&wake_);
  }
  return future.get();
}

void MeshNode::setLeaving(bool leaving) {
  post([this, leaving] {
    if (leaving_ == leaving) return;
    leaving_ = leaving;
    std::vector<MeshLink*> open;
    for (auto& [pointer, link] : links_) {
      if (link->proven()) open.push_back(pointer);
    }
    if (!leaving) {
      log_.info("mesh rejoining: this machine serves again", {{"links", open.size()}});
      for (MeshLink* link : open) link->close("rejoin");
      return;
    }
    log_.info("mesh leaving: this machine is draining", {{"links", open.size()}});
    const Frame frame{unixNowMs(), Leaving{}};
    const std::string encoded = encodeFrame(frame);
    for (MeshLink* link : open) link->sendEncoded(encoded, frameTypeName(frame.body));
  });
}

}  // namespace ot::mesh
