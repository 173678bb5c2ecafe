#include "common/tcp_stream.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

#include "common/address_resolver.h"
#include "common/byte_buffer_pool.h"
#include "common/prefetch.h"

namespace ot {

namespace {

struct WriteRequest {
  uv_write_t req{};
  std::vector<uint8_t> bytes;
  size_t offset = 0;  // bytes[offset..] is what this request writes
  [[nodiscard]] size_t size() const { return bytes.size() - offset; }
};

}  // namespace

TcpStream::TcpStream(TcpStreamContext& context, Handler* handler)
    : context_(context), handler_(handler), backlog_(context.writeBacklogMarks()) {
  tcp_.data = this;
  connectReq_.data = this;
}

TcpStream* TcpStream::open(TcpStreamContext& context, Handler* handler) {
  auto* stream = new (std::nothrow) TcpStream(context, handler);
  if (stream == nullptr) return nullptr;
  if (uv_tcp_init(context.streamLoop(), &stream->tcp_) != 0) {
    delete stream;
    return nullptr;
  }
  context.onStreamOpened(*stream);
  return stream;
}

TcpStream* TcpStream::adopt(TcpStreamContext& context, int fd, Handler* handler) {
  auto* stream = new (std::nothrow) TcpStream(context, handler);
  if (stream == nullptr) {
    ::close(fd);
    return nullptr;
  }
  if (uv_tcp_init(context.streamLoop(), &stream->tcp_) != 0) {
    ::close(fd);
    delete stream;
    return nullptr;
  }
  if (uv_tcp_open(&stream->tcp_, fd) != 0) {
    ::close(fd);
    // The handle was initialised: it must be closed through the loop.
    stream->closing_ = true;
    stream->handler_ = nullptr;
    uv_close(reinterpret_cast<uv_handle_t*>(&stream->tcp_), onCloseCb);
    return nullptr;
  }
  context.onStreamOpened(*stream);
  return stream;
}

// --- Connecting -------------------------------------------------------------------------------

void TcpStream::connect(const std::string& host, uint16_t port) {
  if (closing_ || connectStarted_) return;
  connectStarted_ = true;
  dns_ = DnsQuery::resolve(context_.streamLoop(), host, port,
                           [this](int status, const sockaddr_storage& address) {
                             dns_ = nullptr;
                             if (status != 0) {
                               connectFailed(ConnectFailure::Stage::kResolve, status, address);
                               return;
                             }
                             connectTo(address);
                           });
}

int TcpStream::bindSource(const sockaddr_storage& address) {
  if (closing_ || connectStarted_) return UV_EINVAL;
  return uv_tcp_bind(&tcp_, reinterpret_cast<const sockaddr*>(&address), 0);
}

void TcpStream::connectTo(const sockaddr_storage& address) {
  if (closing_ || connectAbandoned_) return;
  const int rc =
      uv_tcp_connect(&connectReq_, &tcp_, reinterpret_cast<const sockaddr*>(&address), onConnectCb);
  if (rc != 0) connectFailed(ConnectFailure::Stage::kStartConnect, rc, address);
}

void TcpStream::onConnectCb(uv_connect_t* req, int status) {
  auto* self = static_cast<TcpStream*>(req->data);
  if (status == UV_ECANCELED || self->closing_ || self->connectAbandoned_) return;
  if (status != 0) {
    self->connectFailed(ConnectFailure::Stage::kConnect, status, sockaddr_storage{});
    return;
  }
  if (self->handler_ != nullptr) self->handler_->onConnected();
}

void TcpStream::connectFailed(ConnectFailure::Stage stage, int status,
                              const sockaddr_storage& address) {
  if (handler_ != nullptr) handler_->onConnectFailed({stage, status, address});
}

void TcpStream::abandonConnect() {
  connectAbandoned_ = true;
  if (dns_ != nullptr) {
    dns_->cancel();
    dns_ = nullptr;
  }
}

// --- Reading ----------------------------------------------------------------------------------

int TcpStream::startReading() {
  wantReading_ = true;
  return applyReading();
}

void TcpStream::stopReading() {
  wantReading_ = false;
  applyReading();
}

void TcpStream::setRingReads(bool on) {
  if (ringReads_ == on) return;
  ringReads_ = on;
  applyReading();
}

int TcpStream::applyReading() {
  if (closing_) return 0;
  const bool should = wantReading_ && !backlog_.paused();
  StreamRing* ring = context_.streamRing();
  const bool viaRing = should && ringReads_ && ring != nullptr;
  if (!viaRing && ringState_ == RingState::kArmed) {
    ring->cancelReceive(this);
    ringState_ = RingState::kCancelling;
  }
  if ((!should || viaRing) && reading_) {
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp_));
    reading_ = false;
  }
  // The ring's receive must end before libuv reads (onRingReceiveEnded comes back here), and
  // bytes the ring read while the owner did not want them go before anything newer.
  if (ringState_ == RingState::kCancelling) return 0;
  if (should && !held_.empty()) {
    if (!heldDue_) {
      heldDue_ = true;
      ring->deliverHeldSoon(this);
    }
    return 0;
  }
  if (viaRing) {
    if (ringState_ == RingState::kArmed) return 0;
    if (ring->armReceive(descriptor(), this)) {
      ringState_ = RingState::kArmed;
      return 0;
    }
    // Not armed (no room in the ring now): libuv reads as usual.
  }
  if (should && !reading_) {
    const int rc = uv_read_start(reinterpret_cast<uv_stream_t*>(&tcp_), onAlloc, onReadCb);
    if (rc != 0) return rc;
    reading_ = true;
  }
  return 0;
}

bool TcpStream::readNow() {
  if (closing_ || handler_ == nullptr || reading() || !held_.empty()) return false;
  const int fd = descriptor();
  if (fd < 0) return false;
  const std::span<uint8_t> buffer = context_.streamReadBuffer();
  const size_t size = std::min(buffer.size(), std::max<size_t>(handler_->readSizeLimit(), 1));
  ssize_t got = 0;
  do {
    got = ::recv(fd, buffer.data(), size, 0);
  } while (got < 0 && errno == EINTR);
  if (got > 0) {
    handler_->onRead(std::span<const uint8_t>(buffer.data(), static_cast<size_t>(got)));
    return true;
  }
  if (got == 0) {
    handler_->onEof();
    return true;
  }
  if (errno == EAGAIN) return false;  // EWOULDBLOCK is the same value on Linux
  handler_->onStreamError(-errno);    // libuv's codes are negative errnos on Linux
  return true;
}

int TcpStream::descriptor() const {
  uv_os_fd_t fd = -1;
  if (uv_fileno(reinterpret_cast<const uv_handle_t*>(&tcp_), &fd) != 0) return -1;
  return fd;
}

void TcpStream::onRingData(std::span<const uint8_t> bytes) {
  if (closing_ || handler_ == nullptr) return;
  if (wantReading_ && !backlog_.paused() && held_.empty()) {
    handler_->onRead(bytes);
    return;
  }
  // Taken from the socket after the owner stopped reading (the cancel was on its way): kept
  // for when it reads again, in order.
  held_.insert(held_.end(), bytes.begin(), bytes.end());
}

void TcpStream::onRingReceiveEnded(int result) {
  ringState_ = RingState::kNone;
  if (closeAfterRing_) {
    finishClose(closeReset_);
    return;
  }
  if (closing_ || handler_ == nullptr) return;
  if (result == 0 || (result < 0 && result != -ECANCELED && result != -ENOBUFS)) {
    // The peer's EOF or a socket error, as libuv would report it (its codes are negative
    // errnos); what was read before it comes first even if the owner paused meanwhile.
    if (!held_.empty()) {
      std::vector<uint8_t> held = std::move(held_);
      held_.clear();
      handler_->onRead(held);
      if (closing_) return;
    }
    stopReading();
    if (result == 0) {
      handler_->onEof();
    } else {
      handler_->onStreamError(result);
    }
    return;
  }
  applyReading();  // cancelled as asked, or out of buffers: on by the owner's current wish
}

void TcpStream::onRingHeldDue() {
  heldDue_ = false;
  if (closing_ || handler_ == nullptr) return;
  if (!wantReading_ || backlog_.paused()) return;  // applyReading asks again when it reads
  std::vector<uint8_t> held = std::move(held_);
  held_.clear();
  handler_->onRead(held);
  if (!closing_) applyReading();
}

void TcpStream::onAlloc(uv_handle_t* handle, size_t, uv_buf_t* buf) {
  auto* self = static_cast<TcpStream*>(handle->data);
  const std::span<uint8_t> buffer = self->context_.streamReadBuffer();
  size_t size = buffer.size();
  if (self->handler_ != nullptr)
    size = std::min(size, std::max<size_t>(self->handler_->readSizeLimit(), 1));
  *buf = uv_buf_init(reinterpret_cast<char*>(buffer.data()), static_cast<unsigned>(size));
}

void TcpStream::onReadCb(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  auto* self = static_cast<TcpStream*>(stream->data);
  if (self->closing_ || self->handler_ == nullptr) return;
  if (nread > 0) {
    self->handler_->onRead(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(buf->base),
                                                    static_cast<size_t>(nread)));
    return;
  }
  if (nread == 0) return;
  self->stopReading();
  if (nread == UV_EOF) {
    self->handler_->onEof();
  } else {
    self->handler_->onStreamError(static_cast<int>(nread));
  }
}

// --- Writing ----------------------------------------------------------------------------------

void TcpStream::write(std::vector<uint8_t> bytes) {
  queueWrite(std::move(bytes), 0);
}

void TcpStream::flushRingSend() {
  if (ringSending_ > 0) context_.streamRing()->flushSends();
}

void TcpStream::onRingSent(std::vector<uint8_t> bytes, int result) {
  ringSending_ = 0;
  const size_t taken = result > 0 ? static_cast<size_t>(result) : 0;
  bytesWritten_ += taken;
  // No room (EAGAIN), a short send, or an error the queued write will report.
  if (taken < bytes.size()) {
    queueWrite(std::move(bytes), taken);
  } else {
    returnPooledBuffer(bytes);
  }
}

size_t TcpStream::tryWrite(std::span<const std::span<const uint8_t>> pieces) {
  flushRingSend();
  if (closing_ || shutdownSent_ || queuedBytes_ > 0 || pieces.empty()) return 0;
  constexpr size_t kMaxPieces = 16;
  std::array<uv_buf_t, kMaxPieces> bufs{};
  const size_t count = std::min(pieces.size(), kMaxPieces);
  for (size_t i = 0; i < count; ++i) {
    bufs[i] = uv_buf_init(const_cast<char*>(reinterpret_cast<const char*>(pieces[i].data())),
                          static_cast<unsigned>(pieces[i].size()));
  }
  const int rc = uv_try_write(reinterpret_cast<uv_stream_t*>(&tcp_), bufs.data(),
                              static_cast<unsigned>(count));
  if (rc <= 0) return 0;  // EAGAIN, or an error the queued write will report
  bytesWritten_ += static_cast<size_t>(rc);
  return static_cast<size_t>(rc);
}

size_t TcpStream::writeCopy(std::span<const uint8_t> bytes) {
  const std::span<const uint8_t> one[] = {bytes};
  return writeCopy(one);
}

size_t TcpStream::writeCopy(std::span<const std::span<const uint8_t>> pieces) {
  size_t total = 0;
  for (const auto piece : pieces) total += piece.size();
  const size_t taken = tryWrite(pieces);
  if (taken < total) {
    std::vector<uint8_t> rest;
    rest.reserve(total - taken);
    size_t skip = taken;
    for (const auto piece : pieces) {
      const size_t from = std::min(skip, piece.size());
      skip -= from;
      rest.insert(rest.end(), piece.begin() + static_cast<ptrdiff_t>(from), piece.end());
    }
    queueWrite(std::move(rest), 0);
  }
  return taken;
}

void TcpStream::prefetch(unsigned stage) const {
  if (stage > 0) {
    // As onRingData: a closing stream delivers nothing, so its handler is not asked either.
    if (!closing_ && handler_ != nullptr) handler_->prefetchForRead(stage - 1);
    return;
  }
  prefetchLine(this);                 // the handler
  prefetchLine(&tcp_.flags);          // uv_fileno's checks
  prefetchLine(&tcp_.io_watcher.fd);  // the descriptor
  prefetchLine(&queuedBytes_);
  prefetchLine(&backlog_);
  prefetchLine(&bytesWritten_);
  prefetchLine(&closing_);
  prefetchLine(&ringSending_);
  prefetchLine(&held_);
}

size_t TcpStream::writeNow(std::vector<uint8_t> bytes) {
  // Inside a send batch (the wheel's tick), an idle stream's bytes wait for the batch's one
  // submission; they count in bytesWritten once sent, and like a direct write they are not
  // reported through onWritten.
  if (StreamRing* ring = context_.streamRing(); ring != nullptr && ring->batchingSends() &&
                                                !closing_ && !shutdownSent_ && queuedBytes_ == 0 &&
                                                ringSending_ == 0) {
    const size_t size = bytes.size();
    if (size > 0 && ring->sendBatched(descriptor(), this, bytes)) {
      ringSending_ = size;
      return 0;
    }
  }
  const std::span<const uint8_t> one[] = {bytes};
  const size_t taken = tryWrite(one);
  if (taken < bytes.size()) {
    queueWrite(std::move(bytes), taken);
  } else {
    returnPooledBuffer(bytes);  // the sealed records of pings and pongs come from there
  }
  return taken;
}

void TcpStream::queueWrite(std::vector<uint8_t> bytes, size_t offset) {
  flushRingSend();
  const size_t size = bytes.size() - offset;
  if (closing_ || size == 0) return;
  if (!backlog_.admits(chargedBytes_, size + kWriteOverheadBytes)) {
    overflow(size);
    return;
  }
  auto* request = new (std::nothrow) WriteRequest{};
  if (request == nullptr) {
    if (handler_ != nullptr) handler_->onWriteError(UV_ENOMEM);
    return;
  }
  request->bytes = std::move(bytes);
  request->offset = offset;
  request->req.data = this;
  uv_buf_t buf = uv_buf_init(reinterpret_cast<char*>(request->bytes.data() + offset),
                             static_cast<unsigned>(size));
  const int rc = uv_write(&request->req, reinterpret_cast<uv_stream_t*>(&tcp_), &buf, 1, onWriteCb);
  if (rc != 0) {
    delete request;
    if (handler_ != nullptr) handler_->onWriteError(rc);
    return;
  }
  queuedBytes_ += size;
  chargedBytes_ += size + kWriteOverheadBytes;
  context_.addBuffered(static_cast<int64_t>(size + kWriteOverheadBytes));
  if (backlog_.update(chargedBytes_)) {
    context_.onWriteBacklogPaused();
    applyReading();
  }
}

void TcpStream::overflow(size_t bytes) {
  context_.onWriteBacklogOverflow(*this, bytes);
  close(true);
}

void TcpStream::onWriteCb(uv_write_t* req, int status) {
  auto* request = reinterpret_cast<WriteRequest*>(req);
  auto* self = static_cast<TcpStream*>(req->data);
  const size_t size = request->size();
  returnPooledBuffer(request->bytes);
  delete request;
  self->queuedBytes_ -= size;
  self->chargedBytes_ -= size + kWriteOverheadBytes;
  self->context_.addBuffered(-static_cast<int64_t>(size + kWriteOverheadBytes));
  if (status == 0) self->bytesWritten_ += size;
  if (self->backlog_.update(self->chargedBytes_)) self->applyReading();
  if (self->closing_ || self->handler_ == nullptr) return;
  if (status != 0) {
    if (status != UV_ECANCELED) self->handler_->onWriteError(status);
    return;
  }
  self->handler_->onWritten(size);
}

int TcpStream::shutdownWrite() {
  if (closing_ || shutdownSent_) return 0;
  flushRingSend();
  auto* req = new (std::nothrow) uv_shutdown_t{};
  if (req == nullptr) return UV_ENOMEM;
  req->data = this;
  if (const int rc = uv_shutdown(req, reinterpret_cast<uv_stream_t*>(&tcp_), onShutdownCb);
      rc != 0) {
    delete req;
    return rc;
  }
  shutdownSent_ = true;
  return 0;
}

// libuv completes a pending shutdown (UV_ECANCELED) before the close callback frees the stream.
void TcpStream::onShutdownCb(uv_shutdown_t* req, int status) {
  auto* self = static_cast<TcpStream*>(req->data);
  delete req;
  if (status == UV_ECANCELED || self->closing_ || self->handler_ == nullptr) return;
  self->handler_->onShutdownDone(status);
}

// --- Closing ----------------------------------------------------------------------------------

void TcpStream::close(bool reset) {
  if (closing_) return;
  flushRingSend();  // a ping in the open batch still goes out before the close
  closing_ = true;
  reading_ = false;
  if (dns_ != nullptr) {
    dns_->cancel();
    dns_ = nullptr;
  }
  if (heldDue_) context_.streamRing()->forget(this);
  held_.clear();
  if (ringState_ != RingState::kNone) {
    // The kernel holds the socket while the ring's receive is armed, and its completions name
    // this stream: the handle is closed once the receive has ended (onRingReceiveEnded).
    if (ringState_ == RingState::kArmed) {
      context_.streamRing()->cancelReceive(this);
      ringState_ = RingState::kCancelling;
    }
    closeAfterRing_ = true;
    closeReset_ = reset;
    return;
  }
  finishClose(reset);
}

void TcpStream::finishClose(bool reset) {
  if (reset) {
    // uv_tcp_close_reset refuses while a shutdown is pending; fall back to a plain close then.
    if (!shutdownSent_ && uv_tcp_close_reset(&tcp_, onCloseCb) == 0) return;
  }
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), onCloseCb);
}

void TcpStream::onCloseCb(uv_handle_t* handle) {
  auto* self = static_cast<TcpStream*>(handle->data);
  Handler* handler = self->handler_;
  self->context_.onStreamClosed(*self);
  delete self;
  if (handler != nullptr) handler->onClosed();
}

void TcpStream::setNoDelay(bool on) {
  (void)uv_tcp_nodelay(&tcp_, on ? 1 : 0);
}

void TcpStream::setKeepAlive(unsigned delaySeconds) {
  (void)uv_tcp_keepalive(&tcp_, 1, delaySeconds);
}

void TcpStream::setNotSentLowat(int bytes) {
  uv_os_fd_t fd = -1;
  if (uv_fileno(reinterpret_cast<const uv_handle_t*>(&tcp_), &fd) != 0) return;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &bytes, sizeof(bytes));
}

uint64_t TcpStream::bytesAcked() const {
  uv_os_fd_t fd = -1;
  if (uv_fileno(reinterpret_cast<const uv_handle_t*>(&tcp_), &fd) != 0) return 0;
  // What the kernel took minus what it still holds unsent or unacknowledged.
  int outq = 0;
  if (ioctl(fd, SIOCOUTQ, &outq) != 0 || outq < 0) return 0;
  const auto held = static_cast<uint64_t>(outq);
  return bytesWritten_ > held ? bytesWritten_ - held : 0;
}

uint32_t TcpStream::minRttUs() const {
  uv_os_fd_t fd = -1;
  if (uv_fileno(reinterpret_cast<const uv_handle_t*>(&tcp_), &fd) != 0) return 0;
  // glibc's tcp_info stops before the kernel's tcpi_min_rtt: the kernel's layout goes on with
  // four u64 and four u32 fields, the last of them tcpi_min_rtt (Linux 4.6).
  struct Extended {
    tcp_info base;
    uint64_t pacingRate, maxPacingRate, bytesAcked, bytesReceived;
    uint32_t segsOut, segsIn, notsentBytes, minRtt;
  } info{};
  static_assert(offsetof(Extended, pacingRate) == sizeof(tcp_info));
  socklen_t size = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &size) != 0) return 0;
  if (size >= sizeof(info) && info.minRtt != 0 && info.minRtt != UINT32_MAX) return info.minRtt;
  return info.base.tcpi_rtt;
}

}  // namespace ot
