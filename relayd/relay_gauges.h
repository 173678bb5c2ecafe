// relayd's gauges computed when they are read, and its descriptor watch. refresh() runs before
// each scrape and sets opentunnel_certificates_expiring (tunnels with a bridge here whose
// certificate expires within 14 days, from the records controld pushed; counted by a walk over
// every tunnel, so again only when the table changed or kCertificateCountTtlMs passed: a scrape a
// second, as the load tool makes, would otherwise cost an idle relay a pass over 50,000 tunnels a
// second) and
// opentunnel_loop_handles (the libuv handles active on the loop). start() checks descriptor use
// every few seconds (common/descriptor_watch.h), naming the handle count as its tasks.
//
// Loop thread only. close() before the loop's last run; the object must outlive that run (the
// timer is embedded).
#pragma once

#include <uv.h>

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "common/descriptor_watch.h"
#include "relayd/relay_metrics.h"
#include "relayd/tunnel_table.h"

namespace ot::relayd {

// How far ahead a certificate counts as expiring.
inline constexpr std::chrono::milliseconds kCertificateExpiringWindow{14LL * 24 * 3600 * 1000};
// How long a count of expiring certificates is reused while the table is unchanged: only the
// clock moves it then, and nothing near a 14-day window moves faster.
inline constexpr uint64_t kCertificateCountTtlMs = 30'000;

class RelayGauges {
 public:
  RelayGauges(uv_loop_t* loop, RelayMetrics& metrics, const TunnelTable& table);
  RelayGauges(const RelayGauges&) = delete;
  RelayGauges& operator=(const RelayGauges&) = delete;

  void start();
  void refresh();
  void close();

  // Active handles on `loop` (sockets reading or writing, running timers, signals): O(1).
  [[nodiscard]] static size_t handleCount(uv_loop_t* loop);

 private:
  static void onTimer(uv_timer_t* handle);

  uv_loop_t* loop_;
  RelayMetrics& metrics_;
  const TunnelTable& table_;
  metrics::DescriptorWarnings warnings_;
  uv_timer_t timer_{};
  bool started_ = false;
  bool counted_ = false;
  uint64_t countedAtMs_ = 0;     // uv_now() of the last walk
  uint64_t countedChanges_ = 0;  // the table's changes() then
};

}  // namespace ot::relayd
