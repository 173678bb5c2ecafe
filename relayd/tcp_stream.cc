#include "relayd/tcp_stream.h"

#include <netinet/in.h>
#include <linux/sockios.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <new>
#include <utility>

#include "common/log.h"
#include "common/log_throttle.h"
#include "relayd/relay_context.h"

namespace ot::relayd {

namespace {

const log::Logger kLog("relayd.stream");

// A reset for an unread backlog is logged at most once per this interval (the counter has all).
constexpr uint64_t kOverflowLogIntervalMs = 10'000;

struct WriteRequest {
  uv_write_t req{};
  std::vector<uint8_t> bytes;
};

}  // namespace

TcpStream::TcpStream(RelayContext& context, Handler* handler) : context_(context), handler_(handler) {
  tcp_.data = this;
}

TcpStream* TcpStream::adopt(RelayContext& context, int fd, Handler* handler) {
  auto* stream = new (std::nothrow) TcpStream(context, handler);
  if (stream == nullptr) {
    ::close(fd);
    return nullptr;
  }
  if (uv_tcp_init(context.loop, &stream->tcp_) != 0) {
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
  context.streams.insert(stream);
  return stream;
}

void TcpStream::startReading() {
  wantReading_ = true;
  applyReading();
}

void TcpStream::stopReading() {
  wantReading_ = false;
  applyReading();
}

void TcpStream::applyReading() {
  if (closing_) return;
  const bool should = wantReading_ && !backlog_.paused();
  if (should && !reading_) {
    if (uv_read_start(reinterpret_cast<uv_stream_t*>(&tcp_), onAlloc, onReadCb) == 0) reading_ = true;
  } else if (!should && reading_) {
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp_));
    reading_ = false;
  }
}

void TcpStream::onAlloc(uv_handle_t* handle, size_t, uv_buf_t* buf) {
  auto* self = static_cast<TcpStream*>(handle->data);
  *buf = uv_buf_init(reinterpret_cast<char*>(self->context_.readBuffer.data()),
                     static_cast<unsigned>(self->context_.readBuffer.size()));
}

void TcpStream::onReadCb(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  auto* self = static_cast<TcpStream*>(stream->data);
  if (self->closing_ || self->handler_ == nullptr) return;
  if (nread > 0) {
    self->handler_->onRead(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(buf->base), static_cast<size_t>(nread)));
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

void TcpStream::write(std::vector<uint8_t> bytes) {
  if (closing_ || bytes.empty()) return;
  if (!backlog_.admits(chargedBytes_, bytes.size() + kWriteOverheadBytes)) {
    overflow(bytes.size());
    return;
  }
  auto* request = new (std::nothrow) WriteRequest{};
  if (request == nullptr) {
    if (handler_ != nullptr) handler_->onStreamError(UV_ENOMEM);
    return;
  }
  request->bytes = std::move(bytes);
  request->req.data = this;
  const size_t size = request->bytes.size();
  uv_buf_t buf = uv_buf_init(reinterpret_cast<char*>(request->bytes.data()), static_cast<unsigned>(size));
  const int rc = uv_write(&request->req, reinterpret_cast<uv_stream_t*>(&tcp_), &buf, 1, onWriteCb);
  if (rc != 0) {
    delete request;
    if (handler_ != nullptr) handler_->onStreamError(rc);
    return;
  }
  queuedBytes_ += size;
  chargedBytes_ += size + kWriteOverheadBytes;
  context_.addBuffered(static_cast<int64_t>(size + kWriteOverheadBytes));
  if (backlog_.update(chargedBytes_)) {
    context_.metrics.peerBacklogPaused.Increment();
    applyReading();
  }
}

void TcpStream::overflow(size_t bytes) {
  context_.metrics.peerBacklogReset.Increment();
  static LogThrottle throttle(kOverflowLogIntervalMs);
  if (uint64_t suppressed = 0; throttle.allow(context_.nowMs(), suppressed)) {
    kLog.warn("peer reset: it left its answers unread past the write backlog limit",
              {{"peer", peer_.toString()},
               {"queued", std::to_string(queuedBytes_)},
               {"refused", std::to_string(bytes)},
               {"suppressed", std::to_string(suppressed)}});
  }
  close(true);
}

void TcpStream::onWriteCb(uv_write_t* req, int status) {
  auto* request = reinterpret_cast<WriteRequest*>(req);
  auto* self = static_cast<TcpStream*>(req->data);
  const size_t size = request->bytes.size();
  delete request;
  self->queuedBytes_ -= size;
  self->chargedBytes_ -= size + kWriteOverheadBytes;
  self->context_.addBuffered(-static_cast<int64_t>(size + kWriteOverheadBytes));
  if (status == 0) self->bytesWritten_ += size;
  if (self->backlog_.update(self->chargedBytes_)) self->applyReading();
  if (self->closing_ || self->handler_ == nullptr) return;
  if (status != 0) {
    if (status != UV_ECANCELED) self->handler_->onStreamError(status);
    return;
  }
  self->handler_->onWritten(size);
}

void TcpStream::shutdownWrite() {
  if (closing_ || shutdownSent_) return;
  auto* req = new (std::nothrow) uv_shutdown_t{};
  if (req == nullptr) return;
  req->data = this;
  if (uv_shutdown(req, reinterpret_cast<uv_stream_t*>(&tcp_), onShutdownCb) != 0) {
    delete req;
    return;
  }
  shutdownSent_ = true;
}

void TcpStream::onShutdownCb(uv_shutdown_t* req, int) { delete req; }

void TcpStream::close(bool reset) {
  if (closing_) return;
  closing_ = true;
  reading_ = false;
  if (reset) {
    // uv_tcp_close_reset refuses while a shutdown is pending; fall back to a plain close then.
    if (!shutdownSent_ && uv_tcp_close_reset(&tcp_, onCloseCb) == 0) return;
  }
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), onCloseCb);
}

void TcpStream::onCloseCb(uv_handle_t* handle) {
  auto* self = static_cast<TcpStream*>(handle->data);
  Handler* handler = self->handler_;
  self->context_.streams.erase(self);
  delete self;
  if (handler != nullptr) handler->onClosed();
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

}  // namespace ot::relayd
