// What every object on relayd's loop shares: the loop, the clock, the timer wheel, the loop-wide
// buffers, metrics, the configuration, and the deferred-delete list. One per relayd; loop thread
// only.
#pragma once

#include <uv.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "common/tcp_stream.h"
#include "common/write_backlog.h"
#include "relayd/handshake_slots.h"
#include "relayd/handshake_workers.h"
#include "relayd/io_ring.h"
#include "relayd/relay_metrics.h"
#include "relayd/relayd_config.h"
#include "relayd/source_counts.h"
#include "relayd/ticket_keys.h"
#include "relayd/timer_wheel.h"

namespace ot::analytics {
class Analytics;
}

namespace ot::relayd {

class ApiConnection;

// The write backlog of relayd's connections. The high mark is above a bridge's own visitor mark
// (1 MiB, bridge_session), so a bridge whose client reads slowly pauses its visitors first and
// keeps reading the client. The hard limit leaves room above the high mark for the largest single
// answer queued at once (an API response, at most 16 MiB from api_proxy) and the frames produced
// without reading.
inline constexpr WriteBacklogMarks kPeerWriteBacklog{2u << 20, 1u << 20, 20u << 20};

// Something that stopped reading because the process held BUFFERED_BYTES_LIMIT; told (on a later
// loop iteration, never inside addBuffered) once the total is back under it.
class BufferWaiter {
 public:
  virtual void onBufferRoom() = 0;

 protected:
  ~BufferWaiter() = default;
};

// Objects that are deleted outside their own callbacks derive from this.
class Deferrable {
 public:
  virtual ~Deferrable() = default;
};

// Also every TcpStream's context: the loop, the shared read buffer, buffered-bytes accounting
// against BUFFERED_BYTES_LIMIT, kPeerWriteBacklog with its counters, and the open stream set.
struct RelayContext final : TcpStreamContext {
  RelayContext(uv_loop_t* loopIn, const RelaydConfig& configIn, RelayMetrics& metricsIn);
  ~RelayContext();
  RelayContext(const RelayContext&) = delete;
  RelayContext& operator=(const RelayContext&) = delete;

  // The loop's steady milliseconds (uv_now), unless a test set `clock`: then its time, which the
  // tick also advances the wheel with.
  [[nodiscard]] uint64_t nowMs() const {
    return clock ? static_cast<uint64_t>(clock()) : uv_now(loop);
  }
  // Deletes `object` on the next loop iteration, never on the current call stack.
  void deferDelete(Deferrable* object);
  // Closes the context's own handles (the tick timer and the check handle); before the loop ends.
  void closeHandles();
  // Runs pending deletions now (the check handle does it every iteration; shutdown calls it).
  void runDeferred();

  // Bytes of connection data held in user space (both directions), against BUFFERED_BYTES_LIMIT.
  void addBuffered(int64_t delta) override;
  [[nodiscard]] bool overBufferedLimit() const {
    return bufferedBytes >= config.bufferedBytesLimit;
  }
  void waitForBufferRoom(BufferWaiter* waiter) { bufferWaiters_.insert(waiter); }
  void stopWaitingForBufferRoom(BufferWaiter* waiter) { bufferWaiters_.erase(waiter); }

  // TcpStreamContext
  [[nodiscard]] uv_loop_t* streamLoop() const override { return loop; }
  [[nodiscard]] std::span<uint8_t> streamReadBuffer() override { return readBuffer; }
  [[nodiscard]] WriteBacklogMarks writeBacklogMarks() const override { return kPeerWriteBacklog; }
  void onStreamOpened(TcpStream& stream) override { streams.insert(&stream); }
  void onStreamClosed(TcpStream& stream) override { streams.erase(&stream); }
  void onWriteBacklogPaused() override { metrics.peerBacklogPaused.Increment(); }
  void onWriteBacklogOverflow(const TcpStream& stream, size_t refused) override;
  [[nodiscard]] StreamRing* streamRing() override { return ring.get(); }

  // Aborts every public socket still open (the last step of shutdown).
  void resetAllStreams();

  uv_loop_t* loop;
  Clock clock;  // empty: uv_now(loop); set by unit tests (a ManualClock) before anything is timed
  const RelaydConfig& config;
  RelayMetrics& metrics;
  TimerWheel wheel;
  // io_uring for idle bridges (config.ioUring); null when off or unavailable (ringError says
  // why, for the startup log).
  std::unique_ptr<IoRing> ring;
  std::string ringError;
  // Where API TLS handshakes run (config.tlsHandshakeThreads); null: on the loop
  // (handshakeWorkersNote says why, for the startup log).
  std::unique_ptr<HandshakeWorkers> handshakeWorkers;
  std::string handshakeWorkersNote;
  std::array<uint8_t, 65536> readBuffer{};   // every socket read lands here
  std::array<uint8_t, 65536> plainBuffer{};  // decrypted TLS lands here
  // WebSocket frames are assembled here before TLS encrypts them (a copy, but no allocation per
  // frame); a user moves it out and back, so a nested send finds it empty.
  std::vector<uint8_t> frameScratch;
  uint64_t bufferedBytes = 0;
  uint64_t openConnections = 0;  // accepted public sockets still open
  uint64_t maxConnections = 60'000;
  // The API context's session ticket keys (relayd/ticket_keys.h), loaded at startup; null in
  // tests that do not set it: OpenSSL's own per-context keys then.
  std::shared_ptr<TicketKeyStore> ticketKeys;
  // API TLS handshakes in progress (at most 256) and the connections waiting up to 1 s for one.
  HandshakeSlots apiHandshakes;
  // Per source address (IPv6: /64): API handshakes in progress, API connections past their
  // handshake and not (yet) bridges, and tunnel connection slots held (keyed by tunnel and
  // source), so one address cannot take a shared limit alone.
  SourceCounts apiHandshakesBySource;
  SourceCounts apiConnectionsBySource;
  SourceCounts tunnelSlotsBySource;
  bool draining = false;
  // API connections past their handshake (ApiConnection registers itself): told when a drain
  // starts, and counted by the shutdown grace.
  std::unordered_set<ApiConnection*> apiConnections;
  std::unordered_set<TcpStream*> streams;  // every open TcpStream (kept by TcpStream itself)
  // Where visitor events go (relayd/visitor_analytics.h); null when analytics are off or in tests.
  analytics::Analytics* analytics = nullptr;

 private:
  static void onCheck(uv_check_t* handle);
  static void onTick(uv_timer_t* handle);
  uv_check_t check_{};
  uv_timer_t tick_{};
  std::vector<Deferrable*> deferred_;
  std::unordered_set<BufferWaiter*> bufferWaiters_;
};

}  // namespace ot::relayd
