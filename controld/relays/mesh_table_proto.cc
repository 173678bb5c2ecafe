#include "controld/relays/mesh_table_proto.h"

#include <algorithm>
#include <utility>

namespace ot::controld {
namespace {

void fill(cv1::MeshHolder* out, const mesh::FeedHolder& holder) {
  out->set_tunnel_id(holder.tunnelId);
  out->set_route(holder.route);
  out->set_machine_id(holder.machineId);
  out->set_attached_at_unix_ms(holder.attachedAtMs);
  out->set_origin(holder.origin);
}

void fill(cv1::MeshPeer* out, const mesh::FeedPeer& peer) {
  out->set_machine_id(peer.machineId);
  out->set_internal_address(peer.internalAddress);
  out->set_linked(peer.linked);
}

}  // namespace

cv1::ControlMessage meshDeltaMessage(const mesh::FeedDelta& delta) {
  cv1::ControlMessage message;
  cv1::MeshTableDelta* out = message.mutable_mesh_delta();
  out->set_version(delta.version);
  for (const auto& holder : delta.added) fill(out->add_added(), holder);
  for (const auto& holder : delta.removed) fill(out->add_removed(), holder);
  if (delta.peers) {
    out->set_peers_changed(true);
    for (const auto& peer : *delta.peers) fill(out->add_peers(), peer);
  }
  return message;
}

std::vector<cv1::ControlMessage> meshSnapshotMessages(const mesh::FeedSnapshot& snapshot,
                                                      size_t holdersPerPart) {
  holdersPerPart = std::max<size_t>(holdersPerPart, 1);
  std::vector<cv1::ControlMessage> parts;
  size_t next = 0;
  do {
    cv1::ControlMessage message;
    cv1::MeshTableSnapshot* part = message.mutable_mesh_snapshot();
    part->set_version(snapshot.version);
    if (parts.empty()) {
      for (const auto& peer : snapshot.peers) fill(part->add_peers(), peer);
    }
    const size_t end = std::min(snapshot.holders.size(), next + holdersPerPart);
    for (; next < end; ++next) fill(part->add_holders(), snapshot.holders[next]);
    part->set_last(next == snapshot.holders.size());
    parts.push_back(std::move(message));
  } while (next < snapshot.holders.size());
  return parts;
}

mesh::RouteFeedSink relayHubFeedSink(RelayHub& hub) {
  mesh::RouteFeedSink sink;
  sink.delta = [&hub](const mesh::FeedDelta& delta) { hub.meshDelta(meshDeltaMessage(delta)); };
  sink.snapshot = [&hub](const std::string& relayKey, const mesh::FeedSnapshot& snapshot) {
    hub.meshSnapshot(relayKey, meshSnapshotMessages(snapshot));
  };
  return sink;
}

}  // namespace ot::controld
