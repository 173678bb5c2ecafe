// Hourly usage accounting from relayd's Counters reports, per tunnel and, when the store has the
// UsageOriginStore role, per named origin (docs/pools-usage.md). add() folds a report into
// per-(tunnel, hour) sums in memory and returns at once: it runs on a relay session's reader
// thread, which must never wait for the database. A background thread (or flush()) adds the sums to
// the store with addUsage (addOriginUsage for the shares), which adds rather than overwrites, so
// several relays and controlds can report the same hour. Rows whose write fails stay pending and
// are retried; past max_pending rows, new rows are dropped and counted (a database down for a long
// time must not grow memory unbounded). Thread-safe. The store must outlive the recorder.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/periodic_task.h"
#include "common/result.h"
#include "controld/store/store.h"
#include "controld/store/usage_origin_store.h"
#include "opentunnel/control/v1/control.pb.h"

namespace ot::controld {

inline constexpr int64_t kHourMs = 3'600'000;

struct UsageRow {
  std::string tunnelId;
  int64_t hourStartMs = 0;
  int64_t bytesIn = 0;
  int64_t bytesOut = 0;
  int64_t connections = 0;
  std::string origin{};  // "": the tunnel's total; a name: that origin's share of it
  bool operator==(const UsageRow&) const = default;
};

// The start of the UTC hour holding unix_ms.
[[nodiscard]] int64_t hourStart(int64_t unixMs);

// The rows one report adds. A report covers seconds to a minute, so it is not split: all of it
// counts in the hour its interval ended in (now_ms when the report has no end). Counts above
// INT64_MAX are clamped; tunnels with nothing to count are skipped. Each tunnel gives its total
// row (origin "") and one row per named origin in TunnelCounters.origins (names that are not
// valid origin names are skipped).
[[nodiscard]] std::vector<UsageRow> usageRows(const opentunnel::control::v1::Counters& counters,
                                              int64_t nowMs);

struct UsageRecorderOptions {
  std::chrono::milliseconds flushInterval{10000};
  size_t maxPending = 100000;  // distinct (tunnel, hour, origin) rows held in memory
  Clock nowMs;                 // empty: the system clock
};

class UsageRecorder {
 public:
  explicit UsageRecorder(UsageStore& store, UsageRecorderOptions options = {});
  ~UsageRecorder();  // stop()
  UsageRecorder(const UsageRecorder&) = delete;
  UsageRecorder& operator=(const UsageRecorder&) = delete;

  // Never blocks on the store.
  void add(const opentunnel::control::v1::Counters& counters);
  // Writes everything pending now, on the calling thread. Returns the first failure; the rows
  // that failed stay pending.
  Status flush();
  // The background thread: flushes every flush_interval, and once more when stopped.
  void start();
  void stop();

  [[nodiscard]] size_t pending() const;
  [[nodiscard]] uint64_t droppedRows() const;

 private:
  using Key = std::tuple<std::string, int64_t, std::string>;  // tunnel, hour, origin
  void mergeLocked(const UsageRow& row);
  [[nodiscard]] int64_t nowMs() const;

  UsageStore& store_;
  UsageOriginStore* const origins_;  // the store's per-origin role; null: totals only
  const UsageRecorderOptions options_;

  mutable std::mutex mutex_;
  std::map<Key, UsageRow> pending_;
  uint64_t droppedRows_ = 0;

  std::mutex flushMutex_;  // one flush at a time
  PeriodicTask task_;      // last: stopped before the members its rounds read go
};

}  // namespace ot::controld
