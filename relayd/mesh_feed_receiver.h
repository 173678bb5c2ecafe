// relayd's end of the mesh table feed (docs/mesh.md "The control-session feed"): controld's
// MeshTableSnapshot parts and MeshTableDelta messages applied to the MeshRouteTable the Relay
// forwards by. A snapshot (collected over its parts) replaces the copy whatever its version (a
// new session may be a restarted controld, whose versions start again); a delta applies only when
// it follows on, a lower one is stale, and a higher one is a gap: the caller asks controld for a
// snapshot, once, and the copy keeps serving as it is until the snapshot arrives. Nothing here
// ever empties the copy: a session that ends leaves it in use.
//
// Pure (no I/O); the loop thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "opentunnel/control/v1/control.pb.h"
#include "relayd/mesh_route_table.h"

namespace ot::relayd {

class MeshFeedReceiver {
 public:
  enum class Outcome : uint8_t {
    kPartial,          // a snapshot part; more to come
    kSnapshotApplied,  // the last part: the copy was replaced
    kDeltaApplied,
    kStale,       // a delta not newer than the copy: ignored
    kGap,         // a delta that skips versions: ignored; ask controld for a snapshot now
    kGapWaiting,  // the same while a snapshot is already asked for (or expected): ignored
  };

  explicit MeshFeedReceiver(MeshRouteTable& table) : table_(table) {}

  // The control session came up or ended: a snapshot half received is dropped, and the next
  // session's own snapshot is expected (deltas before it are not asked about again).
  void sessionChanged();
  [[nodiscard]] Outcome snapshotPart(const opentunnel::control::v1::MeshTableSnapshot& part);
  [[nodiscard]] Outcome delta(const opentunnel::control::v1::MeshTableDelta& delta);

  [[nodiscard]] bool awaitingSnapshot() const { return awaitingSnapshot_; }

 private:
  MeshRouteTable& table_;
  bool awaitingSnapshot_ = true;
  // The snapshot being collected.
  std::optional<uint64_t> partsVersion_;
  std::vector<MeshPeer> partsPeers_;
  std::vector<MeshRouteHolder> partsHolders_;
};

}  // namespace ot::relayd
