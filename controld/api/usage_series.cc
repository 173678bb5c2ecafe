#include "controld/api/usage_series.h"

#include <limits>
#include <map>
#include <string>
#include <utility>

namespace ot::controld {
namespace {

constexpr int64_t kSeriesHourMs = 3'600'000;
constexpr int64_t kSeriesDayMs = 24 * kSeriesHourMs;

int64_t floorTo(int64_t ms, int64_t unit) {
  const int64_t rem = ms % unit;
  return ms - (rem < 0 ? rem + unit : rem);
}

int64_t addOrSaturate(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::numeric_limits<int64_t>::max();
  return sum;
}

}  // namespace

std::optional<UsagePeriod> parseUsagePeriod(std::string_view text) {
  if (text == "24h") return UsagePeriod::kDay;
  if (text == "30d") return UsagePeriod::kMonth;
  return std::nullopt;
}

std::string_view usagePeriodName(UsagePeriod period) {
  return period == UsagePeriod::kDay ? "24h" : "30d";
}

std::optional<std::string_view> queryValue(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name) {
      return eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

UsageWindow usageWindow(UsagePeriod period, int64_t nowMs) {
  UsageWindow window;
  window.bucketMs = period == UsagePeriod::kDay ? kSeriesHourMs : kSeriesDayMs;
  window.buckets = period == UsagePeriod::kDay ? 24 : 30;
  window.toMs = floorTo(nowMs, window.bucketMs) + window.bucketMs;
  window.fromMs = window.toMs - static_cast<int64_t>(window.buckets) * window.bucketMs;
  return window;
}

std::vector<UsageBucket> usageBuckets(const UsageWindow& window,
                                      const std::vector<UsageHour>& hours) {
  std::vector<UsageBucket> buckets(window.buckets);
  for (size_t i = 0; i < buckets.size(); ++i) {
    buckets[i].startMs = window.fromMs + static_cast<int64_t>(i) * window.bucketMs;
  }
  if (window.bucketMs <= 0) return buckets;
  for (const UsageHour& hour : hours) {
    if (hour.hourStartMs < window.fromMs || hour.hourStartMs >= window.toMs) continue;
    UsageBucket& bucket =
        buckets[static_cast<size_t>((hour.hourStartMs - window.fromMs) / window.bucketMs)];
    bucket.bytesIn = addOrSaturate(bucket.bytesIn, hour.bytesIn);
    bucket.bytesOut = addOrSaturate(bucket.bytesOut, hour.bytesOut);
    bucket.connections = addOrSaturate(bucket.connections, hour.connections);
  }
  return buckets;
}

std::vector<OriginUsage> usageByOrigin(const std::vector<UsageOriginHour>& rows) {
  std::map<std::string, std::vector<UsageHour>> byName;
  for (const UsageOriginHour& row : rows) {
    byName[row.origin].push_back(
        UsageHour{row.hourStartMs, row.bytesIn, row.bytesOut, row.connections});
  }
  std::vector<OriginUsage> origins;
  origins.reserve(byName.size());
  for (auto& [name, hours] : byName) origins.push_back(OriginUsage{name, std::move(hours)});
  return origins;
}

}  // namespace ot::controld
