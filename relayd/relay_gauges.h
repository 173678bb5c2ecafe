// relayd's computed gauges, and its descriptor watch. refresh() runs before each scrape and sets
// opentunnel_certificates_expiring (tunnels with a bridge here whose certificate expires within
// 14 days, from the records controld pushed). start() checks descriptor use every few seconds
// (common/descriptor_watch.h), and in the same step counts the libuv handles alive on the loop
// (a walk over all of them) into opentunnel_loop_handles and names that count as its tasks; so
// the gauge is at most one check old (refresh() counts them itself before start()).
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

  // Handles on `loop`, closing ones included.
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
