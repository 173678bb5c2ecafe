// One attached (or attaching) bridge: the WebSocket session of docs/protocol.md after the 101.
// It reads client messages (attach, then stream frames), multiplexes visitor streams, enforces the
// bridge limits (message sizes, max_conns, credit, per-bridge budgets), keeps liveness with
// pings, and closes with the protocol's codes. It owns no socket: its transport (the API-domain
// TLS connection it was upgraded from) carries its bytes.
//
// It names neither Relay nor VisitorStream: it asks the relay through RelayForBridge
// (relayd/relay_for_bridge.h) and drives its streams as StreamForBridge, while they ask it through
// BridgeForStream (relayd/stream_bridge.h). bridge_session.cc reads and sends and does the flow
// control; bridge_session_close.cc keeps liveness, drains and closes.
//
// Owned by its ApiConnection; loop thread only.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/bridge_control.h"
#include "common/bridge_frame.h"
#include "common/websocket_message.h"
#include "relayd/relay_context.h"
#include "relayd/relay_for_bridge.h"
#include "relayd/relay_metrics.h"
#include "relayd/stream_bridge.h"

namespace ot::relayd {

struct StatusEntry;  // status_store.h

// Until attach arrives; and how long a close waits for the client's answer.
inline constexpr uint64_t kBridgeAttachTimeoutMs = 10'000;
inline constexpr uint64_t kBridgeCloseWaitMs = 5'000;
// Client data waiting for this bridge's visitors: past it the bridge stops reading the client.
inline constexpr int64_t kBridgeVisitorBudget = 4 * 1024 * 1024;
// Visitor data waiting for this bridge's socket: above the high mark the visitors stop reading,
// below the low mark they read again.
inline constexpr size_t kBridgeSocketHighMark = 1024 * 1024;
inline constexpr size_t kBridgeSocketLowMark = kBridgeSocketHighMark / 2;

// The connection under a bridge (implemented by ApiConnection).
class BridgeTransport {
 public:
  virtual void sendPlain(std::span<const uint8_t> bytes) = 0;  // encrypted and queued
  [[nodiscard]] virtual size_t queuedBytes() const = 0;        // on the socket, not yet written
  [[nodiscard]] virtual uint64_t bytesWritten() const = 0;     // taken by the socket so far
  virtual void pauseReading() = 0;
  virtual void resumeReading() = 0;
  virtual void closeTransport(bool reset) = 0;  // the TCP connection goes away
  [[nodiscard]] virtual const std::string& peerAddress() const = 0;
  // Direct mode: the relay's own dial this connection came from (0: the peer connected to us).
  // Set only by the relay, so a client cannot claim to be a dialed link.
  [[nodiscard]] virtual uint64_t directDialId() const { return 0; }
  // Whether the bridge carries no stream now: its reads may take the relay's batched path for
  // idle connections (TcpStream::setRingReads).
  virtual void setIdleReads(bool idle) { (void)idle; }
  // Asks for the cache lines sendPlain reads `stage` pointers away from the transport (0: the
  // transport object itself) without waiting for them: the heartbeat's prefetch stages
  // (relayd/timer_wheel.h, Prefetch). Reads only.
  virtual void prefetchForWrite(unsigned stage) const { (void)stage; }

 protected:
  ~BridgeTransport() = default;
};

class BridgeSession final : public BridgeForStream, public BufferWaiter {
 public:
  // Registers itself with the relay (which gives it its key).
  BridgeSession(RelayContext& context, RelayForBridge& relay, BridgeTransport& transport,
                std::string tunnelId);
  ~BridgeSession();
  BridgeSession(const BridgeSession&) = delete;
  BridgeSession& operator=(const BridgeSession&) = delete;

  // Decrypted bytes from the client (mutable: frames are unmasked in place).
  void onPlaintext(std::span<uint8_t> bytes);
  // Asks for the lines onPlaintext reads first, without waiting for them (common/prefetch.h).
  void prefetchForRead() const;
  // The socket went away (EOF, error) without a close handshake.
  void onTransportLost();
  // The socket has written `bytes`; resume visitors when below the low mark.
  void onTransportWritten();

  // From the relay: the attach was decided.
  void attachAllowed(uint32_t maxConns);
  // `closeCode` 0: the code the protocol gives `code` (a malformed attach passes 1002).
  void attachRefused(bridge::AttachErrorCode code, const std::string& message,
                     uint16_t closeCode = 0);

  // Opens a stream for a visitor (the relay picked this bridge). False if the bridge cannot
  // take it now (closing, out of ids).
  bool openStream(StreamForBridge* visitor, const std::string& route,
                  const std::string& visitorAddress, std::vector<uint8_t> hello);

  // Sends drain; the bridge closes with 1012 when its streams have ended (or at the deadline).
  void drain();
  // Closes now: aborts every stream, close frame with `code`, reports the detach with `reason`.
  void close(uint16_t code, DetachOutcome reason, const std::string& text = {});

  // BridgeForStream
  void sendData(uint32_t connId, std::span<const uint8_t> payload) override;
  void sendEnd(uint32_t connId) override;
  void sendReset(uint32_t connId, bridge::ResetReason reason) override;
  void sendCredit(uint32_t connId, uint32_t increment) override;
  void visitorBuffered(int64_t delta) override;
  void streamFinished(StreamForBridge* visitor, uint64_t bytesIn, uint64_t bytesOut) override;

  // BufferWaiter: the process is back under BUFFERED_BYTES_LIMIT.
  void onBufferRoom() override { checkBudgets(); }

  [[nodiscard]] uint64_t key() const { return key_; }
  [[nodiscard]] const std::string& tunnelId() const { return tunnelId_; }
  [[nodiscard]] const std::string& bridgeId() const { return bridgeId_; }
  [[nodiscard]] bool attached() const {
    return phase_ == Phase::kAttached || phase_ == Phase::kDraining;
  }
  [[nodiscard]] bool closed() const {
    return phase_ == Phase::kClosing || phase_ == Phase::kClosed;
  }
  // The client's attach; once attached its token is released (empty).
  [[nodiscard]] const bridge::AttachRequest& attachRequest() const { return attach_; }
  [[nodiscard]] const std::string& peerAddress() const { return transport_.peerAddress(); }
  [[nodiscard]] uint64_t directDialId() const { return transport_.directDialId(); }
  [[nodiscard]] uint64_t attachedAtUnixMs() const { return attachedAtUnixMs_; }
  [[nodiscard]] uint32_t maxConns() const { return maxConns_; }
  [[nodiscard]] size_t streamCount() const { return streams_.size(); }
  // The status store's entry this bridge's reports went to (the store sets and clears it).
  [[nodiscard]] StatusEntry** statusEntry() { return &statusEntry_; }

 private:
  enum class Phase : uint8_t {
    kAwaitAttach,
    kAuthorizing,
    kAttached,
    kDraining,
    kClosing,
    kClosed
  };
  struct StreamEntry {
    StreamForBridge* visitor = nullptr;
    bridge::StreamCredit receiveCredit{bridge::kRelayWindow};  // what the client may still send
    bool clientEnded = false;
  };

  void handleMessage(ws::ReadStep& step);
  void handleAttach(std::string_view text);
  // `inPlace`: the message stays valid until onPlaintext returns (in the decrypted input, or
  // kept in the gather).
  void handleFrame(std::span<const uint8_t> message, bool inPlace);
  // Consecutive in-place data frames for one stream, delivered in one write by flushGather (before
  // any other frame is handled and before onPlaintext returns).
  struct Gather {
    StreamForBridge* visitor = nullptr;
    std::array<std::span<const uint8_t>, 8> payloads{};
    size_t count = 0;
    std::vector<uint8_t> owned;  // a message collected across reads; replaced only after a flush
  };
  void readInput(std::span<uint8_t> bytes);
  void flushGather();
  void sendText(const std::string& text);
  // Frames sent between beginBatch and endBatch go to the transport in one sendPlain: an `open`
  // with its ClientHello, the data frames of one visitor read. `local` holds them unless an
  // outer batch is running (then beginBatch answers false and endBatch leaves it alone).
  [[nodiscard]] bool beginBatch(std::vector<uint8_t>& local);
  void endBatch(std::vector<uint8_t>& local, bool own);
  void sendFrame(ws::Opcode opcode, std::span<const uint8_t> head,
                 std::span<const uint8_t> payload);
  void sendStreamFrame(std::vector<uint8_t> frame);
  void sendPendingPong();
  void protocolError(const char* what);
  void abortStreams(bridge::ResetReason reason, bool notifyClient);
  void finishClose();
  void checkBudgets();
  void scheduleHeartbeat();
  static void onHeartbeat(TimerEntry* entry, void* owner);
  // The heartbeat entry's prefetch stages: this session's lines, then, for a bridge the
  // heartbeat will ping, its transport's (the ping's TLS record and send).
  static void prefetchHeartbeat(const void* owner, unsigned stage);
  // onHeartbeat will ping now: attached, silent for a whole heartbeat, no ping unanswered.
  [[nodiscard]] bool pingDue(uint64_t nowMs) const;
  static void onStall(TimerEntry* entry, void* owner);
  static void onCloseWait(TimerEntry* entry, void* owner);

  RelayContext& context_;
  RelayForBridge& relay_;
  BridgeTransport& transport_;
  std::string tunnelId_;
  uint64_t key_;
  std::string bridgeId_;
  Phase phase_ = Phase::kAwaitAttach;
  ws::MessageReader reader_;
  std::vector<uint8_t>* batch_ = nullptr;  // frames collected for one write (beginBatch)
  Gather* gather_ = nullptr;               // data frames collected while onPlaintext runs
  bridge::AttachRequest attach_;
  std::vector<uint8_t> deferredInput_;  // bytes that arrived while the attach was decided
  std::unordered_map<uint32_t, StreamEntry> streams_;
  uint32_t nextConnId_ = 1;
  uint32_t maxConns_ = 0;
  uint64_t attachedAtUnixMs_ = 0;
  uint64_t lastHeardMs_ = 0;
  StatusEntry* statusEntry_ = nullptr;
  bool pingOutstanding_ = false;
  // Pongs are coalesced (RFC 6455 5.5.3): while our last pong is still queued, only the latest
  // ping waits for an answer, so a client that pings without reading holds one pong here.
  std::vector<uint8_t> pongPayload_;
  bool pongWanted_ = false;
  uint64_t pongQueuedEnd_ = 0;     // the transport's bytesWritten() once our last pong is out
  int64_t pendingToVisitors_ = 0;  // client data written to visitors' sockets, not yet taken
  bool readPaused_ = false;        // stopped reading the client because a budget is spent
  bool visitorsPaused_ = false;    // visitors stopped reading: our socket is over its high mark
  uint64_t stallStartedMs_ = 0;
  std::unordered_map<uint32_t, uint64_t> stallAcked_;  // visitors' acked bytes when a stall began
  DetachOutcome detachReason_ = DetachOutcome::kDrop;
  TimerEntry heartbeat_;
  TimerEntry stall_;
  TimerEntry closeWait_;
};

}  // namespace ot::relayd
