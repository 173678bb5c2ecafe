// opentunnel_certificate_jobs{status="pending"|"failed"}: the whole database's job counts, read
// by a background thread every minute (so every machine reports the same value: take max, not
// sum). A count that cannot be read leaves the gauge at its previous value. The store and the
// Metrics object must outlive the refresher.
#pragma once

#include <prometheus/gauge.h>

#include <chrono>

#include "common/metrics.h"
#include "common/periodic_task.h"
#include "controld/store/store.h"

namespace ot::controld {

class JobGauges {
 public:
  JobGauges(JobStore& store, metrics::Metrics& metrics,
            std::chrono::milliseconds interval = std::chrono::seconds(60));
  ~JobGauges();  // stop()
  JobGauges(const JobGauges&) = delete;
  JobGauges& operator=(const JobGauges&) = delete;

  // Reads both counts now, then every interval until stop().
  void start();
  void stop();
  // One read of both counts (what the thread does each interval).
  void refresh();

 private:
  JobStore& store_;
  prometheus::Gauge& pending_;
  prometheus::Gauge& failed_;
  std::chrono::milliseconds interval_;
  PeriodicTask task_;  // last: stopped before the members its rounds read go
};

}  // namespace ot::controld
