#include "controld/store/rate_limit_sweeper.h"

#include <prometheus/counter.h>

#include <utility>

#include "common/log.h"
#include "controld/store/meta_lease.h"

namespace ot::controld {
namespace {

const log::Logger kRateLimitSweeperLog("controld.rate_limits");

PeriodicTaskOptions sweepSchedule(int64_t initialDelayMs) {
  PeriodicTaskOptions schedule;
  schedule.initialDelay = std::chrono::milliseconds(initialDelayMs);
  return schedule;
}

}  // namespace

RateLimitSweeper::RateLimitSweeper(RateLimitStore& rates, MetaStore& meta,
                                   RateLimitSweeperOptions options, metrics::Metrics* metrics)
    : rates_(rates),
      meta_(meta),
      options_(std::move(options)),
      task_([this] { return sweepRound(); }, sweepSchedule(options_.initialDelayMs)) {
  if (metrics != nullptr) {
    pruned_ = &metrics->counter(metrics->prefix() + "_rate_limit_rows_pruned_total",
                                "expired rate_limits rows deleted by the periodic prune");
  }
}

RateLimitSweeper::~RateLimitSweeper() {
  stop();
}

void RateLimitSweeper::start() {
  task_.start();
}

void RateLimitSweeper::stop() {
  task_.stop();
}

int64_t RateLimitSweeper::now() const {
  return options_.nowMs ? options_.nowMs() : unixNowMs();
}

Result<RateSweepReport> RateLimitSweeper::sweepOnce() {
  RateSweepReport report;
  const int64_t started = now();
  // Another machine's unexpired lease keeps this one out for the rest of its interval; this
  // machine's own lease is renewed, so the pruning stays on one machine while it lives.
  auto taken = takeMetaLease(meta_, kRateLimitSweeperMetaKey, options_.owner, started,
                             started + options_.intervalMs);
  if (!taken) return taken.error();
  if (!*taken) return report;
  report.leased = true;
  auto pruned = rates_.pruneRates(started, options_.maxRows);
  if (!pruned) return pruned.error();
  report.pruned = *pruned;
  if (pruned_ != nullptr) pruned_->Increment(static_cast<double>(report.pruned));
  return report;
}

std::chrono::milliseconds RateLimitSweeper::sweepRound() {
  auto report = sweepOnce();
  if (!report) {
    kRateLimitSweeperLog.warn("rate limit prune failed", {{"error", report.error().message}});
    return std::chrono::milliseconds(options_.intervalMs);
  }
  if (report->pruned > 0) {
    kRateLimitSweeperLog.info("pruned expired rate limit rows",
                              {{"pruned", report->pruned}, {"max_rows", options_.maxRows}});
  }
  const bool backlog = report->pruned >= options_.maxRows;
  return std::chrono::milliseconds(backlog ? options_.busyIntervalMs : options_.intervalMs);
}

}  // namespace ot::controld
