// The mesh feed's messages on the control session (docs/mesh.md "The control-session feed"):
// RouteFeed's deltas and snapshots as MeshTableDelta / MeshTableSnapshot parts, and the sink that
// hands them to the RelayHub from the mesh node's loop (it only queues: never blocks the loop).
#pragma once

#include <cstddef>
#include <vector>

#include "controld/mesh/route_feed.h"
#include "controld/mesh/route_feed_pump.h"
#include "controld/relays/relay_hub.h"
#include "opentunnel/control/v1/control.pb.h"

namespace ot::controld {

// Holders per snapshot part: ~60 bytes each on the wire, far below gRPC's 4 MB message limit.
inline constexpr size_t kMeshHoldersPerPart = 5'000;

[[nodiscard]] cv1::ControlMessage meshDeltaMessage(const mesh::FeedDelta& delta);
// At least one part; the peers ride in the first, `last` is set on the final one.
[[nodiscard]] std::vector<cv1::ControlMessage> meshSnapshotMessages(
    const mesh::FeedSnapshot& snapshot, size_t holdersPerPart = kMeshHoldersPerPart);

[[nodiscard]] mesh::RouteFeedSink relayHubFeedSink(RelayHub& hub);

}  // namespace ot::controld
