// relayd's gauges computed when they are read, and its descriptor watch. refresh() runs before
// each scrape and sets opentunnel_certificates_expiring (tunnels with a bridge here whose
// certificate expires within 14 days, from the records controld pushed) and
// opentunnel_loop_handles (the libuv handles active on the loop). start() checks descriptor use
// every few seconds (common/descriptor_watch.h), naming the handle count as its tasks.
//
// Loop thread only. close() before the loop's last run; the object must outlive that run (the
// timer is embedded).
#pragma once

#include <uv.h>

#include <chrono>
#include <cstddef>

#include "common/descriptor_watch.h"
#include "relayd/relay_metrics.h"
#include "relayd/tunnel_table.h"

namespace ot::relayd {

// How far ahead a certificate counts as expiring.
inline constexpr std::chrono::milliseconds kCertificateExpiringWindow{14LL * 24 * 3600 * 1000};

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
};

}  // namespace ot::relayd
