#include "relayd/control_mirror.h"

#include <algorithm>
#include <utility>

namespace ot::relayd {

void BridgeMirror::attached(v1::Bridge bridge) {
  std::string id = std::move(*bridge.mutable_bridge_id());
  bridge.clear_bridge_id();  // the key holds it
  bridges_.insert_or_assign(std::move(id), bridge.SerializeAsString());
}

bool BridgeMirror::detached(const std::string& bridgeId) {
  return bridges_.erase(bridgeId) > 0;
}

std::vector<v1::RelayMessage> BridgeMirror::snapshot(size_t maxPerPart) const {
  const size_t perPart = std::max<size_t>(maxPerPart, 1);
  std::vector<v1::RelayMessage> parts;
  parts.reserve(bridges_.size() / perPart + 1);
  std::vector<const Entries::value_type*> sorted;
  sorted.reserve(bridges_.size());
  for (const auto& entry : bridges_) sorted.push_back(&entry);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  v1::BridgeSnapshot* part = nullptr;
  for (const auto* entry : sorted) {
    if (part == nullptr || static_cast<size_t>(part->bridges_size()) >= perPart) {
      part = parts.emplace_back().mutable_snapshot();
    }
    v1::Bridge* bridge = part->add_bridges();
    // Written by attached() from a message of the same type: it parses.
    (void)bridge->ParseFromString(entry->second);
    bridge->set_bridge_id(entry->first);
  }
  if (parts.empty()) parts.emplace_back().mutable_snapshot();
  parts.back().mutable_snapshot()->set_last(true);
  return parts;
}

namespace {

// The origin's share in `entry`: found by a scan (at most kMaxOriginsPerTunnel short names, on a
// stream's close only), added when there is room; nullptr when the tunnel already has as many.
v1::OriginCounters* originShare(v1::TunnelCounters& entry, const std::string& origin) {
  for (auto& share : *entry.mutable_origins()) {
    if (share.origin() == origin) return &share;
  }
  if (static_cast<size_t>(entry.origins_size()) >= UsageTally::kMaxOriginsPerTunnel) return nullptr;
  v1::OriginCounters* share = entry.add_origins();
  share->set_origin(origin);
  return share;
}

}  // namespace

void UsageTally::add(const std::string& tunnelId, uint64_t bytesIn, uint64_t bytesOut,
                     uint64_t connections, uint64_t rejected, const std::string& origin) {
  if (bytesIn == 0 && bytesOut == 0 && connections == 0 && rejected == 0) return;
  v1::TunnelCounters& entry = tunnels_[tunnelId];
  entry.set_bytes_in(entry.bytes_in() + bytesIn);
  entry.set_bytes_out(entry.bytes_out() + bytesOut);
  entry.set_connections(entry.connections() + connections);
  entry.set_rejected_connections(entry.rejected_connections() + rejected);
  if (origin.empty() || (bytesIn == 0 && bytesOut == 0 && connections == 0)) return;
  if (v1::OriginCounters* share = originShare(entry, origin)) {
    share->set_bytes_in(share->bytes_in() + bytesIn);
    share->set_bytes_out(share->bytes_out() + bytesOut);
    share->set_connections(share->connections() + connections);
  }
}

void UsageTally::restore(const v1::Counters& counters) {
  for (const auto& tunnel : counters.tunnels()) {
    add(tunnel.tunnel_id(), tunnel.bytes_in(), tunnel.bytes_out(), tunnel.connections(),
        tunnel.rejected_connections());
    // The shares were part of the totals just added back: only the split is restored.
    if (tunnel.origins().empty()) continue;
    v1::TunnelCounters& entry = tunnels_[tunnel.tunnel_id()];
    for (const auto& origin : tunnel.origins()) {
      if (v1::OriginCounters* share = originShare(entry, origin.origin())) {
        share->set_bytes_in(share->bytes_in() + origin.bytes_in());
        share->set_bytes_out(share->bytes_out() + origin.bytes_out());
        share->set_connections(share->connections() + origin.connections());
      }
    }
  }
}

std::optional<v1::RelayMessage> UsageTally::take(int64_t intervalStartUnixMs,
                                                 int64_t intervalEndUnixMs) {
  if (tunnels_.empty()) return std::nullopt;
  v1::RelayMessage message;
  v1::Counters* counters = message.mutable_counters();
  counters->set_interval_start_unix_ms(intervalStartUnixMs);
  counters->set_interval_end_unix_ms(intervalEndUnixMs);
  counters->mutable_tunnels()->Reserve(static_cast<int>(tunnels_.size()));
  for (auto& [id, usage] : tunnels_) {
    v1::TunnelCounters* entry = counters->add_tunnels();
    *entry = std::move(usage);
    entry->set_tunnel_id(id);
    // By name, so a report does not depend on which origin's stream closed first.
    std::sort(entry->mutable_origins()->begin(), entry->mutable_origins()->end(),
              [](const v1::OriginCounters& a, const v1::OriginCounters& b) {
                return a.origin() < b.origin();
              });
  }
  tunnels_.clear();
  return message;
}

ReconnectBackoff::ReconnectBackoff(uint64_t initialMs, uint64_t maxMs)
    : initialMs_(std::max<uint64_t>(initialMs, 1)),
      maxMs_(std::max(maxMs, std::max<uint64_t>(initialMs, 1))),
      step_(initialMs_) {}

uint64_t ReconnectBackoff::next(double unit) {
  const double clamped = std::clamp(unit, 0.0, 1.0);
  const uint64_t half = step_ / 2;
  const uint64_t wait = half + static_cast<uint64_t>(clamped * static_cast<double>(step_ - half));
  step_ = step_ >= maxMs_ / 2 ? maxMs_ : step_ * 2;
  return wait;
}

std::vector<v1::RelayMessage> packRelayBatches(std::deque<v1::RelayMessage> messages, bool batches,
                                               size_t maxMessages, size_t maxBytes) {
  std::vector<v1::RelayMessage> out;
  if (!batches || messages.size() <= 1) {
    out.reserve(messages.size());
    for (auto& message : messages) out.push_back(std::move(message));
    return out;
  }
  const size_t perBatch = std::max<size_t>(maxMessages, 1);
  v1::RelayMessage group;
  size_t groupBytes = 0;
  auto close = [&out, &group, &groupBytes] {
    auto* list = group.mutable_batch()->mutable_messages();
    if (list->size() == 1) {
      v1::RelayMessage single = std::move(*list->Mutable(0));
      out.push_back(std::move(single));
    } else if (!list->empty()) {
      out.push_back(std::move(group));
    }
    group = v1::RelayMessage();
    groupBytes = 0;
  };
  for (auto& message : messages) {
    // One more size pass per message (the batch's serialization sizes it again): small next to a
    // Write saved.
    const size_t bytes = message.ByteSizeLong();
    const int count = group.has_batch() ? group.batch().messages_size() : 0;
    if (count > 0 && (static_cast<size_t>(count) >= perBatch || groupBytes + bytes > maxBytes)) {
      close();
    }
    *group.mutable_batch()->add_messages() = std::move(message);
    groupBytes += bytes;
  }
  close();
  return out;
}

}  // namespace ot::relayd
