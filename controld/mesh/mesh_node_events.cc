// MeshNode's events (docs/mesh.md "Events"): this machine's changes broadcast to every proven
// link, encoded once. Peers' events reach setPeerEvents' handler from applyTable.
#include <utility>

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

}  // namespace ot::mesh
