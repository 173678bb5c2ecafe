// The vocabulary the mesh's pure pieces share (docs/mesh.md): one bridge as the table holds it and
// the link frames carry it, and the mesh's fixed limits. Plain values, no behaviour: the link
// codec (link_frames.h), the receive state (link_receiver.h) and the bridge table
// (bridge_table.h) all include this, so none of them depends on another for its types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ot::mesh {

// The version a hello names (docs/mesh.md, "Link frames"). Additions (new frame types, new fields)
// need no bump: receivers ignore what they do not know.
inline constexpr uint32_t kLinkFormatVersion = 1;

// Frame bodies (the JSON after the 4-byte length): the first frame on a link (the hello) at most
// kMaxHelloBytes, every later one at most kMaxFrameBytes.
inline constexpr size_t kMaxHelloBytes = 4 * 1024;
inline constexpr size_t kMaxFrameBytes = 16 * 1024 * 1024;
// A snapshot goes out in parts whose encoded entries (the "bridges" array) take at most this.
inline constexpr size_t kMaxSnapshotPartBytes = 4 * 1024 * 1024;
// A sender whose queue to one peer holds this many frames disconnects that peer (it starts over
// with a fresh snapshot).
inline constexpr size_t kMaxFramesBehind = 200000;
// Routes one bridge may claim (the bridge protocol's own bound, kMaxRoutesPerAttach).
inline constexpr size_t kMaxRoutesPerBridge = 128;
// Text fields from a peer: machine ID and region follow validMachineName (1-64 characters);
// these bound the rest.
inline constexpr size_t kMaxAddressLength = 128;
inline constexpr size_t kMaxBridgeIdLength = 128;

// One live bridge of one machine. Each machine is the only writer of its own entries; peers learn
// them from the snapshot and the attached/detached deltas of that machine's link.
struct BridgeEntry {
  std::string machine;  // the machine holding the bridge (on the wire: implied by the link)
  std::string tunnelId;
  std::string bridgeId;             // unique per machine
  std::vector<std::string> routes;  // "" is the tunnel's bare hostname; never empty
  int64_t attachedAtMs = 0;         // Unix ms by the holder's clock
  // The origin that attached the bridge (1-64 of [A-Za-z0-9._-], validMachineName's rule) ("" when
  // it named none, or from a peer too old to send it) and its profile's place in that origin's
  // list: every machine chooses a visitor's origin over the same set (docs/pools-mesh.md).
  std::string origin;
  uint32_t profileIndex = 0;

  friend bool operator==(const BridgeEntry&, const BridgeEntry&) = default;
};

}  // namespace ot::mesh
