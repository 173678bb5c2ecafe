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
  Result<int64_t> updateTunnel(const TunnelRecord& record, int64_t expected_revision) override {
    return inner_.updateTunnel(record, expected_revision);
  }
  Result<std::vector<StoredTunnel>> listTunnels(const std::string& after_id, int limit) override {
    return inner_.listTunnels(after_id, limit);
  }
  Result<std::vector<StoredTunnel>> dueAlarms(int64_t now_ms, int limit) override {
    return inner_.dueAlarms(now_ms, limit);
  }
  Result<bool> clearAlarm(const std::string& id, int64_t alarm_at_ms) override {
    return inner_.clearAlarm(id, alarm_at_ms);
  }
  Result<bool> addJob(const Job& job) override { return inner_.addJob(job); }
  Result<std::optional<Job>> getJob(const std::string& id) override { return inner_.getJob(id); }
  Result<std::optional<Job>> claimJob(const std::string& owner, int64_t now_ms, int64_t lease_ms,
                                      bool include_issue) override {
    return inner_.claimJob(owner, now_ms, lease_ms, include_issue);
  }
  Result<bool> extendLease(const std::string& job_id, const std::string& owner,
                           int64_t lease_until_ms) override {
    return inner_.extendLease(job_id, owner, lease_until_ms);
  }
  Result<bool> finishJob(const Job& job, const std::string& owner) override {
    return inner_.finishJob(job, owner);
  }
  Status releaseLeases(const std::string& owner) override { return inner_.releaseLeases(owner); }
  Result<int64_t> countJobs(JobStatus status, int64_t since_ms) override {
    return inner_.countJobs(status, since_ms);
  }
  Result<std::vector<Job>> leasedJobs(int64_t now_ms, int limit) override {
    return inner_.leasedJobs(now_ms, limit);
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
  Result<RateDecision> acquireRate(const std::string& key, int64_t now_ms, int64_t interval_ms,
                                   int64_t burst) override {
    return inner_.acquireRate(key, now_ms, interval_ms, burst);
  }
  Status pruneRates(int64_t now_ms) override { return inner_.pruneRates(now_ms); }
  Status addUsage(const std::string& tunnel_id, int64_t hour_start_ms, int64_t bytes_in,
                  int64_t bytes_out, int64_t connections) override {
    return inner_.addUsage(tunnel_id, hour_start_ms, bytes_in, bytes_out, connections);
  }

 protected:
  Store& inner_;
};

}  // namespace ot::controld::testing
