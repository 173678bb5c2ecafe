// Authentication failures per source (a sourceKey: IPv4 address or IPv6 /64), for slowing down a
// source that keeps guessing tokens: past `maxFailures` failures within one window the source is
// refused until that window ends. Also decides, per source, when a failure or refusal may be
// logged (one line per source per `logEveryMs`, with how many were not logged meanwhile).
//
// Memory is bounded: at most `maxSources` entries; a new source past the cap evicts the one
// touched longest ago (a source that stopped failing is forgotten first). Entries whose window
// ended are dropped as they are met.
//
// Pure logic: the caller passes the time (milliseconds on any steady clock). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/log_throttle.h"

namespace ot {

struct SourceFailureLimits {
  uint32_t maxFailures = 20;     // failures one source may have in a window; 0 disables refusing
  uint64_t windowMs = 60'000;    // the window starts at a source's first failure
  size_t maxSources = 10'000;    // sources remembered at once
  uint64_t logEveryMs = 60'000;  // at most one log line per source per this long
};

class SourceFailures {
 public:
  explicit SourceFailures(SourceFailureLimits limits);

  struct Refusal {
    uint64_t retryAfterMs = 0;                  // until the source's window ends
    std::optional<uint64_t> logWithSuppressed;  // set: log now, with this many unlogged before
  };
  // Whether an attempt from `source` is refused now (it failed too often in its window).
  // A refused attempt counts toward the source's log rate, not toward its failures.
  [[nodiscard]] std::optional<Refusal> refuse(const std::string& source, uint64_t nowMs);

  struct Recorded {
    uint32_t failuresInWindow = 0;
    bool nowRefused = false;                    // this failure reached the limit
    std::optional<uint64_t> logWithSuppressed;  // set: log now, with this many unlogged before
  };
  // Counts one failure for `source`.
  Recorded recordFailure(const std::string& source, uint64_t nowMs);

  [[nodiscard]] size_t size() const { return entries_.size(); }
  [[nodiscard]] uint64_t evictions() const { return evictions_; }
  [[nodiscard]] const SourceFailureLimits& limits() const { return limits_; }

 private:
  struct Entry {
    std::string source;
    uint64_t windowStartMs = 0;
    uint32_t failures = 0;
    LogThrottle log;
  };
  using Order = std::list<Entry>;  // least recently touched first

  [[nodiscard]] bool windowOver(const Entry& entry, uint64_t nowMs) const;
  [[nodiscard]] bool refusing(const Entry& entry, uint64_t nowMs) const;
  static std::optional<uint64_t> logTurn(Entry& entry, uint64_t nowMs);
  void touch(Order::iterator it);
  void dropExpired(uint64_t nowMs);

  SourceFailureLimits limits_;
  Order order_;
  std::unordered_map<std::string, Order::iterator> entries_;
  uint64_t evictions_ = 0;
};

}  // namespace ot
