// One bridge of the load tool, opened exactly as otunnel opens its own (docs/protocol.md): TCP
// from a chosen loopback source address (bound before connect, so the ephemeral port range is
// per source address), TLS with SNI, verification of the API domain and otunnel's ALPN offer
// (http/1.1 and otunnel-bridge, so a draining relayd refuses it from the ClientHello), the
// upgrade (client::RelayUpgrade), `attach`, then idle: relay pings answered at once, our own ping
// after heartbeat_ms of silence, abandoned after three. Visitor streams the relay opens are
// echoed back (data for data, end for end, credit granted as the bytes are taken).
//
// The reconnect loop is otunnel's (client/bridge_link.cc, bridge_client.cc, relay_transport.cc):
// each attempt that ends before `attached` is described as a client::AttemptEnd at the point
// otunnel describes it (the connect's status, EOF or reset before the TLS handshake completed,
// the upgrade's status and Retry-After, a close code or `drain` before `attached`) and
// classified by client::classifyAttemptEnd; client::Backoff then waits the busy schedule
// (0.25-3 s) or the broken one (doubling up to 30 s); an attached bridge's end, or its `drain`,
// waits 125-250 ms (tests/load/load_retry.h). Within 10 s of its start an attempt must reach
// `attached`. What otunnel gives up on for good (bad_token, invalid_route, HTTP 400/404/405/426)
// stops the bridge. One difference: otunnel starts the replacement of a drained bridge while the
// old connection finishes; the tool has one connection per bridge, so the replacement starts
// at the end of the wait or when the relay closes the drained bridge, whichever is later (at
// once for an idle bridge: relayd closes it with 1012 right after `drain`).
//
// One uv_tcp_t and one uv_timer_t per bridge; the socket is closed and re-initialised for each
// attempt. Loop thread only.
#pragma once

#include <netinet/in.h>
#include <uv.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "client/backoff.h"
#include "client/relay_upgrade.h"
#include "common/bridge_frame.h"
#include "common/tls_engine.h"
#include "common/tls_stream.h"
#include "common/websocket_message.h"
#include "tests/load/load_counters.h"
#include "tests/load/load_retry.h"

namespace ot::load {

struct BridgeTarget {
  sockaddr_in relay{};  // where relayd listens
  std::string domain;   // SNI, certificate name, Host header
  tls::SslCtxPtr tlsContext;
  uint32_t heartbeatCheckMs = 1000;  // how often the idle check runs (ping after heartbeat_ms)
  // otunnel's `status` report (client/status_report.h): at the first check after `attached`, then
  // every kReportRefreshMs with the next pong; 0 sends none (--no-status-reports).
  uint64_t statusRefreshMs = 0;
};

struct TunnelCredentials {
  std::string id;
  std::string token;
};

class LoadBridge final : private tls::TlsStream::Owner {
 public:
  LoadBridge(uv_loop_t* loop, const BridgeTarget& target, TunnelCredentials tunnel, in_addr source,
             LoadCounters& counters);
  ~LoadBridge();
  LoadBridge(const LoadBridge&) = delete;
  LoadBridge& operator=(const LoadBridge&) = delete;

  // The first attempt, at once.
  void start();
  // Closes everything; the loop must run until closed() before the bridge is destroyed.
  void stop();
  // Churn (--churn): an attached bridge closes its connection (relayd sees the bridge go, a
  // `detached` for the mesh) and attaches again at once, skipping otunnel's 125-250 ms wait so
  // the tool, not the schedule, sets the rate of changes. False when it was not attached.
  bool cycle();
  [[nodiscard]] bool closed() const { return !tcpOpen_ && !timerOpen_; }
  [[nodiscard]] bool attached() const { return phase_ == Phase::kAttached && !draining_; }

 private:
  enum class Phase : uint8_t {
    kWaiting,     // the retry wait
    kConnecting,  // TCP
    kTls,         // the TLS handshake
    kUpgrading,   // the upgrade request is out
    kAttaching,   // `attach` is out
    kAttached,
    kClosing,  // the socket is closing; the retry wait starts in its close callback
    kStopped,
  };
  struct Visitor {
    bool peerEnded = false;
    bool ended = false;
    uint32_t ungranted = 0;  // bytes taken from the relay and not yet granted back
  };

  // tls::TlsStream::Owner
  bool sendCiphertext(std::vector<uint8_t> bytes) override;
  void onTlsHandshakeDone() override;
  void onTlsPlaintext(std::span<uint8_t> bytes) override;
  void onTlsCloseNotify() override { onEndOfStream(UV_EOF); }
  void onTlsFailed() override {
    broken(client::AttemptEnd::Cause::kTlsFailed);
  }  // an alert, a certificate that does not verify
  [[nodiscard]] bool wantsTlsPlaintext() const override {
    return phase_ >= Phase::kUpgrading && phase_ <= Phase::kAttached;
  }

  static void onConnectCb(uv_connect_t* req, int status);
  static void onReadCb(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf);
  static void onCloseCb(uv_handle_t* handle);
  static void onTimerCb(uv_timer_t* timer);
  static void onTimerClosedCb(uv_handle_t* handle);

  void attempt();
  void onConnected(int status);
  // The relay's end of the stream (EOF, a reset, close_notify), as otunnel reads it.
  void onEndOfStream(int status);
  void onUpgradeFailed(const client::TransportFailure& failure);
  void onDrain();
  void consumeWebSocket(std::span<uint8_t> data);
  void onText(std::string_view text);
  void onBinary(std::span<const uint8_t> message);
  void onTimer();
  void sendStatusReport(uint64_t now);
  void sendPong(std::span<const uint8_t> payload);
  void sendFrame(ws::Opcode opcode, std::span<const uint8_t> payload);
  void sendBridgeFrame(const std::vector<uint8_t>& frame) { sendFrame(ws::Opcode::kBinary, frame); }
  // The attempt or the attached bridge ended: close the socket, then wait and retry. `hint`
  // chooses the wait of an attempt that ended before `attached`.
  void endAttempt(const client::RetryHint& hint,
                  client::AttemptEnd::Cause cause = client::AttemptEnd::Cause::kOther);
  void endAs(const client::AttemptEnd& end) {
    endAttempt(client::classifyAttemptEnd(end), end.cause);
  }
  void broken(client::AttemptEnd::Cause cause = client::AttemptEnd::Cause::kOther) {
    endAttempt({}, cause);
  }
  // An answer otunnel stops retrying on: close, count, no further attempt.
  void endFatal();
  void scheduleRetry(const client::RetryHint& hint, bool afterAttached,
                     client::AttemptEnd::Cause cause = client::AttemptEnd::Cause::kOther);
  void closeSocket();

  uv_loop_t* loop_;
  const BridgeTarget& target_;
  TunnelCredentials tunnel_;
  in_addr source_;
  LoadCounters& counters_;
  // The key its session ticket is held under in the shared relay context: each bridge stands for
  // an otunnel of its own (one link), so it resumes with the ticket of its own last connection
  // (the ramp's first attaches are full handshakes, a storm's resumed ones).
  std::string sessionKey_;
  client::Backoff backoff_{client::uniformRandom};
  Phase phase_ = Phase::kWaiting;
  uv_tcp_t tcp_{};
  uv_connect_t connectReq_{};
  uv_timer_t timer_{};
  bool tcpOpen_ = false;
  bool timerOpen_ = false;
  bool draining_ = false;  // attached, `drain` received: the retry wait already runs
  uint64_t attemptStartMs_ = 0;
  uint64_t lastReceiveMs_ = 0;
  uint64_t lastPingMs_ = 0;
  uint64_t lastStatusMs_ = 0;
  bool statusSent_ = false;         // since the last `attached`
  uint64_t statusHeldSinceMs_ = 0;  // a refresh waits for the next pong (0: none)
  uint32_t heartbeatMs_ = 15000;
  uint64_t retryAtMs_ = 0;  // uv_now() of the next attempt, decided when the last one ended
  std::unique_ptr<tls::TlsStream> tls_;
  std::optional<client::RelayUpgrade> upgrade_;
  std::optional<ws::MessageReader> reader_;
  std::unordered_map<uint32_t, Visitor> visitors_;
};

}  // namespace ot::load
