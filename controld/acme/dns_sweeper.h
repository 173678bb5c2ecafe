// The sweep of leftover DNS-01 challenge records: every interval one machine in the cluster (the
// holder of the "dns_sweeper" lease in meta) lists the _acme-challenge TXT records under the
// domain and deletes, oldest first and at a bounded rate, those old enough that no attempt can
// still need them, whose value looks like a challenge value and whose name no running challenge
// uses. Attempts delete their own records; this only catches what a crash or a kill left behind.
//
// Threads: start() runs the sweep on a thread of its own; stop() (and the destructor) wakes it and
// joins promptly, also in the middle of a sweep. sweepOnce() may also be called directly (tests).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/periodic_task.h"
#include "common/result.h"
#include "controld/acme/dns_provider.h"
#include "controld/acme/dns_record_metrics.h"
#include "controld/store/store.h"

namespace ot::controld {

inline constexpr const char* kDnsSweeperMetaKey = "dns_sweeper";

struct DnsSweeperOptions {
  std::string domain;  // records must be under it
  std::string owner;   // this machine's ID, written into the lease
  int64_t intervalMs = 10 * 60 * 1000;
  int64_t initialDelayMs = 60 * 1000;  // the first sweep after start()
  // How long a taken lease keeps other machines out; 0 means interval_ms, so one machine sweeps
  // per interval. A sweep stops deleting when its lease runs out.
  int64_t leaseMs = 0;
  int64_t minAgeMs = 60 * 60 * 1000;
  size_t maxDeletes = 1000;
  double deletesPerSecond = 4;
  // Wall clock in Unix ms, for record ages and the lease; the system clock when empty.
  Clock nowMs;
  // Names with a challenge in progress: hostnames ("abc.example.com", "*.abc.example.com") or
  // their _acme-challenge names. Their records are kept. An error skips the sweep. None when empty.
  std::function<Result<std::set<std::string>>()> activeNames;
};

struct DnsSweepReport {
  bool leased = false;  // false: another machine holds the lease, nothing was done
  size_t listed = 0;    // challenge records the provider listed
  size_t stale = 0;     // of those, the ones this sweep set out to delete (at most max_deletes)
  size_t deleted = 0;
  size_t failed = 0;
  bool stopped = false;  // stop() interrupted the sweep
};

// 43 characters of base64url: a SHA-256 key authorization digest. Pure.
[[nodiscard]] bool looksLikeChallengeValue(std::string_view value);

// The records a sweep deletes, oldest first, at most `limit`: named _acme-challenge.<...>.<domain>
// (or the domain itself), a challenge value, created at or before now - min_age (an unknown
// creation time is never old enough), and not under an active name (normalized as above). Pure.
[[nodiscard]] std::vector<TxtRecord> staleChallengeRecords(const std::vector<TxtRecord>& records,
                                                           const std::string& domain,
                                                           const std::set<std::string>& active,
                                                           int64_t nowMs, int64_t minAgeMs,
                                                           size_t limit);

class DnsSweeper {
 public:
  // store, provider and metrics (nullable) must outlive the sweeper.
  DnsSweeper(MetaStore& store, DnsProvider& provider, DnsSweeperOptions options,
             DnsRecordMetrics* metrics);
  ~DnsSweeper();
  DnsSweeper(const DnsSweeper&) = delete;
  DnsSweeper& operator=(const DnsSweeper&) = delete;

  void start();
  void stop();

  // One sweep now, if the lease can be taken. Errors: the store, the provider's list, or
  // active_names failed (nothing was deleted then).
  Result<DnsSweepReport> sweepOnce();

 private:
  // The lease's end when this call took (or renewed) it; nullopt when another owner holds it.
  Result<std::optional<int64_t>> takeLease(int64_t now);
  int64_t now() const;
  // One round of the sweep thread: sweepOnce(), logged, then the wait before the next.
  std::chrono::milliseconds sweepRound();

  MetaStore& store_;
  DnsProvider& provider_;
  DnsSweeperOptions options_;
  DnsRecordMetrics* metrics_;
  PeriodicTask task_;  // last: stopped before the members its rounds read go
};

}  // namespace ot::controld
