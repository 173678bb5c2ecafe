#include "relayd/relay_gauges.h"

#include <cstdint>

#include "common/clock.h"
#include "common/log.h"

namespace ot::relayd {
namespace {

const log::Logger kLog("relayd");

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
  // The one walk over the handles, every check: a walk per scrape was most of an idle relayd's
  // scrape cost, growing with the bridges (19.6 % of its CPU at 5,000 idle bridges, one scrape a
  // second).
  const auto handles = static_cast<double>(handleCount(self->loop_));
  self->metrics_.loopHandles.Set(handles);
  (void)metrics::checkDescriptors(self->warnings_, kLog, handles);
}

void RelayGauges::refresh() {
  const int64_t deadline = unixNowMs() + kCertificateExpiringWindow.count();
  metrics_.certificatesExpiring.Set(static_cast<double>(table_.certificatesExpiringBy(deadline)));
  if (!started_) metrics_.loopHandles.Set(static_cast<double>(handleCount(loop_)));
}

void RelayGauges::close() {
  if (!started_) return;
  started_ = false;
  uv_timer_stop(&timer_);
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
}

size_t RelayGauges::handleCount(uv_loop_t* loop) {
  size_t count = 0;
  uv_walk(
      loop, [](uv_handle_t*, void* arg) { ++*static_cast<size_t*>(arg); }, &count);
  return count;
}

}  // namespace ot::relayd
