// The receive side of one visitor connection's flow control (docs/protocol.md section 7), as pure
// logic: the relay may send us `window` bytes beyond what we granted; we grant in batches of at
// least a quarter window as bytes are taken off our hands. Owned by one LocalStream (loop
// thread).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common/bridge_frame.h"

namespace ot::client {

class ReceiveWindow {
 public:
  explicit ReceiveWindow(uint32_t window) : window_(window), ledger_(window) {}

  // A data frame arrived: false when it goes beyond the credit we gave (a flow-control
  // violation; the ledger is then unchanged).
  [[nodiscard]] bool received(size_t bytes) {
    return ledger_.consume(bytes) == bridge::CreditStatus::kOk;
  }

  // Bytes the application took: written to the local socket (passthrough), or consumed by the
  // TLS engine (terminating mode).
  void taken(size_t bytes) { taken_ += bytes; }

  // The increment to send in a `credit` frame now, or 0. A batch is due once the taken bytes
  // reach a quarter of the window, but only while `held` (bytes taken yet still in our buffers,
  // on their way to the local socket) is at most a quarter window too: a slow local service
  // then holds the relay back instead of filling our memory. `allowance` below the window
  // (another stream of the bridge is active: StreamScheduler::receiveAllowance) caps what the
  // relay may have in flight: a grant never takes its credit past the allowance, and batches
  // shrink to a quarter of it so that the credit keeps flowing.
  [[nodiscard]] uint32_t grantNow(size_t held, size_t allowance = SIZE_MAX) {
    const uint64_t quarter = window_ / 4;
    if (taken_ == 0 || held > quarter) return 0;
    const bool capped = allowance < window_;
    const uint64_t batch = capped ? std::min<uint64_t>(quarter, allowance / 4) : quarter;
    if (taken_ < std::max<uint64_t>(batch, 1)) return 0;
    uint64_t room = bridge::kMaxCredit - ledger_.available();
    if (capped)
      room =
          std::min<uint64_t>(room, allowance - std::min<uint64_t>(allowance, ledger_.available()));
    const auto increment = static_cast<uint32_t>(std::min<uint64_t>(taken_, room));
    if (increment == 0 || (capped && increment < batch)) return 0;
    if (ledger_.grant(increment) != bridge::CreditStatus::kOk) return 0;
    taken_ -= increment;
    return increment;
  }

  [[nodiscard]] uint32_t available() const { return ledger_.available(); }
  [[nodiscard]] uint64_t takenNotGranted() const { return taken_; }

 private:
  uint32_t window_;
  uint64_t taken_ = 0;
  bridge::StreamCredit ledger_;
};

}  // namespace ot::client
