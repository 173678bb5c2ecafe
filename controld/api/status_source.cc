#include "controld/api/status_source.h"

#include <algorithm>
#include <tuple>
#include <utility>

namespace ot::controld {
namespace {

using ProfileKey = std::pair<uint32_t, std::string>;  // index, name

struct OriginAcc {
  TunnelStatusOrigin origin;
  std::map<ProfileKey, TunnelStatusProfile> profiles;
};

std::vector<TunnelStatusOrigin> finish(std::map<std::string, OriginAcc>& origins) {
  std::vector<TunnelStatusOrigin> out;
  for (auto& [name, acc] : origins) {
    acc.origin.name = name;
    for (auto& [key, profile] : acc.profiles) acc.origin.profiles.push_back(std::move(profile));
    out.push_back(std::move(acc.origin));
  }
  return out;
}

}  // namespace

TunnelStatusInputs statusFromReplies(const std::vector<cv1::TunnelStatusReply>& replies) {
  std::map<std::string, OriginAcc> origins;
  for (const cv1::TunnelStatusReply& reply : replies) {
    for (const cv1::OriginStatus& o : reply.origins()) {
      OriginAcc& acc = origins[o.name()];
      // The freshest report wins when several relays hold one.
      const bool fresher =
          o.reported() && (!acc.origin.reported || o.report_age_ms() < acc.origin.reportAgeMs);
      if (fresher) {
        acc.origin.reported = true;
        acc.origin.reportAgeMs = o.report_age_ms();
      }
      for (const cv1::OriginStatusProfile& p : o.profiles()) {
        TunnelStatusProfile& line = acc.profiles[{p.index(), p.name()}];
        line.name = p.name();
        line.index = p.index();
        line.links += p.links();
        line.openStreams += p.open_streams();
        if (fresher || (o.reported() && line.linksWanted == 0 && line.lastError.empty())) {
          line.linksWanted = p.links_wanted();
          line.linksUp = p.links_up();
          line.nextTryMs = p.next_try_ms();
          line.lastError = p.last_error();
        }
      }
    }
  }
  TunnelStatusInputs inputs;
  inputs.relayConnected = true;
  inputs.relayAnswered = true;
  inputs.origins = finish(origins);
  return inputs;
}

std::vector<TunnelStatusOrigin> statusFromRegistry(const std::vector<BridgeEntry>& bridges) {
  std::map<std::string, OriginAcc> origins;
  for (const BridgeEntry& bridge : bridges) {
    TunnelStatusProfile& line =
        origins[bridge.origin].profiles[{bridge.profileIndex, bridge.profile}];
    line.name = bridge.profile;
    line.index = bridge.profileIndex;
    ++line.links;
  }
  return finish(origins);
}

TunnelStatusSource::TunnelStatusSource(RelayHub& hub, const BridgeRegistry& registry,
                                       std::function<mesh::MeshNode*()> mesh,
                                       std::chrono::milliseconds deadline)
    : hub_(hub), registry_(registry), mesh_(std::move(mesh)), deadline_(deadline) {
  hub_.setTunnelStatusHandler(
      [this](const std::string&, const cv1::TunnelStatusReply& reply) { onReply(reply); });
}

void addPeerBridges(TunnelStatusInputs& inputs, const std::vector<mesh::BridgeEntry>& peers) {
  for (const mesh::BridgeEntry& bridge : peers) {
    ++inputs.peerLinks;
    auto origin =
        std::find_if(inputs.origins.begin(), inputs.origins.end(),
                     [&](const TunnelStatusOrigin& o) { return o.name == bridge.origin; });
    if (origin == inputs.origins.end()) {
      TunnelStatusOrigin added;
      added.name = bridge.origin;
      const auto place = std::upper_bound(
          inputs.origins.begin(), inputs.origins.end(), bridge.origin,
          [](const std::string& name, const TunnelStatusOrigin& o) { return name < o.name; });
      origin = inputs.origins.insert(place, std::move(added));
    }
    ++origin->peerLinks;
    auto& machines = origin->peerMachines;
    const auto at = std::lower_bound(machines.begin(), machines.end(), bridge.machine);
    if (at == machines.end() || *at != bridge.machine) machines.insert(at, bridge.machine);
  }
}

TunnelStatusSource::~TunnelStatusSource() {
  hub_.setTunnelStatusHandler(nullptr);
}

void TunnelStatusSource::onReply(const cv1::TunnelStatusReply& reply) {
  const std::lock_guard lock(mutex_);
  auto it = pending_.find(reply.command_id());
  if (it == pending_.end()) return;  // its asker gave up
  it->second.replies.push_back(reply);
  answered_.notify_all();
}

TunnelStatusInputs TunnelStatusSource::gather(const std::string& tunnelId) {
  size_t relays = 0;
  for (const RelayInfo& relay : hub_.relays()) relays += relay.draining ? 0 : 1;
  std::vector<cv1::TunnelStatusReply> replies;
  size_t expected = 0;
  if (relays > 0) {
    cv1::Command command;
    command.mutable_tunnel_status()->set_tunnel_id(tunnelId);
    std::unique_lock lock(mutex_);
    // Sent under the lock, so a reply cannot arrive before its entry exists.
    const RelayHub::CommandSent sent = hub_.sendCommand("", std::move(command));
    expected = sent.relays;
    if (expected > 0) {
      pending_[sent.id].expected = expected;
      (void)answered_.wait_for(lock, deadline_, [&] {
        return pending_[sent.id].replies.size() >= pending_[sent.id].expected;
      });
      replies = std::move(pending_[sent.id].replies);
      pending_.erase(sent.id);
    }
  }
  TunnelStatusInputs inputs;
  if (!replies.empty()) {
    inputs = statusFromReplies(replies);
  } else {
    inputs.origins = statusFromRegistry(registry_.bridgesOf(tunnelId));
  }
  inputs.relayConnected = expected > 0;
  inputs.relayAnswered = !replies.empty();
  if (mesh::MeshNode* node = mesh_ ? mesh_() : nullptr) {
    addPeerBridges(inputs, node->peerBridgesOf({tunnelId}));
  }
  return inputs;
}

}  // namespace ot::controld
