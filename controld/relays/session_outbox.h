// The bounded queue between everything that sends to one relay session (API workers, the job
// runner, the admin tool, the session's own reader) and that session's single writer thread.
// Senders never block: a push onto a full queue closes it as overflowed, which ends the session
// (relayd reconnects and resyncs from a fresh snapshot) rather than stalling the sender or growing
// without bound. Thread-safe; owned jointly (shared_ptr) by the hub and the session.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>

#include "opentunnel/control/v1/control.pb.h"

namespace ot::controld {

class SessionOutbox {
 public:
  explicit SessionOutbox(size_t limit) : limit_(limit) {}

  // Queues the message; false when the outbox is closed, or is full (which closes it).
  [[nodiscard]] bool push(opentunnel::control::v1::ControlMessage message);
  // Waits for the next message; nullopt once the outbox is closed (queued messages are dropped:
  // a closed session has nobody left to read them).
  [[nodiscard]] std::optional<opentunnel::control::v1::ControlMessage> pop();
  // Waits for the next message and takes it with everything queued behind it; empty once the
  // outbox is closed. The writer merges consecutive authorization answers among them.
  [[nodiscard]] std::deque<opentunnel::control::v1::ControlMessage> popAll();
  void close();

  [[nodiscard]] bool overflowed() const;
  [[nodiscard]] bool closed() const;
  [[nodiscard]] size_t size() const;

 private:
  const size_t limit_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<opentunnel::control::v1::ControlMessage> queue_;
  bool closed_ = false;
  bool overflowed_ = false;
};

}  // namespace ot::controld
