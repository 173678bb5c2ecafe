// MeshNode's events (docs/mesh.md "Events"): this machine's changes broadcast to every proven
// link, encoded once. Peers' events reach setPeerEvents' handler from applyTable.
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
