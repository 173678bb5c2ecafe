// The two sides of a splice, as each sees the other: what a visitor stream may ask of the bridge
// that carries it (BridgeForStream, implemented by BridgeSession) and what a bridge may ask of
// one of its streams (StreamForBridge, implemented by VisitorStream). Neither class names the
// other, so each is unit-tested against a fake of the other (tests/relayd/bridge_session_test.cc,
// tests/relayd/visitor_stream_test.cc).
//
// One virtual call per frame or socket callback, never per byte. Loop thread only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/bridge_frame.h"

namespace ot::relayd {

class StreamForBridge;

// While its bridge waits over budget, a visitor that takes less than kSlowVisitorProgressBytes
// within kSlowVisitorWaitMs is reset as too_slow (it took next to nothing: the whole crowd of
// stalled visitors goes in one wait). A visitor lagging half a window behind on its own must take
// kLaggingVisitorProgressBytes per wait, about 6.4 KiB/s, the reference's "about 6 KiB/s": a
// slow mobile link still gets a whole download, a visitor that barely reads gives its window back.
inline constexpr uint64_t kSlowVisitorWaitMs = 5'000;
inline constexpr uint64_t kSlowVisitorProgressBytes = 64 * 1024;
inline constexpr uint64_t kLaggingVisitorProgressBytes = 32 * 1024;

// The lagging visitor's rule: from `ackedBefore` to `ackedNow` over one wait, too little?
[[nodiscard]] constexpr bool laggingVisitorTooSlow(uint64_t ackedBefore, uint64_t ackedNow) {
  return ackedNow < ackedBefore + kLaggingVisitorProgressBytes;
}

// A visitor stream's bridge: frames towards the client, and the stream's accounting.
class BridgeForStream {
 public:
  // Frames for `connId`, sent unless the bridge is closing. `sendCredit` also widens what the
  // client may still send on the stream (the relay's receive window). `sendData` takes any
  // amount: the bridge cuts it into data frames of at most kMaxDataPayload and hands them to its
  // transport in one piece (one TLS write, one socket write).
  virtual void sendData(uint32_t connId, std::span<const uint8_t> payload) = 0;
  virtual void sendEnd(uint32_t connId) = 0;
  virtual void sendReset(uint32_t connId, bridge::ResetReason reason) = 0;
  virtual void sendCredit(uint32_t connId, uint32_t increment) = 0;
  // Client data written to the visitor's socket and not yet taken (+) or taken (-): counts
  // against the bridge's budget.
  virtual void visitorBuffered(int64_t delta) = 0;
  // The stream is done with the bridge (its last call to it); counts its bytes as usage.
  virtual void streamFinished(StreamForBridge* stream, uint64_t bytesIn, uint64_t bytesOut) = 0;

 protected:
  ~BridgeForStream() = default;
};

// One of a bridge's streams, as the bridge drives it.
class StreamForBridge {
 public:
  // Attaches to `bridge` under `connId` and sends `hello` (the buffered ClientHello) as its first
  // data.
  virtual void start(BridgeForStream* bridge, uint32_t connId, std::vector<uint8_t> hello) = 0;
  // Client -> visitor. The bridge already checked the relay's receive credit.
  virtual void deliver(std::span<const uint8_t> payload) = 0;
  // Consecutive data frames for this stream, delivered together (VisitorStream: one write).
  virtual void deliverAll(std::span<const std::span<const uint8_t>> payloads) {
    for (const auto payload : payloads) deliver(payload);
  }
  virtual void peerEnded() = 0;  // `end` from the client
  virtual void peerReset() = 0;  // `reset` from the client: abort the visitor
  // `credit` from the client; false when it would pass 2^31 - 1 (a protocol error).
  [[nodiscard]] virtual bool addSendCredit(uint32_t increment) = 0;
  // The bridge goes away or resets this stream: abort it (RST), sending `reset` with `reason` to
  // the client unless `notifyClient` is false. Calls streamFinished unless it already ran.
  virtual void abort(bridge::ResetReason reason, bool notifyClient) = 0;
  // The bridge's socket is over its high mark (pause) or back under its low mark (resume).
  virtual void pauseForBridge() = 0;
  virtual void resumeFromBridge() = 0;

  [[nodiscard]] virtual uint32_t connId() const = 0;
  // Client data written to the visitor and not yet taken by its socket.
  [[nodiscard]] virtual size_t pendingToVisitor() const = 0;
  // Bytes the visitor has acknowledged so far (what the stall checks measure progress by).
  [[nodiscard]] virtual uint64_t ackedByVisitor() const = 0;
  // Whether the visitor took less than kSlowVisitorProgressBytes since ackedByVisitor() was
  // `ackedBefore`.
  [[nodiscard]] bool tookTooLittleSince(uint64_t ackedBefore) const {
    return ackedByVisitor() < ackedBefore + kSlowVisitorProgressBytes;
  }

 protected:
  ~StreamForBridge() = default;
};

}  // namespace ot::relayd
