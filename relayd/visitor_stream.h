// One visitor's TCP connection carried over a bridge as a stream (docs/protocol.md sections 6-7).
// The visitor side of the splice: bytes read from the visitor go to the bridge as data frames
// within the client's credit; data frames from the client are written to the visitor and
// credited back once the socket took them. Idle and half-close timeouts are wheel entries.
//
// It sees its bridge as a BridgeForStream and the bridge sees it as a StreamForBridge
// (relayd/stream_bridge.h), so each is tested against a fake of the other.
//
// Owned by itself: it frees itself when its socket has closed and its bridge has let go of it.
// Loop thread only.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/bridge_frame.h"
#include "common/tcp_stream.h"
#include "relayd/relay_context.h"
#include "relayd/source_counts.h"
#include "relayd/stream_bridge.h"

namespace ot::relayd {

class VisitorStream final : public StreamForBridge,
                            public TcpStream::Handler,
                            public Deferrable,
                            public BufferWaiter {
 public:
  VisitorStream(RelayContext& context, TcpStream* stream, std::string tunnelId,
                uint32_t clientWindow);

  // The visitor's address's share of its tunnel's slots; given back when the stream is done.
  void holdSourceSlot(SourceSlot slot) { sourceSlot_ = std::move(slot); }
  // StreamForBridge
  void start(BridgeForStream* bridge, uint32_t connId, std::vector<uint8_t> hello) override;
  void deliver(std::span<const uint8_t> payload) override;
  void deliverAll(std::span<const std::span<const uint8_t>> payloads) override;
  void peerEnded() override;
  void peerReset() override;
  [[nodiscard]] bool addSendCredit(uint32_t increment) override;
  void abort(bridge::ResetReason reason, bool notifyClient) override;
  void pauseForBridge() override;
  void resumeFromBridge() override;
  [[nodiscard]] uint32_t connId() const override { return connId_; }
  [[nodiscard]] size_t pendingToVisitor() const override { return pendingToVisitor_; }
  [[nodiscard]] uint64_t ackedByVisitor() const override;

  [[nodiscard]] const std::string& tunnelId() const { return tunnelId_; }
  // Another machine forwarded this visitor here (its analytics event says so).
  void markForwardedIn() { forwardedIn_ = true; }

  // TcpStream::Handler
  void onRead(std::span<const uint8_t> bytes) override;
  void onEof() override;
  void onStreamError(int status) override;
  void onWritten(size_t bytes) override;
  void onClosed() override;

  // BufferWaiter: the process is back under BUFFERED_BYTES_LIMIT.
  void onBufferRoom() override { updateReading(); }

 private:
  void sendToBridge(std::span<const uint8_t> bytes);
  // The visitor's socket took `bytes` of what deliver() wrote: the pending count goes down and
  // credit goes back to the client. False when the stream has left its bridge.
  bool accountWritten(size_t bytes);
  void flushHeld();
  void updateReading();
  void touch();
  void armTimer();
  void finishIfDone();
  void detachFromBridge();
  static void onTimer(TimerEntry* entry, void* owner);
  static void onStall(TimerEntry* entry, void* owner);

  RelayContext& context_;
  TcpStream* stream_;
  std::string tunnelId_;
  BridgeForStream* bridge_ = nullptr;
  uint32_t connId_ = 0;
  bridge::StreamCredit sendCredit_;  // what the client lets us send it
  std::vector<uint8_t> held_;        // read from the visitor, waiting for credit
  size_t pendingToVisitor_ = 0;      // written to the visitor socket, not yet completed (the
                                     // socket counts it in the process's buffered bytes)
  uint32_t ungranted_ = 0;           // completed writes not yet credited back to the client
  uint64_t bytesIn_ = 0;             // visitor -> client
  uint64_t bytesOut_ = 0;            // client -> visitor
  uint64_t openedAtMs_ = 0;
  uint64_t lastActivityMs_ = 0;
  SourceSlot sourceSlot_;
  TimerEntry timer_;
  TimerEntry stall_;            // armed while the visitor lags behind half its window
  uint64_t stallBaseline_ = 0;  // bytes the visitor had acknowledged when the stall began
  bool visitorEnded_ = false;   // the visitor sent FIN (we sent `end`)
  bool clientEnded_ = false;    // the client sent `end` (we shut down the visitor's write side)
  bool bridgePaused_ = false;
  bool socketClosed_ = false;
  bool finished_ = false;  // the stream is done with the bridge
  bool forwardedIn_ = false;
};

}  // namespace ot::relayd
