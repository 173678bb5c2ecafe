// Failed attaches per source address (IPv4 address, IPv6 /64), for slowing down a source that
// keeps guessing tokens: every bad_token counts (whether controld or the cached record decided);
// past AUTH_FAILURE_LIMIT in AUTH_FAILURE_WINDOW_MS the source's attaches are refused with
// too_many_failures before any token is looked at, until its window ends. The right token from
// that source is refused too: the relay cannot tell the owner from the guesser, and answering a
// right guess differently would make the refusal useless.
//
// Logs at most one line per source per minute (with a suppressed count); the counts are in
// opentunnel_bridge_attaches_total{result="bad_token"|"too_many_failures"}. Loop thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/source_failures.h"

namespace ot::relayd {

class AttachGuard {
 public:
  explicit AttachGuard(SourceFailureLimits limits) : failures_(limits) {}

  // Set: refuse this attach; the value is how long until the source may try again.
  [[nodiscard]] std::optional<uint64_t> refuse(const std::string& peerAddress, uint64_t nowMs);
  // An attach from `peerAddress` failed (bad_token) for `tunnelId`.
  void failed(const std::string& peerAddress, const std::string& tunnelId, uint64_t nowMs);

  [[nodiscard]] size_t sources() const { return failures_.size(); }

 private:
  SourceFailures failures_;
};

}  // namespace ot::relayd
