#include "controld/store/instrumented_store.h"

#include <string_view>
#include <utility>

namespace ot::controld {
namespace {

// In the order of InstrumentedStore::Op.
constexpr std::array<std::string_view, 24> kOperationNames = {
    "migrate",
    "ping",
    "insertTunnel",
    "getTunnel",
    "updateTunnel",
    "listTunnels",
    "dueAlarms",
    "clearAlarm",
    "addJob",
    "getJob",
    "claimJob",
    "extendLease",
    "finishJob",
    "releaseLeases",
    "countJobs",
    "leasedJobs",
    "getMeta",
    "insertMetaIfAbsent",
    "compareAndSetMeta",
    "getServerCertificate",
    "putServerCertificate",
    "acquireRate",
    "pruneRates",
    "addUsage",
};

// Most statements answer in milliseconds; the top buckets catch lock waits and the statement
// timeout (10 s).
const prometheus::Histogram::BucketBoundaries& durationBuckets() {
  static const prometheus::Histogram::BucketBoundaries buckets = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return buckets;
}

}  // namespace

InstrumentedStore::InstrumentedStore(std::unique_ptr<Store> inner, metrics::Metrics& metrics)
    : inner_(std::move(inner)) {
  static_assert(kOperationNames.size() == kOps, "one label per Store method");
  for (size_t i = 0; i < kOps; ++i) {
    const prometheus::Labels labels{{"operation", std::string(kOperationNames[i])}};
    series_[i].duration = &metrics.histogram("opentunnel_db_query_duration_seconds",
                                             "Store calls by method, including waiting for a "
                                             "pooled connection.",
                                             durationBuckets(), labels);
    series_[i].errors = &metrics.counter(
        "opentunnel_db_errors_total", "Store calls that failed or timed out, by method.", labels);
  }
}

Status InstrumentedStore::migrate() {
  return timed(Op::kMigrate, [&] { return inner_->migrate(); });
}
Status InstrumentedStore::ping() {
  return timed(Op::kPing, [&] { return inner_->ping(); });
}
Result<int64_t> InstrumentedStore::insertTunnel(const TunnelRecord& record) {
  return timed(Op::kInsertTunnel, [&] { return inner_->insertTunnel(record); });
}
Result<std::optional<StoredTunnel>> InstrumentedStore::getTunnel(const std::string& id) {
  return timed(Op::kGetTunnel, [&] { return inner_->getTunnel(id); });
}
Result<int64_t> InstrumentedStore::updateTunnel(const TunnelRecord& record,
                                                int64_t expected_revision) {
  return timed(Op::kUpdateTunnel, [&] { return inner_->updateTunnel(record, expected_revision); });
}
Result<std::vector<StoredTunnel>> InstrumentedStore::listTunnels(const std::string& after_id,
                                                                 int limit) {
  return timed(Op::kListTunnels, [&] { return inner_->listTunnels(after_id, limit); });
}
Result<std::vector<StoredTunnel>> InstrumentedStore::dueAlarms(int64_t now_ms, int limit) {
  return timed(Op::kDueAlarms, [&] { return inner_->dueAlarms(now_ms, limit); });
}
Result<bool> InstrumentedStore::clearAlarm(const std::string& id, int64_t alarm_at_ms) {
  return timed(Op::kClearAlarm, [&] { return inner_->clearAlarm(id, alarm_at_ms); });
}
Result<bool> InstrumentedStore::addJob(const Job& job) {
  return timed(Op::kAddJob, [&] { return inner_->addJob(job); });
}
Result<std::optional<Job>> InstrumentedStore::getJob(const std::string& id) {
  return timed(Op::kGetJob, [&] { return inner_->getJob(id); });
}
Result<std::optional<Job>> InstrumentedStore::claimJob(const std::string& owner, int64_t now_ms,
                                                       int64_t lease_ms, bool include_issue) {
  return timed(Op::kClaimJob,
               [&] { return inner_->claimJob(owner, now_ms, lease_ms, include_issue); });
}
Result<bool> InstrumentedStore::extendLease(const std::string& job_id, const std::string& owner,
                                            int64_t lease_until_ms) {
  return timed(Op::kExtendLease,
               [&] { return inner_->extendLease(job_id, owner, lease_until_ms); });
}
Result<bool> InstrumentedStore::finishJob(const Job& job, const std::string& owner) {
  return timed(Op::kFinishJob, [&] { return inner_->finishJob(job, owner); });
}
Status InstrumentedStore::releaseLeases(const std::string& owner) {
  return timed(Op::kReleaseLeases, [&] { return inner_->releaseLeases(owner); });
}
Result<int64_t> InstrumentedStore::countJobs(JobStatus status, int64_t since_ms) {
  return timed(Op::kCountJobs, [&] { return inner_->countJobs(status, since_ms); });
}
Result<std::vector<Job>> InstrumentedStore::leasedJobs(int64_t now_ms, int limit) {
  return timed(Op::kLeasedJobs, [&] { return inner_->leasedJobs(now_ms, limit); });
}
Result<std::optional<std::string>> InstrumentedStore::getMeta(const std::string& key) {
  return timed(Op::kGetMeta, [&] { return inner_->getMeta(key); });
}
Result<bool> InstrumentedStore::insertMetaIfAbsent(const std::string& key,
                                                   const std::string& value) {
  return timed(Op::kInsertMetaIfAbsent, [&] { return inner_->insertMetaIfAbsent(key, value); });
}
Result<bool> InstrumentedStore::compareAndSetMeta(const std::string& key,
                                                  const std::string& expected,
                                                  const std::string& value) {
  return timed(Op::kCompareAndSetMeta,
               [&] { return inner_->compareAndSetMeta(key, expected, value); });
}
Result<std::optional<ServerCertificate>> InstrumentedStore::getServerCertificate(
    const std::string& domain) {
  return timed(Op::kGetServerCertificate, [&] { return inner_->getServerCertificate(domain); });
}
Status InstrumentedStore::putServerCertificate(const ServerCertificate& certificate) {
  return timed(Op::kPutServerCertificate,
               [&] { return inner_->putServerCertificate(certificate); });
}
Result<RateDecision> InstrumentedStore::acquireRate(const std::string& key, int64_t now_ms,
                                                    int64_t interval_ms, int64_t burst) {
  return timed(Op::kAcquireRate,
               [&] { return inner_->acquireRate(key, now_ms, interval_ms, burst); });
}
Status InstrumentedStore::pruneRates(int64_t now_ms) {
  return timed(Op::kPruneRates, [&] { return inner_->pruneRates(now_ms); });
}
Status InstrumentedStore::addUsage(const std::string& tunnel_id, int64_t hour_start_ms,
                                   int64_t bytes_in, int64_t bytes_out, int64_t connections) {
  return timed(Op::kAddUsage, [&] {
    return inner_->addUsage(tunnel_id, hour_start_ms, bytes_in, bytes_out, connections);
  });
}

}  // namespace ot::controld
