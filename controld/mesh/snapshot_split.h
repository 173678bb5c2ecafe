// A machine's snapshot of its own bridges as link frames (docs/mesh.md, "Link frames"): the
// entries cut into parts whose encoded entries take at most kMaxSnapshotPartBytes each, part 0 a
// "snapshot" frame and the rest "snapshot_part" frames, the final one marked last. No bridges is
// one empty snapshot frame. Pure.
//
// Who calls it (once wired): the mesh link loop when a link comes up, right after the hello, with
// the bridges the table holds for this machine and the sequence number they were taken at (the
// link's first delta is sequence + 1). The frames go to that link's OutboundQueue in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "controld/mesh/mesh_types.h"

namespace ot::mesh {

// Whole frames (length prefix included). Each entry is encoded once. `maxPartBytes` is a parameter
// for tests; an entry larger than it alone (impossible with the route limits at 4 MiB) still goes
// out, in a part of its own.
[[nodiscard]] std::vector<std::string> encodeSnapshot(std::span<const BridgeEntry> bridges,
                                                      uint64_t sequence, int64_t sentAtMs,
                                                      size_t maxPartBytes = kMaxSnapshotPartBytes);

}  // namespace ot::mesh
