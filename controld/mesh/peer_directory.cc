#include "controld/mesh/peer_directory.h"

#include <algorithm>

namespace ot::mesh {

PeerDirectory::PeerDirectory(std::string selfAddress, const MeshSettings& settings,
                             std::function<double()> random)
    : selfAddress_(std::move(selfAddress)), settings_(settings), random_(std::move(random)) {}

int64_t PeerDirectory::firstDelay(const std::string& address) const {
  // The higher address waits, so the lower one's dial usually makes the pair's only link.
  return addressLess(address, selfAddress_) ? settings_.higherAddressDelayMs : 0;
}

int64_t PeerDirectory::jittered(int64_t ms) const {
  // 80-120 % of the delay, so machines that failed together do not retry together.
  return static_cast<int64_t>(static_cast<double>(ms) * (0.8 + 0.4 * random_()));
}

PeerDirectory::Peer& PeerDirectory::add(const std::string& address, int64_t nowMs) {
  auto [found, inserted] = peers_.try_emplace(address);
  if (inserted) found->second.nextDialAtMs = nowMs + firstDelay(address);
  return found->second;
}

void PeerDirectory::addConfigured(const std::string& address, int64_t nowMs) {
  if (address == selfAddress_) return;
  add(address, nowMs).configured = true;
}

void PeerDirectory::sawInDns(const std::vector<std::string>& addresses, int64_t nowMs) {
  for (const auto& address : addresses) {
    if (address == selfAddress_) continue;
    add(address, nowMs).dnsSeenAtMs = nowMs;
  }
}

void PeerDirectory::expire(int64_t nowMs) {
  std::erase_if(peers_, [&](const auto& item) {
    const Peer& peer = item.second;
    return !peer.configured && !peer.up && !peer.dialing &&
           nowMs - peer.dnsSeenAtMs > settings_.goneFromDnsGraceMs;
  });
}

std::vector<std::string> PeerDirectory::dueDials(int64_t nowMs) {
  std::vector<std::string> due;
  for (auto& [address, peer] : peers_) {
    if (peer.up || peer.dialing || nowMs < peer.nextDialAtMs) continue;
    peer.dialing = true;
    due.push_back(address);
  }
  return due;
}

void PeerDirectory::dialEnded(const std::string& address, bool cameUp, int64_t nowMs) {
  auto found = peers_.find(address);
  if (found == peers_.end()) return;
  Peer& peer = found->second;
  peer.dialing = false;
  if (cameUp) {
    // linkDown (or a link up the other way) decides; at the least, not again at once.
    peer.nextDialAtMs = std::max(peer.nextDialAtMs, nowMs + jittered(settings_.dialBackoffMinMs));
    return;
  }
  peer.backoffMs =
      std::clamp(peer.backoffMs * 2, settings_.dialBackoffMinMs, settings_.dialBackoffMaxMs);
  peer.nextDialAtMs = nowMs + jittered(peer.backoffMs);
  if (!peer.up) peer.state = PeerState::kUnreachable;
}

void PeerDirectory::linkUp(const std::string& address, const std::string& machine) {
  auto found = peers_.find(address);
  if (found == peers_.end()) return;
  found->second.up = true;
  found->second.state = PeerState::kUp;
  found->second.machine = machine;
  found->second.backoffMs = 0;
}

void PeerDirectory::linkDown(const std::string& address, int64_t nowMs) {
  auto found = peers_.find(address);
  if (found == peers_.end()) return;
  Peer& peer = found->second;
  peer.up = false;
  peer.state = PeerState::kConnecting;
  peer.nextDialAtMs = nowMs + std::max(firstDelay(address), jittered(settings_.dialBackoffMinMs));
}

std::vector<PeerView> PeerDirectory::view() const {
  std::vector<PeerView> views;
  views.reserve(peers_.size());
  for (const auto& [address, peer] : peers_) views.push_back({address, peer.state, peer.machine});
  return views;
}

size_t PeerDirectory::count(PeerState state) const {
  return static_cast<size_t>(std::count_if(
      peers_.begin(), peers_.end(), [&](const auto& item) { return item.second.state == state; }));
}

}  // namespace ot::mesh
