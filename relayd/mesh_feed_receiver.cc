#include "relayd/mesh_feed_receiver.h"

#include <utility>

namespace ot::relayd {
namespace {

namespace v1 = ::opentunnel::control::v1;

MeshRouteHolder holderFrom(const v1::MeshHolder& holder) {
  return MeshRouteHolder{holder.tunnel_id(), holder.route(), holder.machine_id(),
                         holder.attached_at_unix_ms(), holder.origin()};
}

std::vector<MeshPeer> peersFrom(const google::protobuf::RepeatedPtrField<v1::MeshPeer>& peers) {
  std::vector<MeshPeer> out;
  out.reserve(static_cast<size_t>(peers.size()));
  for (const auto& peer : peers) {
    out.push_back(MeshPeer{peer.machine_id(), peer.internal_address(), peer.linked()});
  }
  return out;
}

}  // namespace

void MeshFeedReceiver::sessionChanged() {
  awaitingSnapshot_ = true;
  partsVersion_.reset();
  partsPeers_.clear();
  partsHolders_.clear();
}

MeshFeedReceiver::Outcome MeshFeedReceiver::snapshotPart(const v1::MeshTableSnapshot& part) {
  if (!partsVersion_ || *partsVersion_ != part.version()) {
    // The first part (a snapshot cut short by another starts over with the new one's).
    partsVersion_ = part.version();
    partsPeers_ = peersFrom(part.peers());
    partsHolders_.clear();
  }
  partsHolders_.reserve(partsHolders_.size() + static_cast<size_t>(part.holders_size()));
  for (const auto& holder : part.holders()) partsHolders_.push_back(holderFrom(holder));
  if (!part.last()) return Outcome::kPartial;
  table_.replace(*partsVersion_, std::move(partsPeers_), partsHolders_);
  partsVersion_.reset();
  partsPeers_ = {};
  partsHolders_ = {};
  awaitingSnapshot_ = false;
  return Outcome::kSnapshotApplied;
}

MeshFeedReceiver::Outcome MeshFeedReceiver::delta(const v1::MeshTableDelta& message) {
  MeshRouteDelta delta;
  delta.version = message.version();
  if (delta.version <= table_.version()) return Outcome::kStale;
  if (delta.version != table_.version() + 1 || awaitingSnapshot_) {
    if (awaitingSnapshot_) return Outcome::kGapWaiting;
    awaitingSnapshot_ = true;
    return Outcome::kGap;
  }
  delta.added.reserve(static_cast<size_t>(message.added_size()));
  for (const auto& holder : message.added()) delta.added.push_back(holderFrom(holder));
  delta.removed.reserve(static_cast<size_t>(message.removed_size()));
  for (const auto& holder : message.removed()) delta.removed.push_back(holderFrom(holder));
  if (message.peers_changed()) delta.peers = peersFrom(message.peers());
  switch (table_.apply(delta)) {
    case MeshRouteTable::Apply::kApplied:
      return Outcome::kDeltaApplied;
    case MeshRouteTable::Apply::kStale:
      return Outcome::kStale;
    case MeshRouteTable::Apply::kGap:
      break;
  }
  awaitingSnapshot_ = true;
  return Outcome::kGap;
}

}  // namespace ot::relayd
