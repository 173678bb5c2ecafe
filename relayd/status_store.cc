#include "relayd/status_store.h"

#include <algorithm>
#include <tuple>

namespace ot::relayd {

namespace v1 = opentunnel::control::v1;

size_t StatusStore::KeyHash::operator()(const KeyView& key) const noexcept {
  const size_t tunnel = std::hash<std::string_view>{}(key.first);
  return tunnel ^ (std::hash<std::string_view>{}(key.second) + 0x9e3779b97f4a7c15ULL +
                   (tunnel << 6) + (tunnel >> 2));
}

void StatusStore::addSender(Entry& entry, uint64_t bridgeKey) {
  if (std::find(entry.senders.begin(), entry.senders.end(), bridgeKey) == entry.senders.end())
    entry.senders.push_back(bridgeKey);
}

bool StatusStore::touch(const std::string& tunnelId, const std::string& origin, uint64_t bridgeKey,
                        std::string_view text, uint64_t nowMs, StatusEntry** known) {
  if (known != nullptr && *known != nullptr) {
    Entry& entry = **known;  // this bridge is among its senders already
    if (entry.text != text) return false;
    entry.receivedAtMs = nowMs;
    return true;
  }
  auto it = entries_.find(KeyView(tunnelId, origin));
  if (it == entries_.end() || it->second.text != text) return false;
  Entry& entry = it->second;
  entry.receivedAtMs = nowMs;
  addSender(entry, bridgeKey);
  if (known != nullptr) *known = &entry;
  return true;
}

bool StatusStore::record(const std::string& tunnelId, const std::string& origin, uint64_t bridgeKey,
                         bridge::StatusReport report, std::string_view text, uint64_t nowMs,
                         StatusEntry** known) {
  Entry* entry = known != nullptr ? *known : nullptr;
  if (entry == nullptr) {
    auto it = entries_.find(KeyView(tunnelId, origin));
    if (it == entries_.end()) {
      if (entries_.size() >= maxEntries_) {
        ++dropped_;
        return false;
      }
      it = entries_.emplace(Key(tunnelId, origin), Entry{}).first;
    }
    entry = &it->second;
  }
  entry->report = std::move(report);
  entry->text.assign(text);
  entry->receivedAtMs = nowMs;
  addSender(*entry, bridgeKey);
  if (known != nullptr) *known = entry;
  return true;
}

void StatusStore::forget(const std::string& tunnelId, const std::string& origin, uint64_t bridgeKey,
                         StatusEntry** known) {
  if (known != nullptr) *known = nullptr;
  auto it = entries_.find(KeyView(tunnelId, origin));
  if (it == entries_.end()) return;
  auto& senders = it->second.senders;
  senders.erase(std::remove(senders.begin(), senders.end(), bridgeKey), senders.end());
  if (senders.empty()) entries_.erase(it);
}

v1::TunnelStatusReply StatusStore::reply(const std::string& tunnelId,
                                         const std::vector<StatusBridge>& bridges,
                                         uint64_t nowMs) const {
  // origin -> (index, profile) -> the profile's line. Ordered maps: the reply is sorted.
  struct Line {
    uint32_t links = 0;
    uint32_t streams = 0;
    const bridge::ProfileReport* reported = nullptr;
  };
  std::map<std::string, std::map<std::pair<uint32_t, std::string>, Line>> origins;
  for (const StatusBridge& b : bridges) {
    Line& line = origins[b.origin][{b.profileIndex, b.profile}];
    ++line.links;
    line.streams += b.streams;
  }
  v1::TunnelStatusReply out;
  out.set_tunnel_id(tunnelId);
  for (auto& [origin, profiles] : origins) {
    v1::OriginStatus* o = out.add_origins();
    o->set_name(origin);
    const auto found = entries_.find(KeyView(tunnelId, origin));
    const Entry* entry = found == entries_.end() ? nullptr : &found->second;
    uint64_t age = 0;
    if (entry != nullptr) {
      age = nowMs > entry->receivedAtMs ? nowMs - entry->receivedAtMs : 0;
      o->set_reported(true);
      o->set_report_age_ms(age);
      // Profiles the report names, also those with no bridge here (unreachable ones).
      for (const bridge::ProfileReport& p : entry->report.profiles)
        profiles[{p.index, p.name}].reported = &p;
    }
    for (const auto& [key, line] : profiles) {
      v1::OriginStatusProfile* p = o->add_profiles();
      p->set_index(key.first);
      p->set_name(key.second);
      p->set_links(line.links);
      p->set_open_streams(line.streams);
      if (line.reported == nullptr) continue;
      p->set_links_wanted(line.reported->linksWanted);
      p->set_links_up(line.reported->linksUp);
      const uint64_t next = line.reported->nextTryMs;
      p->set_next_try_ms(next > age ? next - age : 0);
      p->set_last_error(line.reported->lastError);
    }
  }
  return out;
}

}  // namespace ot::relayd
