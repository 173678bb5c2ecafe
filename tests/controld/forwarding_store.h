// A Store that passes every call to another, real Store. Test wrappers derive from it and
// override only the calls they watch or disturb, instead of restating the whole interface.
#pragma once

#include "controld/store/store.h"

namespace ot::controld::testing {

class ForwardingStore : public Store {
 public:
  explicit ForwardingStore(Store& inner) : inner_(inner) {}

  PoolStats poolStats() const override { return inner_.poolStats(); }
  Status migrate() override { return inner_.migrate(); }
  Status ping() override { return inner_.ping(); }
  Result<int64_t> insertTunnel(const TunnelRecord& record) override {
    return inner_.insertTunnel(record);
  }
  Result<std::optional<StoredTunnel>> getTunnel(const std::string& id) override {
    return inner_.getTunnel(id);
  }
  Result<int64_t> updateTunnel(const TunnelRecord& record, int64_t expectedRevision) override {
    return inner_.updateTunnel(record, expectedRevision);
  }
  Result<std::vector<StoredTunnel>> listTunnels(const std::string& afterId, int limit) override {
    return inner_.listTunnels(afterId, limit);
  }
  Result<std::vector<StoredTunnel>> directTunnels(const std::string& afterId, int limit) override {
    return inner_.directTunnels(afterId, limit);
  }
  Result<std::vector<StoredTunnel>> dueAlarms(int64_t nowMs, int limit) override {
    return inner_.dueAlarms(nowMs, limit);
  }
  Result<bool> clearAlarm(const std::string& id, int64_t alarmAtMs) override {
    return inner_.clearAlarm(id, alarmAtMs);
  }
  Result<std::vector<std::string>> deletedAmong(const std::vector<std::string>& ids) override {
    return inner_.deletedAmong(ids);
  }
  Result<bool> addJob(const Job& job) override { return inner_.addJob(job); }
  Result<std::optional<Job>> getJob(const std::string& id) override { return inner_.getJob(id); }
  Result<std::optional<Job>> claimJob(const std::string& owner, int64_t nowMs, int64_t leaseMs,
                                      bool includeIssue) override {
    return inner_.claimJob(owner, nowMs, leaseMs, includeIssue);
  }
  Result<bool> extendLease(const std::string& jobId, const std::string& owner,
                           int64_t leaseUntilMs) override {
    return inner_.extendLease(jobId, owner, leaseUntilMs);
  }
  Result<bool> finishJob(const Job& job, const std::string& owner) override {
    return inner_.finishJob(job, owner);
  }
  Status releaseLeases(const std::string& owner) override { return inner_.releaseLeases(owner); }
  Result<int64_t> countJobs(JobStatus status, int64_t sinceMs) override {
    return inner_.countJobs(status, sinceMs);
  }
  Result<RecordCounts> recordCounts(int64_t nowMs) override { return inner_.recordCounts(nowMs); }
  Result<std::vector<Job>> leasedJobs(int64_t nowMs, int limit) override {
    return inner_.leasedJobs(nowMs, limit);
  }
  Result<std::vector<Job>> failedJobs(JobKind kind, const std::string& errorPrefix,
                                      const std::string& afterId, int limit) override {
    return inner_.failedJobs(kind, errorPrefix, afterId, limit);
  }
  Result<bool> requeueFailedJob(const std::string& id, const std::string& expectedLastError,
                                const std::string& lastError, int64_t nowMs) override {
    return inner_.requeueFailedJob(id, expectedLastError, lastError, nowMs);
  }
  Result<std::optional<std::string>> getMeta(const std::string& key) override {
    return inner_.getMeta(key);
  }
  Result<bool> insertMetaIfAbsent(const std::string& key, const std::string& value) override {
    return inner_.insertMetaIfAbsent(key, value);
  }
  Result<bool> compareAndSetMeta(const std::string& key, const std::string& expected,
                                 const std::string& value) override {
    return inner_.compareAndSetMeta(key, expected, value);
  }
  Result<std::optional<ServerCertificate>> getServerCertificate(
      const std::string& domain) override {
    return inner_.getServerCertificate(domain);
  }
  Status putServerCertificate(const ServerCertificate& certificate) override {
    return inner_.putServerCertificate(certificate);
  }
  Result<RateDecision> acquireRate(const std::string& key, int64_t nowMs, int64_t intervalMs,
                                   int64_t burst) override {
    return inner_.acquireRate(key, nowMs, intervalMs, burst);
  }
  Result<int64_t> pruneRates(int64_t nowMs, int limit) override {
    return inner_.pruneRates(nowMs, limit);
  }
  Status addUsage(const std::string& tunnelId, int64_t hourStartMs, int64_t bytesIn,
                  int64_t bytesOut, int64_t connections) override {
    return inner_.addUsage(tunnelId, hourStartMs, bytesIn, bytesOut, connections);
  }
  Result<std::vector<UsageHour>> usageHours(const std::string& tunnelId, int64_t fromMs,
                                            int64_t toMs) override {
    return inner_.usageHours(tunnelId, fromMs, toMs);
  }

 protected:
  Store& inner_;
};

}  // namespace ot::controld::testing
