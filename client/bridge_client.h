// The client's end of one bridge (docs/protocol.md sections 2-9; relayd's end is its
// BridgeSession): a RelayTransport from the upgrade through `attach`
// to its end, the visitor connections it carries, their frames routed by connection id with the
// state checks of section 6, and liveness (ping after heartbeat_ms of silence, give up after
// three). Retrying is not its business: BridgeLink owns sessions and runs the reconnect loop.
//
// Ownership: BridgeLink owns the session (unique_ptr). The session owns its transport and
// streams, which free themselves in their close callbacks and report back; once both are gone
// after the end, onSessionFinished tells the link it may delete the session (later, not on the
// reporting call's stack). Loop thread only; nothing here blocks or throws.
#pragma once

#include <uv.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "client/backoff.h"
#include "client/bridge_settings.h"
#include "client/local_stream.h"
#include "client/relay_transport.h"
#include "client/stream_scheduler.h"
#include "client/text_timing.h"
#include "common/bridge_control.h"
#include "common/log.h"

namespace ot::client {

class BridgeClient;

// How a session ended, for the reconnect loop.
struct SessionEnd {
  bool wasAttached = false;
  bool fatal = false;  // section 10's stop-for-good cases: do not retry
  std::string error;   // for people; empty for a deliberate stop
  RetryHint retry;     // before attached: busy (restarting, shedding) or broken
};

class SessionHost {
 public:
  virtual ~SessionHost() = default;
  virtual void onSessionAttached(BridgeClient& session) = 0;
  // The relay drains this bridge: start a replacement, keep this one until the relay closes it.
  virtual void onSessionDrain(BridgeClient& session) = 0;
  // Exactly once; the session is closing.
  virtual void onSessionEnded(BridgeClient& session, const SessionEnd& end) = 0;
  // Ended and every handle closed: delete the session, but not on this call's stack.
  virtual void onSessionFinished(BridgeClient& session) = 0;
  // The number of connections changed.
  virtual void onSessionChanged() = 0;
  // A deadline changed: call nextDeadlineMs() again.
  virtual void rescheduleTimer() = 0;
};

class BridgeClient final : private RelayTransportListener, private StreamHost {
 public:
  BridgeClient(uv_loop_t* loop, const BridgeSettings& settings, SessionHost& host, int link);
  ~BridgeClient() override;
  BridgeClient(const BridgeClient&) = delete;
  BridgeClient& operator=(const BridgeClient&) = delete;

  // Starts the attempt (its 10 s deadline too). May end it from inside.
  void start();
  // Direct mode (docs/pools-direct.md): the same attempt over a connection the relay opened to
  // us (`fd`, accepted, non-blocking; owned from here on); the deadline runs from now.
  void startAccepted(int fd);
  // Ends the bridge on purpose: close `code` to the relay, abort every connection.
  void stop(uint16_t code);

  // The earliest deadline (UINT64_MAX: none) and the timer's visit.
  [[nodiscard]] uint64_t nextDeadlineMs() const;
  void onTimer(uint64_t nowMs);

  [[nodiscard]] bool attached() const { return phase_ == Phase::kAttached && !ended_; }
  [[nodiscard]] bool ended() const { return ended_; }
  [[nodiscard]] size_t connections() const { return streams_.size(); }
  [[nodiscard]] const std::string& bridgeId() const { return attached_.bridgeId; }
  // A control message (a `status` report) on the attached bridge; false when not attached.
  // kWithNextPong lets it wait for our answer to the relay's next ping, at most a heartbeat.
  bool sendText(const std::string& text, TextTiming timing = TextTiming::kNow);

 private:
  enum class Phase : uint8_t { kConnecting, kAwaitingAttached, kAttached };

  void startOn(int fd);  // -1: dial the relay

  // RelayTransportListener
  void onUpgraded() override;
  void onTransportFailed(const TransportFailure& failure) override;
  void onTextMessage(std::string_view text) override;
  void onBinaryMessage(std::span<const uint8_t> message) override;
  void onDisconnected(uint16_t code, std::string_view reason) override;
  void onTransportClosed() override;
  void onWritable() override;
  void onBytesWritten() override;

  // StreamHost
  void sendStreamFrame(std::span<const uint8_t> head, std::span<const uint8_t> payload) override;
  void onStreamDeadlineChanged() override;
  void onStreamFreed(uint32_t connId) override;
  [[nodiscard]] bool bridgeCongested() const override;
  [[nodiscard]] bool bridgeHasRoom() const override;
  void onStreamReady(uint32_t connId) override;
  void sendBorrowedFrame(std::span<const uint8_t> head, std::span<const uint8_t> payload) override;
  void beginFrameBatch() override;
  void endFrameBatch() override;
  void onStreamActive(uint32_t connId) override;
  [[nodiscard]] size_t sendAllowance(uint32_t connId, size_t window) const override;
  [[nodiscard]] size_t receiveAllowance(uint32_t connId, size_t window) const override;
  // A bound was handed out: make sure the streams look again once the activity behind it ends.
  void armAllowanceRecheck(uint32_t connId, uint64_t nowMs) const;
  void recheckAllowances();
  void onLocalServiceUnreachable(const LocalTarget& target, std::string_view error) override;

  void onRelayMessage(const bridge::RelayMessage& message);
  void onOpen(const bridge::Frame& frame);
  void sendReset(uint32_t connId, bridge::ResetReason reason, std::string_view text);
  [[nodiscard]] bool fatalAttachError(const bridge::AttachError& error) const;
  void protocolError(std::string text);
  void endSession(SessionEnd end);
  void maybeFinished();
  // Gives turns to waiting streams while the transport's queue is below the low mark.
  void runTurns();

  uv_loop_t* loop_;
  const BridgeSettings& settings_;
  SessionHost& host_;
  log::Logger log_{"client.bridge"};
  // "cannot reach the local service": one line per kUnreachableLogEveryMs, the rest counted.
  uint64_t unreachableLoggedMs_ = 0;
  bool unreachableLogged_ = false;
  uint64_t unreachableSuppressed_ = 0;
  int link_;
  Phase phase_ = Phase::kConnecting;
  bool ended_ = false;
  bool finished_ = false;
  bool draining_ = false;
  RelayTransport* transport_ = nullptr;                 // owns itself; null once closed
  std::unordered_map<uint32_t, LocalStream*> streams_;  // each owns itself until freed
  StreamScheduler scheduler_;  // whose data goes out next (issue 12 item 5)
  bool runningTurns_ = false;
  // When a stream held back by its in-flight allowance looks again (another stream's activity
  // expires then; 0: none held). Kept in step by sendAllowance/receiveAllowance.
  mutable uint64_t allowanceRecheckMs_ = 0;
  unsigned frameBatchDepth_ = 0;
  RelayTransport* batchTransport_ = nullptr;  // the transport the open batch is on
  bridge::Attached attached_;
  uint32_t highestOpened_ = 0;
  uint64_t attemptDeadlineMs_ = 0;
  uint64_t lastPingMs_ = 0;
};

}  // namespace ot::client
