#include "relayd/relay_gauges.h"

#include <cstdint>

#include "common/clock.h"
#include "common/log.h"

namespace ot::relayd {
namespace {

const log::Logger kRelayGaugesLog("relayd");

}  // namespace

RelayGauges::RelayGauges(uv_loop_t* loop, RelayMetrics& metrics, const TunnelTable& table)
    : loop_(loop), metrics_(metrics), table_(table) {}

void RelayGauges::start() {
  if (started_) return;
  started_ = true;
  uv_timer_init(loop_, &timer_);
  timer_.data = this;
  const auto every = static_cast<uint64_t>(metrics::kDescriptorCheckInterval.count());
  // The first check at once, so a relayd started near its limit says so.
  uv_timer_start(&timer_, &RelayGauges::onTimer, 0, every);
  // Only the periodic checks keep it alive: it must not hold the loop open at shutdown.
  uv_unref(reinterpret_cast<uv_handle_t*>(&timer_));
}

void RelayGauges::onTimer(uv_timer_t* handle) {
  auto* self = static_cast<RelayGauges*>(handle->data);
  (void)metrics::checkDescriptors(self->warnings_, kRelayGaugesLog,
                                  static_cast<double>(handleCount(self->loop_)));
}

void RelayGauges::refresh() {
  const uint64_t now = uv_now(loop_);
  if (!counted_ || table_.changes() != countedChanges_ ||
      now - countedAtMs_ >= kCertificateCountTtlMs) {
    const int64_t deadline = unixNowMs() + kCertificateExpiringWindow.count();
    metrics_.certificatesExpiring.Set(static_cast<double>(table_.certificatesExpiringBy(deadline)));
    counted_ = true;
    countedAtMs_ = now;
    countedChanges_ = table_.changes();
  }
  metrics_.loopHandles.Set(static_cast<double>(handleCount(loop_)));
}

void RelayGauges::close() {
  if (!started_) return;
  started_ = false;
  uv_timer_stop(&timer_);
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
}

size_t RelayGauges::handleCount(uv_loop_t* loop) {
  // libuv's own count, kept as handles start and stop: walking every handle instead cost relayd
  // a pass over all its bridges at every scrape and descriptor check.
  return loop->active_handles;
}

}  // namespace ot::relayd
