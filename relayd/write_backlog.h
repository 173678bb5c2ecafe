// The rule for bytes queued toward a peer that does not read them fast enough: above the high mark
// stop reading that peer (it produces our answers: its requests, its pings, its stream data), read
// again at or below the low mark, and never queue past the hard limit (the peer is reset instead).
// Pure logic: TcpStream (every relayd connection kind) and the plain-HTTP listener apply it to
// their sockets. Loop thread only.
#pragma once

#include <cstddef>

namespace ot::relayd {

struct WriteBacklogMarks {
  size_t high = 0;       // stop reading the peer above this many queued bytes
  size_t low = 0;        // read again at or below this
  size_t hardLimit = 0;  // a write that would pass this is refused: the peer is closed
};

// relayd's connections. The high mark is above a bridge's own visitor mark (1 MiB, bridge_session),
// so a bridge whose client reads slowly pauses its visitors first and keeps reading the client.
// The hard limit leaves room above the high mark for the largest single answer queued at once
// (an API response, at most 16 MiB from api_proxy) and the frames produced without reading.
inline constexpr WriteBacklogMarks kPeerWriteBacklog{2u << 20, 1u << 20, 20u << 20};

// What one queued write costs besides its bytes (request, buffer header): a peer that makes us
// queue many tiny writes is charged for them.
inline constexpr size_t kWriteOverheadBytes = 64;

class WriteBacklogGate {
 public:
  explicit constexpr WriteBacklogGate(WriteBacklogMarks marks = kPeerWriteBacklog) : marks_(marks) {}

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

}  // namespace ot::relayd
