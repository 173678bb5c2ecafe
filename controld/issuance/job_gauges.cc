#include "controld/issuance/job_gauges.h"

#include "common/clock.h"
#include "common/log.h"

namespace ot::controld {
namespace {

const log::Logger kJobGaugesLog("controld.metrics");

constexpr const char* kName = "opentunnel_certificate_jobs";
constexpr const char* kHelp =
    "Certificate jobs in the whole database: pending, and failed in the last 24 h; refreshed every "
    "minute.";

void refreshOne(JobStore& store, JobStatus status, int64_t sinceMs, prometheus::Gauge& gauge) {
  const Result<int64_t> count = store.countJobs(status, sinceMs);
  if (!count) {
    kJobGaugesLog.warn("cannot count certificate jobs; keeping the last value",
                       {{"status", jobStatusName(status)}, {"error", count.error().message}});
    return;
  }
  gauge.Set(static_cast<double>(*count));
}

}  // namespace

JobGauges::JobGauges(JobStore& store, metrics::Metrics& metrics, std::chrono::milliseconds interval)
    : store_(store),
      pending_(metrics.gauge(kName, kHelp, {{"status", "pending"}})),
      failed_(metrics.gauge(kName, kHelp, {{"status", "failed"}})),
      interval_(interval),
      task_([this] {
        refresh();
        return interval_;
      }) {}

JobGauges::~JobGauges() {
  stop();
}

void JobGauges::start() {
  task_.start();
}

void JobGauges::stop() {
  task_.stop();
}

void JobGauges::refresh() {
  // Failed jobs count for a day after they failed, as alerts want a rate, not a history.
  const int64_t nowMs = unixNowMs();
  constexpr int64_t kDayMs = 24LL * 60 * 60 * 1000;
  refreshOne(store_, JobStatus::kPending, 0, pending_);
  refreshOne(store_, JobStatus::kFailed, nowMs - kDayMs, failed_);
}

}  // namespace ot::controld
