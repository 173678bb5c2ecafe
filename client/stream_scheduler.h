// Which visitor stream of a bridge sends next toward the relay (issue 12 item 5: a bulk transfer
// must not hold up the small answers of the other streams on its bridge). Pure logic: streams
// with bytes to send, or waiting to read more from their local socket, take turns round-robin;
// a turn is given only while what is queued to the bridge's socket is below the low mark, so
// the choice of who goes next is made at the last moment instead of behind a deep queue.
// BridgeClient owns one per bridge and sends one frame (at most kQuantum bytes) per turn.
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

 private:
  size_t lowMark_;
  std::deque<uint32_t> ring_;
  std::unordered_set<uint32_t> members_;
};

}  // namespace ot::client
