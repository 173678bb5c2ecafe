#include "controld/store/store_metrics.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace ot::controld {
namespace {

// The label values: the names SqlStore::run is called with, one per Store method.
constexpr std::array<std::string_view, StoreMetrics::kOperations> kOperationNames = {
    "migrate",
    "ping",
    "insertTunnel",
    "getTunnel",
    "updateTunnel",
    "listTunnels",
    "directTunnels",
    "dueAlarms",
    "clearAlarm",
    "deletedAmong",
    "addJob",
    "getJob",
    "claimJob",
    "extendLease",
    "finishJob",
    "releaseLeases",
    "countJobs",
    "recordCounts",
    "leasedJobs",
    "failedJobs",
    "requeueFailedJob",
    "getMeta",
    "insertMetaIfAbsent",
    "compareAndSetMeta",
    "getServerCertificate",
    "putServerCertificate",
    "acquireRate",
    "pruneRates",
    "addUsage",
    "usageHours",
    "addOriginUsage",
    "usageOriginHours",
    "exportTunnels",
    "importTunnels",
    "tunnelPage",
    "jobPage",
};
// kOperations (the header's count, which sizes the series) must be exactly the number of names: a
// count above it would leave empty names here, and one below it does not compile.
static_assert(std::ranges::none_of(kOperationNames,
                                   [](std::string_view name) { return name.empty(); }),
              "StoreMetrics::kOperations is larger than the list of operation names");

// Most statements answer in milliseconds; the top buckets catch lock waits and the statement
// timeout (10 s).
const prometheus::Histogram::BucketBoundaries& durationBuckets() {
  static const prometheus::Histogram::BucketBoundaries buckets = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return buckets;
}

}  // namespace

StoreMetrics::StoreMetrics(metrics::Metrics& metrics) {
  for (size_t i = 0; i < kOperations; ++i) {
    const prometheus::Labels labels{{"operation", std::string(kOperationNames[i])}};
    series_[i].duration = &metrics.histogram("opentunnel_db_query_duration_seconds",
                                             "Store calls by method, including waiting for a "
                                             "pooled connection.",
                                             durationBuckets(), labels);
    series_[i].errors = &metrics.counter(
        "opentunnel_db_errors_total", "Store calls that failed or timed out, by method.", labels);
  }
}

void StoreMetrics::observe(std::string_view operation, std::chrono::steady_clock::duration elapsed,
                           bool failed) {
  for (size_t i = 0; i < kOperations; ++i) {
    if (kOperationNames[i] != operation) continue;
    series_[i].duration->Observe(std::chrono::duration<double>(elapsed).count());
    if (failed) series_[i].errors->Increment();
    return;
  }
  std::abort();  // SqlStore::run was called with a name missing from kOperationNames
}

}  // namespace ot::controld
