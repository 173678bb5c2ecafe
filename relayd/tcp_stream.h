// One TCP socket on the relay's loop. Reads land in the loop-wide read buffer (RelayContext) and
// are handed to the current Handler at once, so an idle socket holds no read buffer; writes are
// queued with their byte counts so owners can apply watermarks. Every queued byte (plus a fixed
// cost per write) counts in the process's buffered bytes (BUFFERED_BYTES_LIMIT) and obeys the
// peer write backlog (write_backlog.h): above its high mark the socket stops reading the peer until
// the peer has taken the queue down to the low mark, whatever its owner wants; a write past its
// hard limit resets the peer. The handler can change while the
// socket lives (ClientHello reader -> API session -> bridge, or -> visitor).
//
// Lifetime: created by adopt(), deleted by itself after its close callback ran and the handler's
// onClosed returned. Loop thread only.
#pragma once

#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "relayd/peer_endpoint.h"
#include "relayd/write_backlog.h"

namespace ot::relayd {

struct RelayContext;

class TcpStream {
 public:
  class Handler {
   public:
    // Bytes read; valid only during the call. The handler may stop reading, write or close.
    virtual void onRead(std::span<const uint8_t> bytes) = 0;
    virtual void onEof() = 0;                 // the peer half-closed
    virtual void onStreamError(int status) = 0;  // read or write failed (ECONNRESET, ...)
    virtual void onWritten(size_t bytes) = 0;    // a queued write completed
    virtual void onClosed() = 0;                 // last call: the stream is freed right after

   protected:
    ~Handler() = default;
  };

  // Takes ownership of an accepted, non-blocking descriptor (closed on failure: nullptr).
  [[nodiscard]] static TcpStream* adopt(RelayContext& context, int fd, Handler* handler);

  void setHandler(Handler* handler) { handler_ = handler; }
  // What the owner wants; the socket reads only while the owner wants it and the peer's write
  // backlog is under its high mark.
  void startReading();
  void stopReading();
  [[nodiscard]] bool reading() const { return reading_; }

  // Queues bytes for the socket. Ignored once closing. A write that would take the backlog past
  // its hard limit is not queued: the peer is reset (counted, logged) and the stream closes.
  void write(std::vector<uint8_t> bytes);
  [[nodiscard]] size_t queuedBytes() const { return queuedBytes_; }
  // The peer leaves more than the high mark unread: its reading is paused until the low mark.
  // Owners that hold input already read (pipelined requests) wait for this to clear too; they
  // hear of it through onWritten.
  [[nodiscard]] bool writeBacklogged() const { return backlog_.paused(); }
  // Sends FIN once queued writes are done.
  void shutdownWrite();
  // Closes the socket; `reset` aborts with an RST (SO_LINGER 0) instead of a FIN. Idempotent.
  void close(bool reset);
  [[nodiscard]] bool closing() const { return closing_; }

  // TCP_NOTSENT_LOWAT: at most this much unsent data sits in the kernel for this socket.
  void setNotSentLowat(int bytes);
  // Bytes the peer has acknowledged: written to the kernel minus its send queue (SIOCOUTQ).
  [[nodiscard]] uint64_t bytesAcked() const;
  // Bytes whose writes completed (taken by the kernel) since the stream opened.
  [[nodiscard]] uint64_t bytesWritten() const { return bytesWritten_; }
  // The peer's address alone ("192.0.2.7", "2001:db8::1"): what per-source limits and controld
  // get. peer() adds the port, for the bridge `open` frame and logs.
  [[nodiscard]] const std::string& peerAddress() const { return peer_.address; }
  [[nodiscard]] const PeerEndpoint& peer() const { return peer_; }
  void setPeer(PeerEndpoint peer) { peer_ = std::move(peer); }
  [[nodiscard]] RelayContext& context() const { return context_; }

 private:
  TcpStream(RelayContext& context, Handler* handler);
  ~TcpStream() = default;

  static void onAlloc(uv_handle_t* handle, size_t suggested, uv_buf_t* buf);
  static void onReadCb(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf);
  static void onWriteCb(uv_write_t* req, int status);
  static void onShutdownCb(uv_shutdown_t* req, int status);
  static void onCloseCb(uv_handle_t* handle);
  void applyReading();
  void overflow(size_t bytes);

  RelayContext& context_;
  Handler* handler_;
  uv_tcp_t tcp_{};
  size_t queuedBytes_ = 0;
  size_t chargedBytes_ = 0;  // queuedBytes_ plus kWriteOverheadBytes per queued write
  WriteBacklogGate backlog_;
  uint64_t bytesWritten_ = 0;  // completed writes, for bytesAcked
  PeerEndpoint peer_;
  bool reading_ = false;      // the socket reads now
  bool wantReading_ = false;  // the owner wants it to
  bool closing_ = false;
  bool shutdownSent_ = false;
};

}  // namespace ot::relayd
