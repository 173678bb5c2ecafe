// The byte copy between a forwarded visitor and the machine that holds its route (docs/mesh.md
// "Forwarding in relayd"): the sender's relayd, once the holder answered `1`, copies both ways
// between the two sockets. Nothing is parsed; bytes are never seen by controld.
//
//   - Backpressure: bytes read from one side are written to the other at once; while the other
//     side's write queue is over the high mark (kForwardSpliceMarks) the first side is not read,
//     and it is read again once the queue is down to the low mark.
//   - Half-closes pass on: a FIN read from one side is a FIN written to the other once its queue
//     is flushed; when both directions ended and both FINs went out, both sockets close.
//   - Timeouts, the same as a local visitor's: CONNECTION_IDLE_TIMEOUT_MS without a byte either
//     way, HALF_CLOSE_TIMEOUT_MS once one direction ended; on expiry both sides are reset.
//   - A reset or error on one side resets the other.
//
// Owned by itself: it frees itself when both sockets have closed. Loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/tcp_stream.h"
#include "common/write_backlog.h"
#include "relayd/relay_context.h"
#include "relayd/source_counts.h"
#include "relayd/timer_wheel.h"

namespace ot::relayd {

// Queued bytes toward one side above which the other side is not read (high), and at or below
// which it is read again (low). Well under kPeerWriteBacklog's, which would stop the slow side
// itself rather than the fast one.
inline constexpr WriteBacklogMarks kForwardSpliceMarks{256u << 10, 64u << 10, 20u << 20};

class ForwardSplice {
 public:
  // Takes both streams (connected, either reading or not): from here on their handler is the
  // splice. `toVisitor` holds bytes already read from the holder, written to the visitor first.
  // `marks`: kForwardSpliceMarks except in tests.
  static ForwardSplice* start(RelayContext& context, TcpStream* visitor, TcpStream* holder,
                              std::span<const uint8_t> toVisitor,
                              WriteBacklogMarks marks = kForwardSpliceMarks);

  // The visitor's share of its tunnel's slots, given back when the splice ends.
  void holdSourceSlot(SourceSlot slot) { sourceSlot_ = std::move(slot); }
  // The visitor's socket is one of the public connections (RelayContext::openConnections): one
  // less when it closes.
  void countsOpenConnection() { countsOpenConnection_ = true; }

  [[nodiscard]] uint64_t bytesToHolder() const { return visitor_.bytesRead; }
  [[nodiscard]] uint64_t bytesToVisitor() const { return holder_.bytesRead; }

  ForwardSplice(const ForwardSplice&) = delete;
  ForwardSplice& operator=(const ForwardSplice&) = delete;

 private:
  struct Side final : TcpStream::Handler {
    Side(ForwardSplice& ownerIn) : owner(ownerIn) {}
    void onRead(std::span<const uint8_t> bytes) override;
    void onEof() override;
    void onStreamError(int status) override;
    void onWritten(size_t bytes) override;
    void onClosed() override;
    void onShutdownDone(int status) override;

    ForwardSplice& owner;
    Side* other = nullptr;
    TcpStream* stream = nullptr;  // null once closed
    uint64_t bytesRead = 0;
    bool ended = false;         // its peer sent FIN (passed on to the other side)
    bool finSent = false;       // our FIN toward it went out
    bool heldForOther = false;  // not read while the other side's queue is over the high mark
  };

  ForwardSplice(RelayContext& context, WriteBacklogMarks marks);
  ~ForwardSplice() = default;
  void forward(Side& from, std::span<const uint8_t> bytes);
  void resetBoth();
  void closeIfComplete();
  void touch() { lastActivityMs_ = context_.nowMs(); }
  void armTimer();
  static void onTimer(TimerEntry* entry, void* owner);

  RelayContext& context_;
  WriteBacklogMarks marks_;
  Side visitor_;
  Side holder_;
  SourceSlot sourceSlot_;
  TimerEntry timer_;
  uint64_t lastActivityMs_ = 0;
  bool countsOpenConnection_ = false;
  bool resetting_ = false;
};

}  // namespace ot::relayd
