// A Store that times every call of another Store into opentunnel_db_query_duration_seconds and
// counts the calls that answered an error in opentunnel_db_errors_total, both labelled by the
// Store method only (never tunnel IDs or keys). Owns the inner store; the Metrics object must
// outlive it. As thread-safe as the inner store: the metric updates are atomic.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/histogram.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "controld/store/store.h"

namespace ot::controld {

class InstrumentedStore final : public Store {
 public:
  // Registers every operation's series at once, so each is scraped (as 0) before its first call.
  InstrumentedStore(std::unique_ptr<Store> inner, metrics::Metrics& metrics);

  [[nodiscard]] PoolStats poolStats() const override { return inner_->poolStats(); }
  Status migrate() override;
  Status ping() override;
  Result<int64_t> insertTunnel(const TunnelRecord& record) override;
  Result<std::optional<StoredTunnel>> getTunnel(const std::string& id) override;
  Result<int64_t> updateTunnel(const TunnelRecord& record, int64_t expected_revision) override;
  Result<std::vector<StoredTunnel>> listTunnels(const std::string& after_id, int limit) override;
  Result<std::vector<StoredTunnel>> dueAlarms(int64_t now_ms, int limit) override;
  Result<bool> clearAlarm(const std::string& id, int64_t alarm_at_ms) override;
  Result<bool> addJob(const Job& job) override;
  Result<std::optional<Job>> getJob(const std::string& id) override;
  Result<std::optional<Job>> claimJob(const std::string& owner, int64_t now_ms, int64_t lease_ms,
                                      bool include_issue) override;
  Result<bool> extendLease(const std::string& job_id, const std::string& owner,
                           int64_t lease_until_ms) override;
  Result<bool> finishJob(const Job& job, const std::string& owner) override;
  Status releaseLeases(const std::string& owner) override;
  Result<int64_t> countJobs(JobStatus status, int64_t since_ms) override;
  Result<std::vector<Job>> leasedJobs(int64_t now_ms, int limit) override;
  Result<std::optional<std::string>> getMeta(const std::string& key) override;
  Result<bool> insertMetaIfAbsent(const std::string& key, const std::string& value) override;
  Result<bool> compareAndSetMeta(const std::string& key, const std::string& expected,
                                 const std::string& value) override;
  Result<std::optional<ServerCertificate>> getServerCertificate(const std::string& domain) override;
  Status putServerCertificate(const ServerCertificate& certificate) override;
  Result<RateDecision> acquireRate(const std::string& key, int64_t now_ms, int64_t interval_ms,
                                   int64_t burst) override;
  Status pruneRates(int64_t now_ms) override;
  Status addUsage(const std::string& tunnel_id, int64_t hour_start_ms, int64_t bytes_in,
                  int64_t bytes_out, int64_t connections) override;

 private:
  // One per Store method; kOperationNames holds the label values in the same order.
  enum class Op : size_t {
    kMigrate,
    kPing,
    kInsertTunnel,
    kGetTunnel,
    kUpdateTunnel,
    kListTunnels,
    kDueAlarms,
    kClearAlarm,
    kAddJob,
    kGetJob,
    kClaimJob,
    kExtendLease,
    kFinishJob,
    kReleaseLeases,
    kCountJobs,
    kLeasedJobs,
    kGetMeta,
    kInsertMetaIfAbsent,
    kCompareAndSetMeta,
    kGetServerCertificate,
    kPutServerCertificate,
    kAcquireRate,
    kPruneRates,
    kAddUsage,
    kCount,
  };
  static constexpr size_t kOps = static_cast<size_t>(Op::kCount);

  struct Series {
    prometheus::Histogram* duration = nullptr;
    prometheus::Counter* errors = nullptr;
  };

  template <typename Call>
  auto timed(Op op, Call&& call) -> decltype(call()) {
    const auto started = std::chrono::steady_clock::now();
    auto result = call();
    const Series& series = series_[static_cast<size_t>(op)];
    series.duration->Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    if (!result.ok()) series.errors->Increment();
    return result;
  }

  std::unique_ptr<Store> inner_;
  std::array<Series, kOps> series_{};
};

}  // namespace ot::controld
