// One connection from otunnel to the relay, below the bridge protocol: resolve, TCP connect,
// TLS (SNI and certificate name = the API domain, ALPN http/1.1), the WebSocket upgrade of
// docs/protocol.md section 1, then whole WebSocket messages in and masked frames out. Pings are
// answered here at once; the closing handshake is RFC 6455's. What the messages mean (attach,
// stream frames) is the listener's business (BridgeClient).
//
// The socket is a TcpStream (common/tcp_stream.h: resolve, connect, reads and queued writes) and
// the TLS a TlsStream over it, as in relayd's API connection.
//
// Ownership: a heap object created by its listener, freed by itself once its socket is closed;
// onTransportClosed() is the last thing it does, so the listener must outlive it until then.
// Loop thread only; nothing here blocks or throws.
#pragma once

#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/relay_upgrade.h"
#include "client/stream_context.h"
#include "common/tcp_stream.h"
#include "common/tls_engine.h"
#include "common/tls_stream.h"
#include "common/websocket_frame.h"
#include "common/websocket_message.h"

namespace ot::client {

struct RelayEndpoint {
  std::string host;  // TCP address (names under .localhost are 127.0.0.1)
  uint16_t port = 443;
  std::string domain;  // SNI, certificate name and Host header
  std::string path;    // "/api/tunnel/<id>/bridge"
  std::string userAgent;
  tls::SslCtxPtr tlsContext;  // a client context (verifies the relay's chain)
};

class RelayTransportListener {
 public:
  virtual ~RelayTransportListener() = default;
  // The relay switched protocols: send `attach` now.
  virtual void onUpgraded() = 0;
  // The attempt failed before onUpgraded (DNS, TCP, TLS, an error answer). The transport is
  // closing; onTransportClosed follows.
  virtual void onTransportFailed(const TransportFailure& failure) = 0;
  virtual void onTextMessage(std::string_view text) = 0;
  virtual void onBinaryMessage(std::span<const uint8_t> message) = 0;
  // After onUpgraded, the connection ended without a local close() or abort(): `code` is the
  // relay's close code, 1006 when the connection dropped, or the code we closed with when the
  // relay broke RFC 6455. No message is delivered after this.
  virtual void onDisconnected(uint16_t code, std::string_view reason) = 0;
  // The socket is closed and the transport is gone.
  virtual void onTransportClosed() = 0;
  // The write queue fell back below the low watermark after congested() had turned true.
  virtual void onWritable() = 0;
  // A write completed (queuedBytes() went down): a stream waiting for its turn may go.
  virtual void onBytesWritten() = 0;
};

class RelayTransport final : private tls::TlsStream::Owner, private TcpStream::Handler {
 public:
  // nullptr when the socket could not be created (nothing to close then).
  [[nodiscard]] static RelayTransport* create(uv_loop_t* loop, RelayEndpoint endpoint,
                                              RelayTransportListener& listener);
  RelayTransport(const RelayTransport&) = delete;
  RelayTransport& operator=(const RelayTransport&) = delete;

  // Direct mode: the transport over a connection the relay opened to us (`fd`, accepted,
  // non-blocking, owned from here on: closed on failure, then nullptr). start() goes straight
  // to TLS; otunnel still speaks first (its ClientHello), as when it dials.
  [[nodiscard]] static RelayTransport* adopt(uv_loop_t* loop, RelayEndpoint endpoint,
                                             RelayTransportListener& listener, int fd);

  // Resolves and connects (accepted: starts TLS). A failure may be reported from inside this
  // call.
  void start();

  // Frames with the mask bit set and a zero key (relay_frame.h); false when the connection is
  // not open for messages (nothing sent).
  bool sendText(std::string_view text);  // drops a text held for the pong: this one is newer
  bool sendBinary(std::span<const uint8_t> head, std::span<const uint8_t> payload);
  bool sendPing(std::span<const uint8_t> payload);
  // A text message that may wait: it goes in the same TLS record as our answer to the relay's
  // next ping, so the relay reads both with one wakeup (an idle bridge's status refresh,
  // docs/capacity.md "Idle"), or alone with flushHeldText(). A newer one replaces it (and keeps
  // the first one's wait). False when the connection is not open for messages.
  bool holdTextForPong(std::string text);
  // uv_now() when the held text began to wait; 0 when none waits.
  [[nodiscard]] uint64_t heldTextSinceMs() const { return heldTextSinceMs_; }
  bool flushHeldText();
  // sendBinary inside a batch, keeping a reference to `payload` instead of a copy: the caller
  // guarantees it stays valid and unchanged until the outermost endBatch(). The frames are then
  // sealed into TLS records straight from it (TlsStream::writeGather). Outside a batch: sendBinary.
  bool sendBinaryBorrowed(std::span<const uint8_t> head, std::span<const uint8_t> payload);

  // Binary frames sent until the matching endBatch() are held and then encrypted as one TLS
  // write and written to the socket as one write: full 16 KiB records instead of a short record
  // at the end of every frame, and one write (one wakeup of the relay) for, e.g., all the data
  // frames of one local read. Batches nest (the outermost one writes). Control frames are never
  // held: they send what is held first, then themselves.
  void beginBatch() { ++batchDepth_; }
  void endBatch();

  // Starts the closing handshake (before the upgrade: drops the connection). The owner enforces
  // closeDeadlineMs() with abort(). No listener call results from close() or abort() except
  // onTransportClosed.
  void close(uint16_t code, std::string_view reason = {});
  void abort();

  // The message size limit (64 KiB before `attached`, header + 32 KiB after).
  void setMaxMessageSize(uint64_t bytes) { reader_.setMaxMessageSize(bytes); }

  [[nodiscard]] bool isOpen() const { return state_ == State::kOpen; }
  // The bridge's TLS runs on our own record layer (OpenSSL's state dropped after the upgrade):
  // decided by the relay's first record after `attach`, so known when `attached` arrives.
  [[nodiscard]] bool tlsDetached() const { return tls_ != nullptr && tls_->detached(); }
  // uv_now() when bytes last arrived from the relay (connect time before any did).
  [[nodiscard]] uint64_t lastReceiveMs() const { return lastReceiveMs_; }
  // When our close has gone unanswered for 5 s (0: no close pending).
  [[nodiscard]] uint64_t closeDeadlineMs() const { return closeDeadlineMs_; }
  // Bytes on their way that the socket has not taken: ciphertext queued to it, plus frames held
  // in a batch (what StreamScheduler's turns and the watermarks look at).
  [[nodiscard]] size_t queuedBytes() const { return tcp_->queuedBytes() + heldBytes_; }
  // TCP_NOTSENT_LOWAT of the socket: the kernel keeps at most this much unsent, so bytes
  // wait in our queue instead, where the streams' turns are decided (StreamScheduler).
  static constexpr int kNotSentLowat = 64 * 1024;
  // The socket's lowest recent RTT (TCP_INFO's min_rtt) as of `nowMs` (uv_now), read at most every
  // 100 ms: it scales the streams' in-flight allowances (StreamScheduler). 0 before the socket
  // exists.
  [[nodiscard]] uint64_t minRttUs(uint64_t nowMs) {
    if (tcp_ == nullptr) return 0;
    if (rttReadMs_ == 0 || nowMs >= rttReadMs_ + 100) {
      rttUs_ = tcp_->minRttUs();
      rttReadMs_ = nowMs + 1;  // never 0 once read
    }
    return rttUs_;
  }
  // Above the high watermark (1 MiB) until the queue drains below the low one (256 KiB): the
  // producers (visitor streams) stop reading their local sockets meanwhile.
  [[nodiscard]] bool congested() const { return congested_; }

 private:
  enum class State : uint8_t {
    kIdle,
    kConnecting,  // resolving the relay's name, then connecting
    kTlsHandshake,
    kUpgrading,
    kOpen,       // messages both ways
    kCloseSent,  // our close is out; waiting for the relay's
    kFlushing,   // the closing handshake is done; the last writes drain, then the socket closes
    kClosing,    // the socket is closing
  };

  RelayTransport(uv_loop_t* loop, RelayEndpoint endpoint, RelayTransportListener& listener);
  ~RelayTransport();

  // tls::TlsStream::Owner
  bool sendCiphertext(std::vector<uint8_t> bytes) override;
  void onTlsHandshakeDone() override;
  void onTlsPlaintext(std::span<uint8_t> bytes) override;
  void onTlsCloseNotify() override;
  void onTlsFailed() override;
  [[nodiscard]] bool wantsTlsPlaintext() const override;

  // TcpStream::Handler
  void onConnected() override;
  void onConnectFailed(const ConnectFailure& failure) override;
  void onRead(std::span<const uint8_t> bytes) override;
  void onEof() override { onEndOfStream(UV_EOF); }
  void onStreamError(int status) override { onEndOfStream(status); }
  void onWriteError(int status) override;
  void onWritten(size_t bytes) override;
  void onClosed() override;

  void onEndOfStream(int status);
  void consumePlaintext(std::span<uint8_t> data);
  void consumeWebSocket(std::span<uint8_t> data);
  void onUpgradeStep(const RelayUpgrade::Step& step);
  void onPeerClose(uint16_t code, std::string_view reason);
  void sendUpgradeRequest();
  bool sendFrame(ws::Opcode opcode, std::span<const uint8_t> head,
                 std::span<const uint8_t> payload);
  // Encrypts and sends the held frames (false when the transport failed or is closing).
  bool flushBatch();
  void sendPong(std::span<const uint8_t> payload);  // with the held text, if any
  void dropHeldText();
  void writeRaw(std::vector<uint8_t> bytes);
  // The connection ended on its own (not by close()/abort()): tell the listener once.
  void fail(std::string text, int httpStatus = 0, std::string tag = {}, bool permanent = false,
            RetryHint retry = {});
  // A failure whose kind (busy or broken) follows from how it happened.
  void failAs(std::string text, const AttemptEnd& end);
  void lose(uint16_t code, std::string text);
  void protocolClose(uint16_t code, std::string text);
  void closeSocket();
  [[nodiscard]] bool closing() const { return state_ == State::kClosing; }

  uv_loop_t* loop_;
  RelayEndpoint endpoint_;
  RelayTransportListener& listener_;
  State state_ = State::kIdle;
  bool upgraded_ = false;
  bool accepted_ = false;  // adopt(): connected already
  bool reported_ = false;  // the listener heard how it ended (or the owner ended it)
  StreamContext tcpContext_;
  TcpStream* tcp_ = nullptr;  // freed by itself after onClosed
  std::unique_ptr<tls::TlsStream> tls_;
  std::optional<RelayUpgrade> upgrade_;  // from the TLS handshake to the 101
  ws::MessageReader reader_;
  std::vector<uint8_t> frameScratch_;  // frames are assembled here (see sendFrame)
  std::string heldText_;               // holdTextForPong's message, not yet sent
  uint64_t heldTextSinceMs_ = 0;       // when it began to wait (0: nothing held)
  // The frames held by beginBatch, in order: bytes copied into batch_, and borrowed payloads.
  // pieces_ lists them in order once a borrowed one is held (empty: batch_ is all of it).
  struct HeldPiece {
    const uint8_t* borrowed = nullptr;  // null: batch_[offset, offset + size)
    size_t offset = 0;
    size_t size = 0;
  };
  std::vector<uint8_t> batch_;
  std::vector<HeldPiece> pieces_;
  size_t heldBytes_ = 0;         // batch_ plus the borrowed bytes
  void holdCopied(size_t from);  // batch_[from:] was just appended
  void dropBatch();
  unsigned batchDepth_ = 0;
  uint64_t lastReceiveMs_ = 0;
  uint64_t closeDeadlineMs_ = 0;
  bool congested_ = false;
  uint64_t rttUs_ = 0;      // minRttUs's last reading
  uint64_t rttReadMs_ = 0;  // and when (uv_now); 0: never
};

}  // namespace ot::client
