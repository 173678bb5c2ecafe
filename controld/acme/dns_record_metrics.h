// opentunnel_acme_dns_records_total{event}: DNS-01 challenge TXT records created, deleted,
// delete_failed (by attempts and the sweep) and swept (leftovers the periodic sweep deleted).
// Built once at startup on the daemon's Metrics; any thread may bump the counters.
#pragma once

#include <prometheus/counter.h>

#include "common/metrics.h"

namespace ot::controld {

struct DnsRecordMetrics {
  explicit DnsRecordMetrics(metrics::Metrics& metrics)
      : created(counter(metrics, "created")),
        deleted(counter(metrics, "deleted")),
        deleteFailed(counter(metrics, "delete_failed")),
        swept(counter(metrics, "swept")) {}

  prometheus::Counter& created;
  prometheus::Counter& deleted;
  prometheus::Counter& deleteFailed;
  prometheus::Counter& swept;

 private:
  static prometheus::Counter& counter(metrics::Metrics& metrics, const char* event) {
    return metrics.counter(metrics.prefix() + "_acme_dns_records_total",
                           "DNS-01 challenge TXT records, by event", {{"event", event}});
  }
};

}  // namespace ot::controld
