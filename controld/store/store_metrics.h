// The store's query metrics: opentunnel_db_query_duration_seconds (a histogram) and
// opentunnel_db_errors_total (a counter), both labelled by the Store method only (never tunnel
// IDs or keys). SqlStore reports each call here from its one statement-running path
// (SqlStore::run), so the list of methods is written once, in store_metrics.cc. The Metrics
// object must outlive this. Thread-safe: the series are looked up in a fixed table and updated
// atomically.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/histogram.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <string_view>

#include "common/metrics.h"

namespace ot::controld {

class StoreMetrics {
 public:
  // One label value per Store method that touches the database (every one but poolStats).
  static constexpr size_t kOperations = 36;

  // Registers every operation's series at once, so each is scraped (as 0) before its first call.
  explicit StoreMetrics(metrics::Metrics& metrics);

  // One call of `operation` (a Store method's name) took `elapsed`, including the wait for a
  // pooled connection, and failed or not. An unknown name is a programming error: it aborts.
  void observe(std::string_view operation, std::chrono::steady_clock::duration elapsed,
               bool failed);

 private:
  struct Series {
    prometheus::Histogram* duration = nullptr;
    prometheus::Counter* errors = nullptr;
  };

  std::array<Series, kOperations> series_{};
};

}  // namespace ot::controld
