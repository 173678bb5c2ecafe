// The rule for bytes queued toward a peer that does not read them fast enough: above the high mark
// stop reading that peer (it produces our answers: its requests, its pings, its stream data), read
// again at or below the low mark, and never queue past the hard limit (the peer is reset instead).
// Pure logic: TcpStream applies its context's marks (relayd: kPeerWriteBacklog in relay_context.h;
// otunnel: kNoWriteBacklog) and relayd's plain-HTTP listener its own. Loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ot {

struct WriteBacklogMarks {
  size_t high = 0;       // stop reading the peer above this many queued bytes
  size_t low = 0;        // read again at or below this
  size_t hardLimit = 0;  // a write that would pass this is refused: the peer is closed
};

// No rule: the peer is always read and nothing is refused (otunnel, whose relay connection applies
// its own congestion marks to the producers instead: relay_transport.h).
inline constexpr WriteBacklogMarks kNoWriteBacklog{SIZE_MAX, SIZE_MAX, SIZE_MAX};

// What one queued write costs besides its bytes (request, buffer header): a peer that makes us
// queue many tiny writes is charged for them.
inline constexpr size_t kWriteOverheadBytes = 64;

class WriteBacklogGate {
 public:
  explicit constexpr WriteBacklogGate(WriteBacklogMarks marks) : marks_(marks) {}

  // Whether `bytes` more may be queued on top of `queued`.
  [[nodiscard]] constexpr bool admits(size_t queued, size_t bytes) const {
    return queued <= marks_.hardLimit && bytes <= marks_.hardLimit - queued;
  }
  // The queue is now `queued`: true when that changed whether the peer's reading is paused.
  constexpr bool update(size_t queued) {
    if (!paused_ && queued > marks_.high) {
      paused_ = true;
      return true;
    }
    if (paused_ && queued <= marks_.low) {
      paused_ = false;
      return true;
    }
    return false;
  }
  [[nodiscard]] constexpr bool paused() const { return paused_; }
  [[nodiscard]] constexpr const WriteBacklogMarks& marks() const { return marks_; }

 private:
  WriteBacklogMarks marks_;
  bool paused_ = false;
};

}  // namespace ot
