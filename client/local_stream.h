// The client's end of one visitor connection carried over a bridge (docs/protocol.md sections
// 5-7; relayd's other end is its VisitorStream): the local TCP
// connection to the route's LocalTarget, the visitor's TLS terminated here (a server TlsEngine on
// the tunnel's certificate) or passed through unchanged, and the connection's flow control both
// ways. The protocol state (open / ended / peer-ended / closed) is kept here too, so the bridge
// can apply the receive table of section 6.
//
// The local socket is a TcpStream (common/tcp_stream.h: resolve, connect, reads sized by the send
// credit, queued writes, the half-close); the visitor's TLS a TlsStream over bridge frames.
//
// Ownership: created by a BridgeClient on `open`, a heap object that frees itself in its socket's
// close callback, then calls host.onStreamFreed() as its last act; the host outlives it. The
// host never deletes it. Loop thread only; nothing here blocks or throws.
#pragma once

#include <uv.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/bridge_pool.h"
#include "client/receive_window.h"
#include "client/stream_context.h"
#include "common/bridge_frame.h"
#include "common/tcp_stream.h"
#include "common/tls_engine.h"
#include "common/tls_stream.h"

namespace ot::client {

// What a stream needs from the bridge that carries it.
class StreamHost {
 public:
  virtual ~StreamHost() = default;
  // One stream frame toward the relay, given as its 5-byte header (plus any fixed part) and its
  // payload. Silently dropped once the bridge is closing.
  virtual void sendStreamFrame(std::span<const uint8_t> head, std::span<const uint8_t> payload) = 0;
  // The stream set a new deadline (deadlineMs()); the host's timer must cover it.
  virtual void onStreamDeadlineChanged() = 0;
  // The stream's socket is closed and the object is gone.
  virtual void onStreamFreed(uint32_t connId) = 0;
  // The bridge's write queue is over its high watermark: do not read local sockets for now
  // (resume() follows when it drained).
  [[nodiscard]] virtual bool bridgeCongested() const = 0;
  // The bridge takes bytes at once: no stream waits for a turn (StreamScheduler) and what is
  // queued to its socket is below the low mark. Otherwise a stream asks for a turn.
  [[nodiscard]] virtual bool bridgeHasRoom() const = 0;
  // The stream wants a turn: bytes to send, or room to read its local socket again. onTurn()
  // follows when the bridge has room and the streams ahead had theirs.
  virtual void onStreamReady(uint32_t connId) = 0;
  // Frames sent between these two calls may leave in one write (RelayTransport::beginBatch):
  // a stream brackets the data frames of one local read (or one turn) with them.
  virtual void beginFrameBatch() {}
  virtual void endFrameBatch() {}
  // A data frame sent inside a batch whose `payload` stays valid until that batch ends: the host
  // may keep a reference instead of a copy when the batch is its outermost (the bytes are then
  // sealed into TLS records straight from `payload`). Default: sendStreamFrame.
  virtual void sendBorrowedFrame(std::span<const uint8_t> head, std::span<const uint8_t> payload) {
    sendStreamFrame(head, payload);
  }
  // Fairness between the bridge's streams (StreamScheduler): the stream sent or received data
  // now; what it may have in flight toward the relay with send window `window`, and the most
  // credit it may leave the relay with receive window `window` (the window while it is alone).
  virtual void onStreamActive(uint32_t connId) { (void)connId; }
  [[nodiscard]] virtual size_t sendAllowance(uint32_t connId, size_t window) const {
    (void)connId;
    return window;
  }
  [[nodiscard]] virtual size_t receiveAllowance(uint32_t connId, size_t window) const {
    (void)connId;
    return window;
  }
  // The stream could not reach its local service (`error` says why); for the person running
  // otunnel. The stream itself answers the visitor.
  virtual void onLocalServiceUnreachable(const LocalTarget& target, std::string_view error) {
    (void)target;
    (void)error;
  }
};

struct StreamOptions {
  uint32_t connId = 0;
  LocalTarget target;
  tls::SslCtxPtr tlsContext;  // terminate the visitor's TLS with it; null: passthrough
  uint32_t receiveWindow = bridge::kDefaultWindow;                       // our attach window
  uint32_t sendWindow = bridge::kRelayWindow;                            // attached.limits.window
  uint32_t maxPayload = static_cast<uint32_t>(bridge::kMaxDataPayload);  // limits.max_payload
  uint64_t connectTimeoutMs = 10'000;
  uint64_t handshakeTimeoutMs = kVisitorHandshakeTimeoutMs;
};

// How a frame from the relay fits the connection's state. Anything but kOk closes the bridge
// with 1002.
enum class FrameVerdict : uint8_t { kOk, kProtocolError, kFlowControlViolation };

class LocalStream final : private tls::TlsStream::Owner, private TcpStream::Handler {
 public:
  // nullptr when no socket could be created (the caller resets the connection).
  [[nodiscard]] static LocalStream* create(uv_loop_t* loop, StreamHost& host,
                                           StreamOptions options);
  LocalStream(const LocalStream&) = delete;
  LocalStream& operator=(const LocalStream&) = delete;

  // Resolves and connects to the target; data from the relay is queued meanwhile.
  void start();

  // Frames from the relay for this connection. Frames for a closed connection are ignored.
  [[nodiscard]] FrameVerdict onData(std::span<const uint8_t> payload);
  [[nodiscard]] FrameVerdict onEnd();
  void onReset();
  [[nodiscard]] FrameVerdict onCredit(uint32_t increment);

  // The bridge is gone: abort the local connection (RST) and send nothing.
  void abort();
  // The bridge can take data again: read the local socket if credit allows.
  void resume();
  // The bound on what it may have in flight changed (another stream of the bridge went quiet):
  // send or read again as the new allowance permits.
  void onAllowanceChanged();
  // Its turn (StreamScheduler): sends one data frame of at most `quantum` bytes of what waits,
  // or, with nothing waiting, reads the local socket again. Asks for another turn if it needs
  // one. Answers the payload bytes sent.
  size_t onTurn(size_t quantum);

  // The earliest deadline (0: none): the connect's (or the 502's), or the visitor's handshake's.
  [[nodiscard]] uint64_t deadlineMs() const {
    if (deadlineMs_ == 0) return handshakeDeadlineMs_;
    if (handshakeDeadlineMs_ == 0) return deadlineMs_;
    return std::min(deadlineMs_, handshakeDeadlineMs_);
  }
  void onTimer(uint64_t nowMs);

  [[nodiscard]] uint32_t connId() const { return options_.connId; }
  // Closed in the protocol's sense: both sides sent `end`, or either sent `reset`.
  [[nodiscard]] bool protocolClosed() const { return reset_ || (sentEnd_ && gotEnd_); }

 private:
  // kUnreachable: the local service could not be reached; a terminated visitor is answered 502
  // (local_unreachable.h) before the stream ends.
  // kConnecting: resolving the target's name, then connecting.
  enum class Local : uint8_t { kIdle, kConnecting, kConnected, kUnreachable, kClosing };

  LocalStream(uv_loop_t* loop, StreamHost& host, StreamOptions options);
  ~LocalStream();

  // tls::TlsStream::Owner: the visitor's TLS, its ciphertext carried in bridge frames.
  bool sendCiphertext(std::vector<uint8_t> bytes) override;
  void onTlsHandshakeDone() override;
  void onTlsPlaintext(std::span<uint8_t> bytes) override;
  void onTlsCloseNotify() override;
  void onTlsFailed() override;
  [[nodiscard]] bool wantsTlsPlaintext() const override { return !closing(); }

  // TcpStream::Handler: the local socket.
  void onConnected() override;
  void onConnectFailed(const ConnectFailure& failure) override;
  void onRead(std::span<const uint8_t> bytes) override;
  void onEof() override;
  void onStreamError(int status) override;
  void onWriteError(int status) override;
  void onWritten(size_t bytes) override;
  void onShutdownDone(int status) override;
  void onClosed() override;
  [[nodiscard]] size_t readSizeLimit() const override;

  static std::string describeUv(std::string_view what, int status);
  [[nodiscard]] bool terminating() const { return tls_ != nullptr; }
  void localConnectFailed(std::string error);
  void answerUnreachable();
  void onLocalBytes(std::span<const uint8_t> bytes);
  void onLocalEof();
  void toLocal(std::span<const uint8_t> bytes);
  void writeLocal(std::vector<uint8_t> bytes);
  void onLocalWritten(size_t bytes);
  void maybeGrant();
  void maybeShutdown();
  void maybeFinish();
  void sendToRelay(std::span<const uint8_t> bytes);
  [[nodiscard]] size_t sendData(std::span<const uint8_t> bytes, size_t limit = SIZE_MAX);
  // The send credit this stream may use now: all of it while it is alone on the bridge, else
  // what keeps its bytes in flight within the host's sendAllowance.
  [[nodiscard]] size_t usableCredit() const;
  void flushToRelay();
  void sendEnd();
  // `turn`: called from onTurn, so reading may start even though the bridge has no room for
  // streams without a turn.
  void updateReading(bool turn = false);
  void requestTurn();
  void resetStream(bridge::ResetReason reason, std::string_view text);
  void closeLocal(bool abortive);
  [[nodiscard]] bool closing() const { return local_ == Local::kClosing; }

  uv_loop_t* loop_;
  StreamHost& host_;
  StreamOptions options_;
  Local local_ = Local::kIdle;

  // The protocol state of section 6.
  bool sentEnd_ = false;
  bool gotEnd_ = false;
  bool reset_ = false;

  bool localEof_ = false;          // the local service closed its side
  bool visitorTlsClosed_ = false;  // terminating: the visitor sent close_notify
  bool shutdownStarted_ = false;
  bool shutdownDone_ = false;
  bool answered_ = false;  // kUnreachable: the 502 went out
  std::string unreachableError_;
  uint64_t deadlineMs_ = 0;
  uint64_t handshakeDeadlineMs_ = 0;  // terminating, until the visitor's handshake is done
  // The bridge was congested (the relay not taking our bytes) since the handshake deadline was
  // last set: what we sent the visitor may still be waiting in our queue.
  bool handshakeHeldByBridge_ = false;

  StreamContext tcpContext_;
  TcpStream* tcp_ = nullptr;  // freed by itself after onClosed
  std::unique_ptr<tls::TlsStream> tls_;

  ReceiveWindow receive_;
  bridge::StreamCredit sendCredit_;
  // Toward the local service: held until it is connected, then queued in tcp_ (queuedBytes()).
  std::vector<uint8_t> pendingLocal_;
  // Toward the relay: what the send credit or the bridge's turns (StreamScheduler) have not
  // let out yet, from pendingOffset_ on (cleared once all is sent).
  std::vector<uint8_t> pendingRelay_;
  size_t pendingOffset_ = 0;
};

}  // namespace ot::client
