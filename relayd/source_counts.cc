#include "relayd/source_counts.h"

#include "common/ip_address.h"

namespace ot::relayd {

bool SourceCounts::tryAcquire(const std::string& key, uint64_t limit) {
  auto it = counts_.find(key);
  if (it == counts_.end()) {
    if (limit == 0) return false;
    counts_.emplace(key, 1);
    return true;
  }
  if (it->second >= limit) return false;
  ++it->second;
  return true;
}

void SourceCounts::release(const std::string& key) {
  auto it = counts_.find(key);
  if (it == counts_.end()) return;
  if (--it->second == 0) counts_.erase(it);
}

uint64_t SourceCounts::count(const std::string& key) const {
  auto it = counts_.find(key);
  return it == counts_.end() ? 0 : it->second;
}

std::string peerSourceKey(std::string_view peer) {
  if (auto key = sourceKey(peer)) return *key;
  // An endpoint: "[v6]:port" or "v4:port".
  std::string_view address;
  if (!peer.empty() && peer.front() == '[') {
    const size_t close = peer.find("]:");
    if (close == std::string_view::npos) return {};
    address = peer.substr(1, close - 1);
  } else {
    const size_t colon = peer.rfind(':');
    if (colon == std::string_view::npos || peer.find(':') != colon) return {};
    address = peer.substr(0, colon);
  }
  return sourceKey(address).value_or(std::string());
}

}  // namespace ot::relayd
