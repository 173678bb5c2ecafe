// relayd's machine-wide figures as controld keeps them (RelayStats in control.proto): open
// visitor connections and bridges, visitor outcomes (forwarded_out, forwarded_in, ...), forward
// failures by reason and mesh lookups, totals since that relayd started. relayd sends them with
// Counters when they change (about once a second at most); the hub keeps the latest per session
// (RelayInfo::figures) and the admin stats show them (docs/api.md "Admin"). Pure.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "opentunnel/control/v1/control.pb.h"

namespace ot::controld {

struct RelayFigures {
  int64_t takenAtMs = 0;  // relayd's clock when it read them; the newest when summed
  uint64_t visitorConnectionsOpen = 0;
  uint64_t bridgesAttached = 0;
  std::map<std::string, uint64_t> visitors;         // by outcome
  std::map<std::string, uint64_t> forwardFailures;  // by reason
  uint64_t meshLookupsHit = 0;
  uint64_t meshLookupsMiss = 0;
};

// At most this many entries of each map are kept, keys at most kMaxFigureKey bytes (the label
// values relayd sends are a dozen short names; anything else is not taken in).
inline constexpr size_t kMaxFigureEntries = 64;
inline constexpr size_t kMaxFigureKey = 64;

[[nodiscard]] RelayFigures relayFiguresFromProto(
    const ::opentunnel::control::v1::RelayStats& stats);

// Adds `from` into `into` (several relayd sessions on one controld: the machine's total).
void addRelayFigures(RelayFigures& into, const RelayFigures& from);

}  // namespace ot::controld
