#include "relayd/relay_context.h"

#include <string>
#include <utility>

#include "common/log.h"
#include "common/log_throttle.h"

namespace ot::relayd {
namespace {

const log::Logger kStreamLog("relayd.stream");

// A reset for an unread backlog is logged at most once per this interval (the counter has all).
constexpr uint64_t kOverflowLogIntervalMs = 10'000;

}  // namespace

RelayContext::RelayContext(uv_loop_t* loopIn, const RelaydConfig& configIn, RelayMetrics& metricsIn)
    : loop(loopIn),
      config(configIn),
      metrics(metricsIn),
      wheel(uv_now(loopIn)),
      apiHandshakes(HandshakeSlots::Limits{}, wheel,
                    [this] { return static_cast<int64_t>(nowMs()); }) {
  uv_check_init(loop, &check_);
  check_.data = this;
  uv_check_start(&check_, onCheck);
  uv_unref(reinterpret_cast<uv_handle_t*>(&check_));
  uv_timer_init(loop, &tick_);
  tick_.data = this;
  uv_timer_start(&tick_, onTick, wheel.tickMs(), wheel.tickMs());
  uv_unref(reinterpret_cast<uv_handle_t*>(&tick_));
  if (config.ioUring) {
    ring = IoRing::create(loop, metrics, ringError);
  } else {
    ringError = "off (IO_URING)";
  }
  const size_t workers = handshakeWorkerCount(config.tlsHandshakeThreads, usableCores());
  if (workers == 0) {
    handshakeWorkersNote = "on the loop";
  } else {
    handshakeWorkers = HandshakeWorkers::create(loop, workers, &metrics, handshakeWorkersNote);
    if (handshakeWorkers) handshakeWorkersNote = std::to_string(workers);
  }
}

RelayContext::~RelayContext() {
  runDeferred();
  // The handles are closed by the owner's shutdown before the loop's last run (closeHandles).
}

void RelayContext::resetAllStreams() {
  std::vector<TcpStream*> open(streams.begin(), streams.end());
  for (TcpStream* stream : open) stream->close(true);
  // Streams whose reads were armed in the ring close once their receive has ended.
  if (ring) ring->settle();
}

void RelayContext::closeHandles() {
  if (ring) ring->closeHandles();
  if (handshakeWorkers) handshakeWorkers->closeHandles();
  uv_close(reinterpret_cast<uv_handle_t*>(&check_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&tick_), nullptr);
}

void RelayContext::deferDelete(Deferrable* object) {
  deferred_.push_back(object);
}

void RelayContext::runDeferred() {
  while (!deferred_.empty()) {
    std::vector<Deferrable*> batch;
    batch.swap(deferred_);
    for (Deferrable* object : batch) delete object;
  }
}

void RelayContext::addBuffered(int64_t delta) {
  if (delta < 0 && static_cast<uint64_t>(-delta) > bufferedBytes) {
    bufferedBytes = 0;
  } else {
    bufferedBytes = static_cast<uint64_t>(static_cast<int64_t>(bufferedBytes) + delta);
  }
}

void RelayContext::onWriteBacklogOverflow(const TcpStream& stream, size_t refused) {
  metrics.peerBacklogReset.Increment();
  static LogThrottle throttle(kOverflowLogIntervalMs);
  if (uint64_t suppressed = 0; throttle.allow(nowMs(), suppressed)) {
    kStreamLog.warn("peer reset: it left its answers unread past the write backlog limit",
                    {{"peer", stream.peer().toString()},
                     {"queued", std::to_string(stream.queuedBytes())},
                     {"refused", std::to_string(refused)},
                     {"suppressed", std::to_string(suppressed)}});
  }
}

void RelayContext::onCheck(uv_check_t* handle) {
  auto* self = static_cast<RelayContext*>(handle->data);
  self->runDeferred();
  // Every iteration, not only on ticks: queued writes are given back in close callbacks, and the
  // gauge must not show them for a tick after the connection is gone (one atomic store).
  self->metrics.bufferedBytes.Set(static_cast<double>(self->bufferedBytes));
  // Back under the limit: everyone who paused for it reads again (each re-checks its own state).
  if (!self->bufferWaiters_.empty() && !self->overBufferedLimit()) {
    std::vector<BufferWaiter*> waiters(self->bufferWaiters_.begin(), self->bufferWaiters_.end());
    self->bufferWaiters_.clear();
    for (size_t i = 0; i < waiters.size(); ++i) {
      waiters[i]->onBufferRoom();
      if (self->overBufferedLimit()) {
        // Full again: the ones not yet told keep waiting.
        self->bufferWaiters_.insert(waiters.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                    waiters.end());
        break;
      }
    }
  }
}

void RelayContext::onTick(uv_timer_t* handle) {
  auto* self = static_cast<RelayContext*>(handle->data);
  // The pings of this tick go to the kernel in one submission (relayd/io_ring.h).
  if (self->ring) self->ring->beginSendBatch();
  self->wheel.advance(self->nowMs());
  if (self->ring) self->ring->endSendBatch();
  self->metrics.bufferedBytes.Set(static_cast<double>(self->bufferedBytes));
}

}  // namespace ot::relayd
