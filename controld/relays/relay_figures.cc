#include "controld/relays/relay_figures.h"

#include <algorithm>
#include <limits>

namespace ot::controld {
namespace {

uint64_t saturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

void takeMap(const google::protobuf::Map<std::string, uint64_t>& from,
             std::map<std::string, uint64_t>& into) {
  for (const auto& [key, value] : from) {
    if (into.size() >= kMaxFigureEntries) break;
    if (key.empty() || key.size() > kMaxFigureKey) continue;
    into[key] = value;
  }
}

void addMap(std::map<std::string, uint64_t>& into, const std::map<std::string, uint64_t>& from) {
  for (const auto& [key, value] : from) into[key] = saturatingAdd(into[key], value);
}

}  // namespace

RelayFigures relayFiguresFromProto(const ::opentunnel::control::v1::RelayStats& stats) {
  RelayFigures out;
  out.takenAtMs = stats.taken_at_unix_ms();
  out.visitorConnectionsOpen = stats.visitor_connections_open();
  out.bridgesAttached = stats.bridges_attached();
  takeMap(stats.visitor_connections(), out.visitors);
  takeMap(stats.forward_failures(), out.forwardFailures);
  out.meshLookupsHit = stats.mesh_lookups_hit();
  out.meshLookupsMiss = stats.mesh_lookups_miss();
  return out;
}

void addRelayFigures(RelayFigures& into, const RelayFigures& from) {
  into.takenAtMs = std::max(into.takenAtMs, from.takenAtMs);
  into.visitorConnectionsOpen =
      saturatingAdd(into.visitorConnectionsOpen, from.visitorConnectionsOpen);
  into.bridgesAttached = saturatingAdd(into.bridgesAttached, from.bridgesAttached);
  addMap(into.visitors, from.visitors);
  addMap(into.forwardFailures, from.forwardFailures);
  into.meshLookupsHit = saturatingAdd(into.meshLookupsHit, from.meshLookupsHit);
  into.meshLookupsMiss = saturatingAdd(into.meshLookupsMiss, from.meshLookupsMiss);
}

}  // namespace ot::controld
