#include "controld/mesh/mesh_link.h"

#include <unistd.h>

#include <memory>

#include "common/clock.h"

namespace ot::mesh {
namespace {

// A raw write (the handshake's lines), owned by libuv until its callback.
struct RawWrite {
  uv_write_t request{};
  std::string bytes;
};

const std::optional<Hello> kNoHello;

}  // namespace

MeshLink::MeshLink(uv_loop_t* loop, LinkOwner& owner, MeshMetrics& metrics, LinkSetup setup)
    : loop_(loop),
      owner_(owner),
      metrics_(metrics),
      setup_(std::move(setup)),
      createdAtMs_(static_cast<int64_t>(uv_now(loop))) {
  uv_tcp_init(loop_, &tcp_);
  tcp_.data = this;
}

const std::optional<Hello>& MeshLink::hello() const {
  return receiver_ ? receiver_->hello() : kNoHello;
}

void MeshLink::dial(const sockaddr_storage& source, const sockaddr_storage& target) {
  const auto nonce = randomNonce();
  if (!nonce) return close("no_randomness");
  dialer_.emplace(setup_.secret, setup_.selfId, *nonce);
  if (uv_tcp_bind(&tcp_, reinterpret_cast<const sockaddr*>(&source), 0) != 0) {
    metrics_.linkError("bind_error");
    return close("bind_error");
  }
  connect_.data = this;
  if (uv_tcp_connect(&connect_, &tcp_, reinterpret_cast<const sockaddr*>(&target), onConnect) !=
      0) {
    return close("connect_error");
  }
}

void MeshLink::onConnect(uv_connect_t* request, int status) {
  auto* link = static_cast<MeshLink*>(request->data);
  if (status == UV_ECANCELED || link->closing_) return;
  if (status != 0) {
    link->metrics_.linkError("connect_error");
    return link->close("connect_error");
  }
  uv_tcp_nodelay(&link->tcp_, 1);
  link->writeRaw(link->dialer_->openingLine());
  link->startReading();
}

void MeshLink::adopt(int fd, std::span<const uint8_t> prefix) {
  if (uv_tcp_open(&tcp_, fd) != 0) {
    ::close(fd);
    return close("adopt_error");
  }
  uv_tcp_nodelay(&tcp_, 1);
  const auto nonce = randomNonce();
  if (!nonce) return close("no_randomness");
  acceptor_.emplace(setup_.secret, setup_.selfId, *nonce);
  startReading();
  if (!closing_ && !prefix.empty()) {
    receive(std::string_view(reinterpret_cast<const char*>(prefix.data()), prefix.size()));
  }
}

void MeshLink::startReading() {
  const int rc = uv_read_start(
      stream(),
      [](uv_handle_t* handle, size_t, uv_buf_t* buf) {
        auto* link = static_cast<MeshLink*>(handle->data);
        *buf = uv_buf_init(link->readBuffer_.data(),
                           static_cast<unsigned int>(link->readBuffer_.size()));
      },
      onRead);
  if (rc != 0) close("read_error");
}

void MeshLink::onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  auto* link = static_cast<MeshLink*>(stream->data);
  if (link->closing_) return;
  if (nread == UV_EOF) return link->close(link->proven_ ? "closed" : "closed_in_handshake");
  if (nread < 0) return link->close("read_error");
  if (nread == 0) return;
  link->receive(std::string_view(buf->base, static_cast<size_t>(nread)));
}

void MeshLink::receive(std::string_view bytes) {
  if (proven_) {
    reader_.feed(bytes);
    return readFrames();
  }
  if (dialer_) return handshakeStep(dialer_->feed(bytes), *dialer_);
  if (acceptor_) return handshakeStep(acceptor_->feed(bytes), *acceptor_);
}

void MeshLink::handshakeStep(const HandshakeStep& step, HandshakeBase& handshake) {
  switch (step.state) {
    case HandshakeState::kRefused: {
      const auto reason = proofErrorName(handshake.error());
      metrics_.linkError(reason);
      return close(reason);
    }
    case HandshakeState::kNeedMore:
      if (!step.send.empty()) writeRaw(step.send);
      return;
    case HandshakeState::kProven:
      break;
  }
  if (!step.send.empty()) writeRaw(step.send);
  proven_ = true;
  peerMachine_ = handshake.peerMachineId();
  receiver_.emplace(peerMachine_, now());
  queue_.emplace(now());
  const std::string leftover = handshake.takeLeftover();
  owner_.linkProven(*this);
  if (closing_) return;
  reader_.feed(leftover);
  readFrames();
}

void MeshLink::readFrames() {
  while (!closing_) {
    const size_t before = reader_.bufferedBytes();
    ReadResult result = reader_.next();
    if (result.status == ReadStatus::kNeedMore) return;
    if (result.status == ReadStatus::kError) {
      const auto reason = frameErrorCodeName(result.error.code);
      metrics_.linkError(reason);
      return close(reason);
    }
    metrics_.frame(Direction::kIn, frameTypeName(result.frame.body),
                   before - reader_.bufferedBytes());
    auto received = receiver_->receive(std::move(result.frame), now());
    if (!received) {
      const auto reason = linkErrorCodeName(received.error().code);
      metrics_.linkError(reason);
      return close(reason);
    }
    if (received->has_value()) owner_.linkFrame(*this, std::move(**received));
  }
}

void MeshLink::send(const Frame& frame) {
  sendEncoded(encodeFrame(frame), frameTypeName(frame.body));
}

void MeshLink::sendEncoded(std::string bytes, std::string_view type) {
  if (closing_ || !queue_) return;
  const size_t size = bytes.size();
  if (!queue_->push(std::move(bytes), now())) {
    metrics_.linkError("too_far_behind");
    return close("too_far_behind");
  }
  metrics_.frame(Direction::kOut, type, size);
  pump();
}

void MeshLink::pump() {
  if (writing_ || closing_ || !queue_ || queue_->empty()) return;
  const std::string& front = queue_->front();
  uv_buf_t buf =
      uv_buf_init(const_cast<char*>(front.data()), static_cast<unsigned int>(front.size()));
  writeReq_.data = this;
  if (uv_write(&writeReq_, stream(), &buf, 1, onWritten) != 0) return close("write_error");
  writing_ = true;
}

void MeshLink::onWritten(uv_write_t* request, int status) {
  auto* link = static_cast<MeshLink*>(request->data);
  link->writing_ = false;
  if (status == UV_ECANCELED || link->closing_) return;
  if (status != 0) return link->close("write_error");
  link->queue_->pop();
  link->pump();
}

void MeshLink::writeRaw(std::string bytes) {
  auto write = std::make_unique<RawWrite>();
  write->bytes = std::move(bytes);
  uv_buf_t buf = uv_buf_init(write->bytes.data(), static_cast<unsigned int>(write->bytes.size()));
  write->request.data = write.get();
  const int rc = uv_write(&write->request, stream(), &buf, 1, [](uv_write_t* request, int) {
    delete static_cast<RawWrite*>(request->data);
  });
  if (rc != 0) return close("write_error");
  write.release();  // NOLINT: owned by libuv until the callback
}

void MeshLink::tick(int64_t nowMs, int64_t pingMs, int64_t deadMs, int64_t handshakeMs) {
  if (closing_) return;
  if (!proven_) {
    if (nowMs - createdAtMs_ >= handshakeMs) {
      metrics_.linkError("handshake_timeout");
      close("handshake_timeout");
    }
    return;
  }
  if (receiver_->isDead(nowMs, deadMs)) {
    metrics_.linkError("dead");
    return close("dead");
  }
  if (queue_->pingDue(nowMs, pingMs)) send(Frame{unixNowMs(), Ping{}});
}

void MeshLink::close(std::string_view reason) {
  if (closing_) return;
  closing_ = true;
  closeReason_ = std::string(reason);
  uv_read_stop(stream());
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), onClosed);
}

void MeshLink::onClosed(uv_handle_t* handle) {
  auto* link = static_cast<MeshLink*>(handle->data);
  link->owner_.linkClosed(*link);  // destroys the link
}

}  // namespace ot::mesh
