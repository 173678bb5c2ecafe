// Usage per origin (docs/pools-usage.md): each named origin's share of a tunnel's hourly usage.
// The shares sit in usage_hourly beside the tunnel's total (origin ''; UsageStore), keyed by
// (tunnel, hour, origin), and are never summed into the total, so no byte counts twice.
//
// A role of its own rather than more of UsageStore: the readers and writers that can split by
// origin ask their store for it (SqlStore has it; a test's wrapping store may not, and then only
// the totals are kept), and every existing UsageStore keeps its contract.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace ot::controld {

// One named origin's share of a tunnel's usage in one UTC hour, as stored.
struct UsageOriginHour {
  std::string origin;
  int64_t hourStartMs = 0;
  int64_t bytesIn = 0;
  int64_t bytesOut = 0;
  int64_t connections = 0;
  bool operator==(const UsageOriginHour&) const = default;
};

class UsageOriginStore {
 public:
  virtual ~UsageOriginStore() = default;
  // Adds to the origin's row of that hour (several relays and controlds report the same hour).
  // `origin` is a valid origin name, never "" (that row is the total: UsageStore::addUsage).
  virtual Status addOriginUsage(const std::string& tunnelId, int64_t hourStartMs,
                                const std::string& origin, int64_t bytesIn, int64_t bytesOut,
                                int64_t connections) = 0;
  // The named origins' rows with from_ms <= hour_start < to_ms, by origin then hour. The caller
  // bounds the window; relayd reports at most 32 origins per tunnel and report.
  virtual Result<std::vector<UsageOriginHour>> usageOriginHours(const std::string& tunnelId,
                                                                int64_t fromMs, int64_t toMs) = 0;
};

// `store`'s per-origin role when it has one, else nullptr.
template <typename S>
[[nodiscard]] UsageOriginStore* usageOriginRole(S* store) {
  return dynamic_cast<UsageOriginStore*>(store);
}

}  // namespace ot::controld
