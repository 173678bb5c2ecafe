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
  return sourceKey(peer).value_or(std::string());
}

}  // namespace ot::relayd
