// One TCP socket on a libuv loop, for relayd (every public connection) and otunnel (its relay
// connection and each local-service connection). Reads land in the context's read buffer and are
// handed to the current Handler at once, so an idle socket holds no read buffer; writes are queued
// with their byte counts so owners can apply watermarks. Every queued byte (plus a fixed cost per
// write) is reported to the context's accounting (relayd: BUFFERED_BYTES_LIMIT) and obeys the
// context's write backlog marks (write_backlog.h): above the high mark the socket stops reading the
// peer until the peer has taken the queue down to the low mark, whatever its owner wants; a write
// past the hard limit resets the peer. The handler can change while the socket lives (relayd:
// ClientHello reader -> API session -> bridge, or -> visitor).
//
// A stream comes from an accepted descriptor (adopt) or is opened and then connected to a host
// and port (open + connect: resolve without DNS where possible, else one DnsQuery, then connect).
//
// Lifetime: deleted by itself after its close callback ran, then the handler's onClosed is called;
// the context must outlive that. Loop thread only; nothing here blocks or throws.
#pragma once

#include <sys/socket.h>
#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/peer_endpoint.h"
#include "common/stream_ring.h"
#include "common/write_backlog.h"

namespace ot {

class DnsQuery;
class TcpStream;

// What a stream needs from its owner's side of the process. relayd's RelayContext is one; otunnel
// has its own (client/stream_context.h).
class TcpStreamContext {
 public:
  [[nodiscard]] virtual uv_loop_t* streamLoop() const = 0;
  // Where every read lands; used only inside one read callback at a time.
  [[nodiscard]] virtual std::span<uint8_t> streamReadBuffer() = 0;
  [[nodiscard]] virtual WriteBacklogMarks writeBacklogMarks() const = 0;
  // Bytes queued for writing (plus kWriteOverheadBytes per write) went up or down by `delta`.
  virtual void addBuffered(int64_t delta) = 0;
  virtual void onStreamOpened(TcpStream& stream) = 0;
  virtual void onStreamClosed(TcpStream& stream) = 0;  // inside the close callback
  // The backlog passed the high mark: the stream stopped reading its peer.
  virtual void onWriteBacklogPaused() = 0;
  // A write of `refused` bytes would have passed the hard limit: the stream resets the peer.
  virtual void onWriteBacklogOverflow(const TcpStream& stream, size_t refused) = 0;
  // The batched kernel path for mostly idle streams (common/stream_ring.h); none by default.
  [[nodiscard]] virtual StreamRing* streamRing() { return nullptr; }

 protected:
  ~TcpStreamContext() = default;
};

// Why connect() gave up; the owner words it.
struct ConnectFailure {
  enum class Stage : uint8_t {
    kResolve,       // the lookup failed or could not start
    kStartConnect,  // uv_tcp_connect refused at once (`address` is set)
    kConnect,       // the connect completed with an error
  };
  Stage stage = Stage::kResolve;
  int status = 0;  // a libuv error code
  sockaddr_storage address{};
};

class TcpStream {
 public:
  class Handler {
   public:
    // Bytes read; valid only during the call. The handler may stop reading, write or close.
    virtual void onRead(std::span<const uint8_t> bytes) = 0;
    virtual void onEof() = 0;                    // the peer half-closed
    virtual void onStreamError(int status) = 0;  // read or write failed (ECONNRESET, ...)
    virtual void onWritten(size_t bytes) = 0;    // a queued write completed
    virtual void onClosed() = 0;                 // last call: the stream is freed right after
    // A write failed (or could not be queued); by default a stream error like a failed read.
    virtual void onWriteError(int status) { onStreamError(status); }
    // The FIN of shutdownWrite() went out (status 0) or failed; not called once closing.
    virtual void onShutdownDone(int status) { (void)status; }
    // connect(): the socket is connected (reading is not started) or it failed.
    virtual void onConnected() {}
    virtual void onConnectFailed(const ConnectFailure& failure) { (void)failure; }
    // At most this many bytes per read (the rest stays in the kernel); at least 1.
    [[nodiscard]] virtual size_t readSizeLimit() const { return SIZE_MAX; }
    // Asks for the cache lines onRead will read `stage` pointers away from the handler (0: the
    // handler itself) without waiting for them: relayd's ring does it for a batch of receives
    // before delivering them (TcpStream::prefetch). Reads only.
    virtual void prefetchForRead(unsigned stage) const { (void)stage; }

   protected:
    ~Handler() = default;
  };

  // Takes ownership of an accepted, non-blocking descriptor (closed on failure: nullptr).
  [[nodiscard]] static TcpStream* adopt(TcpStreamContext& context, int fd, Handler* handler);
  // A socket not connected yet (nullptr when libuv cannot create one); connect() follows.
  [[nodiscard]] static TcpStream* open(TcpStreamContext& context, Handler* handler);

  // Resolves `host` (DnsQuery::resolve) and connects; the handler hears onConnected or
  // onConnectFailed, possibly from inside this call. Once only; nothing happens when closing.
  void connect(const std::string& host, uint16_t port);
  // Before connect(): the local address (port 0: any) the connection leaves from, so a peer that
  // checks where a connection comes from sees this machine's address, not the kernel's pick.
  // Answers uv_tcp_bind's error (0: bound).
  int bindSource(const sockaddr_storage& address);
  // The owner gave up waiting (its own deadline): the lookup is cancelled and neither
  // onConnected nor onConnectFailed follows. The socket stays open until close().
  void abandonConnect();

  void setHandler(Handler* handler) { handler_ = handler; }
  // What the owner wants; the socket reads only while the owner wants it and the peer's write
  // backlog is under its high mark. startReading answers uv_read_start's error (0: fine).
  int startReading();
  void stopReading();
  [[nodiscard]] bool reading() const { return reading_ || ringState_ == RingState::kArmed; }
  // One read of what the socket holds now, delivered as a read would be (onRead, onEof or
  // onStreamError), without asking libuv to watch the socket: for a connection just accepted,
  // whose first bytes are usually in already. A connection turned away on them is then never
  // registered with epoll (relayd, in a reconnect storm). False when nothing was there (the
  // owner starts reading as usual); true when the handler heard something.
  [[nodiscard]] bool readNow();
  // The owner says the stream is mostly idle (a bridge between visitors): while it reads, its
  // reads come through the context's StreamRing where there is one. Turning it off goes back
  // to libuv once the ring's receive has ended; bytes keep their order across the switch.
  void setRingReads(bool on);
  [[nodiscard]] bool ringReading() const { return ringState_ != RingState::kNone; }

  // Queues bytes for the socket. Ignored once closing. A write that would take the backlog past
  // its hard limit is not queued: the peer is reset (counted, logged) and the stream closes.
  void write(std::vector<uint8_t> bytes);
  // Writes what the socket takes at once (uv_try_write: no request, no write watcher) and queues
  // only the rest, as write() does: from `bytes` copied (writeCopy) or `bytes` itself (writeNow).
  // Answers the bytes the kernel took during the call: they count in bytesWritten() at once and
  // are NOT reported through onWritten (the caller accounts for them; the rest is reported
  // there as usual). Nothing is tried while writes are queued or once shut down (their order),
  // and a failed attempt leaves the error to the queued write's callback.
  [[nodiscard]] size_t writeCopy(std::span<const uint8_t> bytes);
  // writeCopy of several pieces in one write (writev), queued as one piece when not all taken.
  [[nodiscard]] size_t writeCopy(std::span<const std::span<const uint8_t>> pieces);
  [[nodiscard]] size_t writeNow(std::vector<uint8_t> bytes);
  // Asks for cache lines without waiting for them (common/prefetch.h): stage 0 those of this
  // stream that writeNow and a ring receive's delivery read; a later stage those of its handler,
  // one pointer further per stage (Handler::prefetchForRead). relayd does it for a batch of idle
  // bridges about to be pinged, or whose pongs are about to be delivered. Reads only.
  void prefetch(unsigned stage) const;
  [[nodiscard]] size_t queuedBytes() const { return queuedBytes_; }
  // The peer leaves more than the high mark unread: its reading is paused until the low mark.
  // Owners that hold input already read (pipelined requests) wait for this to clear too; they
  // hear of it through onWritten.
  [[nodiscard]] bool writeBacklogged() const { return backlog_.paused(); }
  // Sends FIN once queued writes are done. Answers uv_shutdown's error (0: started or already).
  int shutdownWrite();
  // Closes the socket; `reset` aborts with an RST (SO_LINGER 0) instead of a FIN. Idempotent.
  void close(bool reset);
  [[nodiscard]] bool closing() const { return closing_; }

  // For the StreamRing only. Data its receive took from the socket (valid during the call).
  void onRingData(std::span<const uint8_t> bytes);
  // Its receive ended: 0 the peer's EOF, a negative errno (ECANCELED when asked), 1 otherwise.
  void onRingReceiveEnded(int result);
  // A batched send completed: `result` bytes taken, or a negative errno.
  void onRingSent(std::vector<uint8_t> bytes, int result);
  // Bytes held while the stream did not read may be delivered now (deliverHeldSoon).
  void onRingHeldDue();

  void setNoDelay(bool on);
  void setKeepAlive(unsigned delaySeconds);
  // TCP_NOTSENT_LOWAT: at most this much unsent data sits in the kernel for this socket.
  void setNotSentLowat(int bytes);
  // Bytes the peer has acknowledged: written to the kernel minus its send queue (SIOCOUTQ).
  [[nodiscard]] uint64_t bytesAcked() const;
  // The lowest round-trip time the kernel saw lately on the connection (TCP_INFO's min_rtt: the
  // path's delay without queueing; the smoothed RTT on kernels without it), 0 when unknown.
  [[nodiscard]] uint32_t minRttUs() const;
  // Bytes whose writes completed (taken by the kernel) since the stream opened.
  [[nodiscard]] uint64_t bytesWritten() const { return bytesWritten_; }
  // The peer's address alone ("192.0.2.7", "2001:db8::1"): what per-source limits and controld
  // get. peer() adds the port, for the bridge `open` frame and logs.
  [[nodiscard]] const std::string& peerAddress() const { return peer_.address; }
  [[nodiscard]] const PeerEndpoint& peer() const { return peer_; }
  void setPeer(PeerEndpoint peer) { peer_ = std::move(peer); }

 private:
  TcpStream(TcpStreamContext& context, Handler* handler);
  ~TcpStream() = default;

  static void onAlloc(uv_handle_t* handle, size_t suggested, uv_buf_t* buf);
  static void onReadCb(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf);
  static void onWriteCb(uv_write_t* req, int status);
  static void onShutdownCb(uv_shutdown_t* req, int status);
  static void onConnectCb(uv_connect_t* req, int status);
  static void onCloseCb(uv_handle_t* handle);
  enum class RingState : uint8_t { kNone, kArmed, kCancelling };
  int applyReading();
  [[nodiscard]] int descriptor() const;
  // A ring send still waits in the open batch: it goes first (everything else comes after it).
  void flushRingSend();
  void finishClose(bool reset);
  [[nodiscard]] size_t tryWrite(std::span<const std::span<const uint8_t>> pieces);
  void queueWrite(std::vector<uint8_t> bytes, size_t offset);
  void overflow(size_t bytes);
  void connectTo(const sockaddr_storage& address);
  void connectFailed(ConnectFailure::Stage stage, int status, const sockaddr_storage& address);

  TcpStreamContext& context_;
  Handler* handler_;
  uv_tcp_t tcp_{};
  uv_connect_t connectReq_{};
  DnsQuery* dns_ = nullptr;  // connect(): the lookup in flight
  size_t queuedBytes_ = 0;
  size_t chargedBytes_ = 0;  // queuedBytes_ plus kWriteOverheadBytes per queued write
  WriteBacklogGate backlog_;
  uint64_t bytesWritten_ = 0;  // completed writes, for bytesAcked
  PeerEndpoint peer_;
  bool reading_ = false;      // the socket reads now
  bool wantReading_ = false;  // the owner wants it to
  bool closing_ = false;
  bool shutdownSent_ = false;
  bool connectStarted_ = false;
  bool connectAbandoned_ = false;
  // The StreamRing path (setRingReads): the owner's wish, the receive's state, a close waiting
  // for the receive to end, bytes read while not reading, and a send in the open batch.
  bool ringReads_ = false;
  RingState ringState_ = RingState::kNone;
  bool closeAfterRing_ = false;
  bool closeReset_ = false;
  bool heldDue_ = false;
  size_t ringSending_ = 0;
  std::vector<uint8_t> held_;
};

}  // namespace ot
