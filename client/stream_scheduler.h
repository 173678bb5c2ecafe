// Which visitor stream of a bridge sends next toward the relay (issue 12 item 5: a bulk transfer
// must not hold up the small answers of the other streams on its bridge). Pure logic: streams
// with bytes to send, or waiting to read more from their local socket, take turns round-robin;
// a turn is given only while what is queued to the bridge's socket is below the low mark, so
// the choice of who goes next is made at the last moment instead of behind a deep queue.
// BridgeClient owns one per bridge and sends one frame (at most kQuantum bytes) per turn.
//
// Turns bound what a bulk stream puts ahead of the others in otunnel; what it has in flight
// beyond (in the bridge's socket and the relay's receive queue, in TCP byte order ahead of every
// later frame) is bounded by credit only. So while another stream of the bridge is active (it
// waits for a turn, or it sent or received data in the last kActiveForMs: a round trip under
// way), a stream keeps less in flight: sendAllowance() toward the relay (credit it holds back),
// receiveAllowance() from it (credit we grant). A stream alone keeps its whole window. Both
// allowances grow by one round trip of the bridge (TCP_INFO's min_rtt) at 1 Gbit/s, so on
// a real network they still cover the bandwidth-delay product (at 50 ms: the whole window).
// Loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_set>

namespace ot::client {

class StreamScheduler {
 public:
  // The most a stream sends per turn while others wait (one data frame).
  static constexpr size_t kQuantum = 16 * 1024;
  // Turns are given while less than this is queued to the bridge's socket (user space).
  static constexpr size_t kLowMark = 64 * 1024;

  explicit StreamScheduler(size_t lowMark = kLowMark) : lowMark_(lowMark) {}

  // The stream wants a turn; it joins the end of the ring (no-op if it already waits).
  void markReady(uint32_t connId);
  // The stream is gone or has nothing more to send.
  void remove(uint32_t connId);
  // The stream whose turn it is, taken off the ring, when `queuedBytes` (what the bridge's
  // socket still holds) is below the low mark; nothing when the queue is full enough or no
  // stream waits. A stream with more to send after its turn calls markReady again.
  [[nodiscard]] std::optional<uint32_t> next(size_t queuedBytes);

  // Room to queue without waiting for a turn: below the low mark and no stream waiting.
  [[nodiscard]] bool idleWithRoom(size_t queuedBytes) const {
    return ring_.empty() && queuedBytes < lowMark_;
  }
  [[nodiscard]] bool hasRoom(size_t queuedBytes) const { return queuedBytes < lowMark_; }
  [[nodiscard]] size_t waiting() const { return ring_.size(); }

  // A stream counts as active this long after its last data frame, either way.
  static constexpr uint64_t kActiveForMs = 100;
  // What may be in flight ahead of another active stream's data, beyond what the receiver may
  // hold ungranted (it grants in batches of a quarter window: docs/protocol.md section 7).
  static constexpr size_t kFairInFlight = 64 * 1024;
  // The allowances grow by the bridge's round trip at this rate (1 Gbit/s).
  static constexpr uint64_t kBytesPerRttUs = 125;

  // `connId` sent or received data at `nowMs` (uv_now).
  void noteActive(uint32_t connId, uint64_t nowMs);
  // Another stream than `connId` waits for a turn or was active within kActiveForMs.
  [[nodiscard]] bool othersActive(uint32_t connId, uint64_t nowMs) const;
  // When the other streams than `connId` stop counting as active if none has more data (uv_now
  // ms; 0: not active): kActiveForMs after the latest activity, at least kActiveForMs from
  // `nowMs` while one waits for a turn.
  [[nodiscard]] uint64_t othersActiveUntil(uint32_t connId, uint64_t nowMs) const;
  // Bytes `connId` may have in flight toward the relay (sent, not yet credited back) with a send
  // window of `window`, given the bridge's round trip (min_rtt): the window while it is alone, else
  // a quarter window (the relay's grant batch, so credit keeps coming) + kFairInFlight + one RTT.
  [[nodiscard]] size_t sendAllowance(uint32_t connId, size_t window, uint64_t nowMs,
                                     uint64_t rttUs) const;
  // The most credit `connId` may leave the relay (granted, not yet received) with our receive
  // window `window`: the window while it is alone, else kFairInFlight + one RTT (we grant in
  // smaller batches then: ReceiveWindow::grantNow).
  [[nodiscard]] size_t receiveAllowance(uint32_t connId, size_t window, uint64_t nowMs,
                                        uint64_t rttUs) const;

 private:
  struct Activity {
    uint32_t connId = 0;
    uint64_t atMs = 0;
    bool set = false;
  };
  size_t lowMark_;
  std::deque<uint32_t> ring_;
  std::unordered_set<uint32_t> members_;
  // The latest activity, and the latest of any other stream than latest_'s: together they answer
  // "the latest activity of a stream other than X" for every X in O(1).
  Activity latest_;
  Activity latestOther_;
};

}  // namespace ot::client
