#include "common/source_failures.h"

#include <algorithm>

namespace ot {

namespace {
// Expired entries dropped per call, so one call never walks the whole table.
constexpr int kExpiredPerCall = 4;
}  // namespace

SourceFailures::SourceFailures(SourceFailureLimits limits) : limits_(limits) {
  limits_.maxSources = std::max<size_t>(1, limits_.maxSources);
}

bool SourceFailures::windowOver(const Entry& entry, uint64_t nowMs) const {
  return nowMs - entry.windowStartMs >= limits_.windowMs;
}

bool SourceFailures::refusing(const Entry& entry, uint64_t nowMs) const {
  return limits_.maxFailures > 0 && entry.failures >= limits_.maxFailures &&
         !windowOver(entry, nowMs);
}

std::optional<uint64_t> SourceFailures::logTurn(Entry& entry, uint64_t nowMs) {
  if (uint64_t suppressed = 0; entry.log.allow(nowMs, suppressed)) return suppressed;
  return std::nullopt;
}

void SourceFailures::touch(Order::iterator it) {
  order_.splice(order_.end(), order_, it);
}

void SourceFailures::dropExpired(uint64_t nowMs) {
  // The front was touched longest ago; once its window and log interval are over it holds
  // nothing worth keeping (its next failure starts afresh either way).
  for (int i = 0; i < kExpiredPerCall && !order_.empty(); ++i) {
    const Entry& oldest = order_.front();
    if (!windowOver(oldest, nowMs) || !oldest.log.quietSince(nowMs)) return;
    entries_.erase(oldest.source);
    order_.pop_front();
  }
}

std::optional<SourceFailures::Refusal> SourceFailures::refuse(const std::string& source,
                                                              uint64_t nowMs) {
  auto found = entries_.find(source);
  if (found == entries_.end()) return std::nullopt;
  Entry& entry = *found->second;
  if (!refusing(entry, nowMs)) return std::nullopt;
  Refusal refusal;
  refusal.retryAfterMs = entry.windowStartMs + limits_.windowMs - nowMs;
  refusal.logWithSuppressed = logTurn(entry, nowMs);
  return refusal;
}

SourceFailures::Recorded SourceFailures::recordFailure(const std::string& source, uint64_t nowMs) {
  dropExpired(nowMs);
  auto found = entries_.find(source);
  Order::iterator it;
  if (found != entries_.end()) {
    it = found->second;
    touch(it);
  } else {
    if (entries_.size() >= limits_.maxSources) {
      entries_.erase(order_.front().source);
      order_.pop_front();
      ++evictions_;
    }
    order_.push_back(Entry{source, nowMs, 0, LogThrottle(limits_.logEveryMs)});
    it = std::prev(order_.end());
    entries_.emplace(source, it);
  }
  Entry& entry = *it;
  if (windowOver(entry, nowMs)) {
    entry.windowStartMs = nowMs;
    entry.failures = 0;
  }
  if (entry.failures < UINT32_MAX) entry.failures += 1;
  Recorded recorded;
  recorded.failuresInWindow = entry.failures;
  recorded.nowRefused = limits_.maxFailures > 0 && entry.failures == limits_.maxFailures;
  // The failure that starts refusing is always logged: an operator sees every source that was
  // slowed down, whatever the log rate.
  if (recorded.nowRefused) {
    recorded.logWithSuppressed = entry.log.force(nowMs);
  } else {
    recorded.logWithSuppressed = logTurn(entry, nowMs);
  }
  return recorded;
}

}  // namespace ot
