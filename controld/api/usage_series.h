// A tunnel's recent usage as the API shows it (GET /api/tunnel/{id}/usage, docs/api.md): the
// stored hours folded into a fixed row of buckets, hourly for the last 24 hours or daily (UTC
// days) for the last 30 days, the current one included and empty ones present as zeros, so a
// graph needs no gaps filled. Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "controld/store/store.h"
#include "controld/store/usage_origin_store.h"

namespace ot::controld {

enum class UsagePeriod { kDay, kMonth };  // "24h" (24 hourly buckets), "30d" (30 daily ones)

// "24h" or "30d"; std::nullopt for anything else.
[[nodiscard]] std::optional<UsagePeriod> parseUsagePeriod(std::string_view text);
[[nodiscard]] std::string_view usagePeriodName(UsagePeriod period);

// The value of `name` in a query string ("a=1&period=30d"), taken as written (no decoding);
// std::nullopt when absent.
[[nodiscard]] std::optional<std::string_view> queryValue(std::string_view query,
                                                         std::string_view name);

struct UsageWindow {
  int64_t fromMs = 0;    // the first bucket's start
  int64_t toMs = 0;      // the last bucket's end (after now)
  int64_t bucketMs = 0;  // an hour or a day
  size_t buckets = 0;
};

// The window ending with the bucket that holds now_ms.
[[nodiscard]] UsageWindow usageWindow(UsagePeriod period, int64_t nowMs);

struct UsageBucket {
  int64_t startMs = 0;
  int64_t bytesIn = 0;
  int64_t bytesOut = 0;
  int64_t connections = 0;
  bool operator==(const UsageBucket&) const = default;
};

// window.buckets buckets, oldest first; hours outside the window are ignored, sums saturate.
[[nodiscard]] std::vector<UsageBucket> usageBuckets(const UsageWindow& window,
                                                    const std::vector<UsageHour>& hours);

// One named origin's hours (as usageBuckets takes them).
struct OriginUsage {
  std::string origin;
  std::vector<UsageHour> hours;
  bool operator==(const OriginUsage&) const = default;
};

// The origins' hours grouped per origin, by name (the rows may come in any order).
[[nodiscard]] std::vector<OriginUsage> usageByOrigin(const std::vector<UsageOriginHour>& rows);

}  // namespace ot::controld
