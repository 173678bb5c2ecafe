// The prune of expired rate_limits rows (GCRA buckets whose budget is full again: such a row says
// what no row says). Every interval one machine of the cluster (the holder of the
// "rate_limit_sweeper" lease in meta, meta_lease.h) deletes at most max_rows of them, oldest
// first; a pass that hit the bound is followed by the next one after busy_interval_ms instead, so
// a backlog drains in short statements. Without it the table keeps one row per client address
// and tunnel ever limited.
//
// Counted in opentunnel_rate_limit_rows_pruned_total and logged (rows pruned per pass).
//
// Threads: start() runs the passes on a PeriodicTask; stop() (and the destructor) ends it
// promptly. sweepOnce() may be called directly (tests). Blocks on the store: not for I/O loops.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/clock.h"
#include "common/metrics.h"
#include "common/periodic_task.h"
#include "common/result.h"
#include "controld/store/store.h"

namespace prometheus {
class Counter;
}

namespace ot::controld {

inline constexpr const char* kRateLimitSweeperMetaKey = "rate_limit_sweeper";

struct RateLimitSweeperOptions {
  std::string owner;                   // this machine's ID, written into the lease
  int64_t intervalMs = 5 * 60 * 1000;  // between passes; also the lease's length
  int64_t busyIntervalMs = 10 * 1000;  // after a pass that pruned max_rows
  int64_t initialDelayMs = 30 * 1000;  // the first pass after start()
  int maxRows = 1000;                  // rows one pass deletes at most
  Clock nowMs;  // Unix ms for the buckets and the lease; system clock if empty
};

struct RateSweepReport {
  bool leased = false;  // false: another machine holds the lease, nothing was done
  int64_t pruned = 0;
};

class RateLimitSweeper {
 public:
  // The stores and metrics (nullable: not counted) must outlive the sweeper.
  RateLimitSweeper(RateLimitStore& rates, MetaStore& meta, RateLimitSweeperOptions options,
                   metrics::Metrics* metrics);
  ~RateLimitSweeper();
  RateLimitSweeper(const RateLimitSweeper&) = delete;
  RateLimitSweeper& operator=(const RateLimitSweeper&) = delete;

  void start();
  void stop();

  // One pass now, if this machine holds (or takes) the lease.
  Result<RateSweepReport> sweepOnce();

 private:
  [[nodiscard]] int64_t now() const;
  std::chrono::milliseconds sweepRound();

  RateLimitStore& rates_;
  MetaStore& meta_;
  RateLimitSweeperOptions options_;
  prometheus::Counter* pruned_ = nullptr;
  PeriodicTask task_;  // last: stopped before the members its rounds read go
};

}  // namespace ot::controld
