#include "controld/mesh/internal_exchange.h"

#include <unistd.h>

#include <utility>
#include <vector>

namespace ot::mesh {

InternalExchange::InternalExchange(InternalExchanges& owner, uv_loop_t* loop, size_t maxBytes,
                                   Parse parse, Done done)
    : owner_(owner),
      loop_(loop),
      maxBytes_(maxBytes),
      parse_(std::move(parse)),
      done_(std::move(done)) {
  uv_tcp_init(loop_, &tcp_);
  tcp_.data = this;
  uv_timer_init(loop_, &timer_);
  timer_.data = this;
  openHandles_ = 2;
}

bool InternalExchange::startTimer(uint64_t timeoutMs) {
  return uv_timer_start(&timer_, onTimeout, timeoutMs, 0) == 0;
}

void InternalExchange::onTimeout(uv_timer_t* timer) {
  static_cast<InternalExchange*>(timer->data)->fail(ExchangeEnd::kTimeout);
}

void InternalExchange::fail(ExchangeEnd end) {
  if (!finished_) end_ = end;
  finish(std::nullopt);
  close();
}

void InternalExchange::onConnect(uv_connect_t* request, int status) {
  auto* exchange = static_cast<InternalExchange*>(request->data);
  if (status == UV_ECANCELED || exchange->closing_) return;
  if (status != 0) return exchange->fail(ExchangeEnd::kRefused);
  uv_tcp_nodelay(&exchange->tcp_, 1);
  uv_buf_t buf =
      uv_buf_init(exchange->request_.data(), static_cast<unsigned int>(exchange->request_.size()));
  exchange->write_.data = exchange;
  const int rc = uv_write(&exchange->write_, exchange->stream(), &buf, 1, [](uv_write_t* w, int s) {
    auto* self = static_cast<InternalExchange*>(w->data);
    if (s != 0 && !self->closing_) self->fail(ExchangeEnd::kClosed);
  });
  if (rc != 0) return exchange->fail(ExchangeEnd::kClosed);
  exchange->startReading();
}

void InternalExchange::startReading() {
  const int rc = uv_read_start(
      stream(),
      [](uv_handle_t* handle, size_t, uv_buf_t* buf) {
        auto* self = static_cast<InternalExchange*>(handle->data);
        *buf = uv_buf_init(self->readBuffer_.data(),
                           static_cast<unsigned int>(self->readBuffer_.size()));
      },
      onRead);
  if (rc != 0) fail(ExchangeEnd::kClosed);
}

void InternalExchange::onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  auto* exchange = static_cast<InternalExchange*>(stream->data);
  if (exchange->closing_ || exchange->finished_) return;
  if (nread < 0) return exchange->fail(ExchangeEnd::kClosed);
  if (nread > 0) exchange->received(std::string_view(buf->base, static_cast<size_t>(nread)));
}

void InternalExchange::received(std::string_view bytes) {
  if (finished_) return;
  buffer_.append(bytes);
  if (buffer_.size() > maxBytes_) return fail(ExchangeEnd::kTooLarge);
  const HttpParse state = parse_(buffer_);
  if (state == HttpParse::kNeedMore) return;
  uv_read_stop(stream());
  // kComplete and kInvalid alike: `done` parses again and answers or gives up.
  end_ = ExchangeEnd::kComplete;
  finish(std::move(buffer_));
}

void InternalExchange::finish(std::optional<std::string> bytes) {
  if (finished_) return;
  finished_ = true;
  Done done = std::move(done_);
  if (done) done(*this, std::move(bytes));
}

void InternalExchange::respond(std::string bytes) {
  if (closing_) return;
  response_ = std::move(bytes);
  uv_buf_t buf = uv_buf_init(response_.data(), static_cast<unsigned int>(response_.size()));
  write_.data = this;
  const int rc = uv_write(&write_, stream(), &buf, 1, [](uv_write_t* w, int) {
    static_cast<InternalExchange*>(w->data)->close();
  });
  if (rc != 0) close();
}

void InternalExchange::cancel() {
  done_ = nullptr;
  close();
}

void InternalExchange::close() {
  if (closing_) return;
  closing_ = true;
  finish(std::nullopt);
  auto onClosed = [](uv_handle_t* handle) {
    auto* self = static_cast<InternalExchange*>(handle->data);
    if (--self->openHandles_ == 0) self->owner_.released(self);
  };
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), onClosed);
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), onClosed);
}

InternalExchanges::~InternalExchanges() {
  // The loop closed every handle before this runs (MeshNode stops its loop first).
  for (InternalExchange* exchange : open_) delete exchange;
}

void InternalExchanges::adopt(int fd, std::span<const uint8_t> prefix, size_t maxBytes,
                              uint64_t timeoutMs, InternalExchange::Parse parse,
                              InternalExchange::Done done) {
  auto* exchange = new InternalExchange(*this, loop_, maxBytes, std::move(parse), std::move(done));
  open_.insert(exchange);
  if (uv_tcp_open(&exchange->tcp_, fd) != 0) {
    ::close(fd);
    return exchange->close();
  }
  if (!exchange->startTimer(timeoutMs)) return exchange->close();
  exchange->startReading();
  if (!exchange->closing_ && !prefix.empty()) {
    exchange->received(
        std::string_view(reinterpret_cast<const char*>(prefix.data()), prefix.size()));
  }
}

InternalExchange* InternalExchanges::dial(const sockaddr_storage& source,
                                          const sockaddr_storage& target, std::string request,
                                          size_t maxBytes, uint64_t timeoutMs,
                                          InternalExchange::Parse parse,
                                          InternalExchange::Done done) {
  auto* exchange = new InternalExchange(*this, loop_, maxBytes, std::move(parse), std::move(done));
  open_.insert(exchange);
  exchange->request_ = std::move(request);
  exchange->connect_.data = exchange;
  if (!exchange->startTimer(timeoutMs) ||
      uv_tcp_bind(&exchange->tcp_, reinterpret_cast<const sockaddr*>(&source), 0) != 0 ||
      uv_tcp_connect(&exchange->connect_, &exchange->tcp_,
                     reinterpret_cast<const sockaddr*>(&target),
                     InternalExchange::onConnect) != 0) {
    exchange->fail(ExchangeEnd::kRefused);
    return nullptr;
  }
  return exchange;
}

void InternalExchanges::closeAll() {
  const std::vector<InternalExchange*> open(open_.begin(), open_.end());
  for (InternalExchange* exchange : open) exchange->close();
}

void InternalExchanges::released(InternalExchange* exchange) {
  open_.erase(exchange);
  delete exchange;
}

}  // namespace ot::mesh
