#include "controld/http/http_connection.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/http_serializer.h"
#include "controld/http/http_server_core.h"

namespace ot::controld {
namespace {

uint64_t millis(std::chrono::milliseconds duration) {
  return duration.count() <= 0 ? 0 : static_cast<uint64_t>(duration.count());
}

bool startsWithNoCase(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && httpNameEquals(text.substr(0, prefix.size()), prefix);
}

// Path and query of an origin-form target ("/a?b"), or of an absolute-form one
// ("http://host/a?b", which a server must accept too); "*" stays the path.
void splitTarget(std::string_view target, ApiRequest& request) {
  for (const std::string_view scheme : {"http://", "https://"}) {
    if (startsWithNoCase(target, scheme)) {
      target.remove_prefix(scheme.size());
      const size_t end = target.find_first_of("/?");
      target = end == std::string_view::npos ? std::string_view() : target.substr(end);
      break;
    }
  }
  const size_t question = target.find('?');
  request.path = std::string(target.substr(0, question));
  if (request.path.empty()) request.path = "/";
  if (question != std::string_view::npos) request.query = std::string(target.substr(question + 1));
}

ApiResponse parseErrorResponse(HttpError error, std::string_view detail, uint64_t maxBody) {
  switch (error) {
    case HttpError::kUriTooLong:
      return ApiResponse::error(414, "UriTooLongError", "request line too long");
    case HttpError::kHeadersTooLarge:
    case HttpError::kTooManyHeaders:
      return ApiResponse::error(431, "RequestHeaderFieldsTooLargeError",
                                "request header fields too large");
    case HttpError::kBodyTooLarge:
      return ApiResponse::error(413, "PayloadTooLargeError",
                                "request body larger than " + std::to_string(maxBody) + " bytes");
    case HttpError::kVersionNotSupported:
      return ApiResponse::error(505, "HttpVersionNotSupportedError", "only HTTP/1.0 and 1.1");
    case HttpError::kNone:
    case HttpError::kBadRequest:
    case HttpError::kTruncated:
      break;
  }
  return ApiResponse::error(400, "BadRequestError", "malformed request: " + std::string(detail));
}

}  // namespace

struct HttpConnection::WriteRequest {
  uv_write_t req{};  // req.data points to this WriteRequest
  std::string data;
  bool final = false;   // the response (not a 100 Continue)
  size_t streamed = 0;  // a streamed response's chunk: its payload bytes
};

HttpConnection::HttpConnection(HttpServerCore& core, uint64_t id, bool trustClientAddress,
                               std::string peerAddress)
    : core_(core),
      id_(id),
      trustClientAddress_(trustClientAddress),
      peerAddress_(std::move(peerAddress)),
      parser_(HttpParser::Kind::kRequest, [&core] {
        // Bodies come in pieces (onBody): collected for an ordinary request, handed to the
        // worker for a streamed one, whose size has no limit. With stream routes the ordinary
        // body limit is applied here (onHead, onBody) rather than by the parser.
        HttpParserLimits limits = core.options().limits;
        limits.bodyMode = HttpBodyMode::kStream;
        if (core.options().streamRoutes) limits.maxBodyBytes = UINT64_MAX;
        return limits;
      }()) {}

uv_stream_t* HttpConnection::stream() {
  return tcp_ ? reinterpret_cast<uv_stream_t*>(&handle_.tcp)
              : reinterpret_cast<uv_stream_t*>(&handle_.pipe);
}

uv_handle_t* HttpConnection::handle() {
  return reinterpret_cast<uv_handle_t*>(stream());
}

bool HttpConnection::open(uv_loop_t* loop, int fd, bool tcp) {
  tcp_ = tcp;
  const int initialized =
      tcp ? uv_tcp_init(loop, &handle_.tcp) : uv_pipe_init(loop, &handle_.pipe, 0);
  if (initialized != 0) {
    // No handle exists, so no close callback will come to free this object.
    ::close(fd);
    core_.forget(id_);
    delete this;
    return false;
  }
  handle()->data = this;
  const int opened = tcp ? uv_tcp_open(&handle_.tcp, fd) : uv_pipe_open(&handle_.pipe, fd);
  if (opened != 0) {
    ::close(fd);
    close();
    return false;
  }
  if (tcp) static_cast<void>(uv_tcp_nodelay(&handle_.tcp, 1));
  deadline_ = core_.now() + millis(core_.options().headerTimeout);
  startReading();
  return state_ != State::kClosing;
}

void HttpConnection::close() {
  if (state_ == State::kClosing) return;
  if (exchange_) exchange_->cancel();
  state_ = State::kClosing;
  reading_ = false;
  core_.forget(id_);
  uv_close(handle(), onClosed);
}

void HttpConnection::onClosed(uv_handle_t* handle) {
  delete static_cast<HttpConnection*>(handle->data);
}

void HttpConnection::startReading() {
  if (reading_ || state_ == State::kClosing) return;
  if (uv_read_start(stream(), onAlloc, onRead) != 0) {
    close();
    return;
  }
  reading_ = true;
}

void HttpConnection::stopReading() {
  if (!reading_) return;
  uv_read_stop(stream());
  reading_ = false;
}

void HttpConnection::onAlloc(uv_handle_t* handle, size_t /*suggested*/, uv_buf_t* buf) {
  *buf = static_cast<HttpConnection*>(handle->data)->core_.readBuffer();
}

void HttpConnection::onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  auto* self = static_cast<HttpConnection*>(stream->data);
  if (self->state_ == State::kClosing || nread == 0) return;
  if (nread < 0) {
    // EOF or a reset. A request cut short gets no answer: the peer could not read one.
    self->close();
    return;
  }
  // Reads are off in kHandling and kWriting; while lingering, what comes is dropped.
  if (self->state_ != State::kReading) return;
  self->consume(std::span(reinterpret_cast<const uint8_t*>(buf->base), static_cast<size_t>(nread)));
}

void HttpConnection::consume(std::span<const uint8_t> input) {
  if (!input.empty() && !messageStarted_) {
    messageStarted_ = true;
    deadline_ = core_.now() + millis(core_.options().headerTimeout);
  }
  for (;;) {
    const HttpParseResult result = parser_.feed(input);
    input = input.subspan(std::min(result.consumed, input.size()));
    switch (result.status) {
      case HttpParseStatus::kNeedMore:
        maybeContinue();
        return;
      case HttpParseStatus::kHeaders:
        if (!onHead()) return;
        continue;  // the rest of the input, even if empty: the message may be done
      case HttpParseStatus::kBody:
        if (!onBody(result.body)) return;
        continue;
      case HttpParseStatus::kDone:
        pending_.assign(reinterpret_cast<const char*>(input.data()), input.size());
        onMessageDone();
        return;
      case HttpParseStatus::kUpgrade:
        // We do not switch protocols; what follows is not HTTP, so answer and close.
        pending_.clear();
        if (streamIn_) {
          close();
          return;
        }
        dispatch(true);
        return;
      case HttpParseStatus::kError:
        if (streamIn_) {
          // The worker has part of a body that will never end: it sees the connection gone.
          close();
          return;
        }
        respondError(result.error);
        return;
    }
    respondError(HttpError::kBadRequest);
    return;
  }
}

bool HttpConnection::onHead() {
  const HttpMessage& message = parser_.message();
  body_.clear();
  if (!core_.options().streamRoutes) return true;  // the parser applies the body limit
  ApiRequest head;
  head.method = message.method;
  splitTarget(message.target, head);
  for (const auto& header : message.headers) {
    if (httpNameEquals(header.name, kClientAddressHeader) && !trustClientAddress_) continue;
    head.headers.emplace_back(header.name, header.value);
  }
  head.clientAddress = peerAddress_;
  StreamHandler handler = core_.streamHandler(head);
  if (!handler) {
    const uint64_t limit = core_.options().limits.maxBodyBytes;
    const auto length = message.header("Content-Length");
    if (length && (length->size() > 19 || std::stoull(std::string(*length)) > limit)) {
      respondError(HttpError::kBodyTooLarge);
      return false;
    }
    return true;
  }
  // The same head the handler of an ordinary request gets (client address rules included).
  head.headers.clear();
  if (!buildRequest(message, head)) return false;
  keepAlive_ = message.keepAlive;
  http10_ = message.versionMinor == 0;
  headRequest_ = false;
  exchange_ = core_.submitStream(id_, std::move(head), std::move(handler));
  if (!exchange_) {
    stopReading();
    keepAlive_ = false;
    state_ = State::kHandling;
    respond(ApiResponse::error(503, "ServiceUnavailableError", "server busy"));
    return false;
  }
  streamIn_ = true;
  deadline_ = core_.now() + millis(core_.options().idleTimeout);
  return true;
}

bool HttpConnection::onBody(std::span<const uint8_t> piece) {
  const std::string_view bytes(reinterpret_cast<const char*>(piece.data()), piece.size());
  if (streamIn_) {
    deadline_ = core_.now() + millis(core_.options().idleTimeout);
    // The rest of this read is still parsed and queued (one read buffer more at most); then
    // reading waits until the worker has taken most of it.
    if (exchange_->pushBody(bytes) > kStreamHighWater && reading_) {
      exchange_->setReadingPaused(true);
      stopReading();
    }
    return true;
  }
  if (core_.options().streamRoutes &&
      body_.size() + bytes.size() > core_.options().limits.maxBodyBytes) {
    respondError(HttpError::kBodyTooLarge);
    return false;
  }
  body_.append(bytes);
  return true;
}

void HttpConnection::onMessageDone() {
  if (!streamIn_) {
    dispatch(false);
    return;
  }
  streamIn_ = false;
  stopReading();
  exchange_->endBody();
  state_ = State::kHandling;
}

void HttpConnection::onStreamEvent() {
  if (!exchange_ || state_ == State::kClosing) return;
  if (streamIn_ && !reading_ && exchange_->wantsMoreBody()) {
    exchange_->setReadingPaused(false);
    startReading();
    if (state_ == State::kClosing) return;
  }
  StreamExchange::Output out = exchange_->takeOutput();
  const bool answering = out.whole || out.head;
  if (answering && streamIn_) {
    // Answered before the whole body came (refused, or done early): the rest of the body is
    // never read, so the connection cannot carry another request.
    streamIn_ = false;
    keepAlive_ = false;
    stopReading();
    exchange_->abandonBody();
  }
  if (out.whole) {
    state_ = State::kHandling;
    respond(std::move(*out.whole));
    return;
  }
  if (out.head) {
    const bool closing = !keepAlive_ || core_.draining();
    const std::vector<HttpHeader> headers = responseHeaders(std::move(out.head->second), closing);
    auto wire = serializeResponseHead(out.head->first, "", headers, HttpFraming::chunked());
    if (!wire) {
      core_.log().error("API stream handler's response cannot be sent",
                        {{"status", out.head->first}});
      close();
      return;
    }
    core_.countResponse(out.head->first);
    closeAfterWrite_ = closing;
    state_ = State::kStreaming;
    deadline_ = core_.now() + millis(core_.options().idleTimeout);
    write(std::move(*wire), false);
  }
  if (state_ != State::kStreaming) return;
  for (std::string& chunk : out.chunks) {
    const size_t size = chunk.size();
    write(serializeChunk(std::span(reinterpret_cast<const uint8_t*>(chunk.data()), size)), false,
          size);
    if (state_ == State::kClosing) return;
  }
  if (out.aborted) {
    // Cut short: no last chunk, so the peer knows the body is incomplete.
    close();
    return;
  }
  if (out.ended) {
    state_ = State::kWriting;
    write(std::string(kLastChunk), true);
  }
}

// curl and others wait (about a second) for a 100 before sending a larger body.
void HttpConnection::maybeContinue() {
  if (continueSent_ || !parser_.headersComplete()) return;
  const HttpMessage& message = parser_.message();
  if (message.versionMinor == 0) return;
  const auto expect = message.header("Expect");
  if (!expect || !httpNameEquals(*expect, "100-continue")) return;
  continueSent_ = true;
  write("HTTP/1.1 100 Continue\r\n\r\n", false);
}

bool HttpConnection::buildRequest(const HttpMessage& message, ApiRequest& request) {
  request.headers.reserve(message.headers.size());
  std::optional<std::string> forwarded;
  size_t forwardedCount = 0;
  for (const auto& header : message.headers) {
    if (httpNameEquals(header.name, kClientAddressHeader)) {
      if (!trustClientAddress_) continue;  // a visitor's claim, not ours to believe
      if (forwardedCount++ == 0) forwarded = header.value;
    }
    request.headers.emplace_back(header.name, header.value);
  }
  if (forwardedCount > 1) {
    stopReading();
    keepAlive_ = false;
    state_ = State::kHandling;
    respond(ApiResponse::error(400, "BadRequestError",
                               "repeated " + std::string(kClientAddressHeader) + " header"));
    return false;
  }
  request.clientAddress = forwarded ? std::move(*forwarded) : peerAddress_;
  return true;
}

void HttpConnection::dispatch(bool mustClose) {
  stopReading();
  HttpMessage message = parser_.takeMessage();
  keepAlive_ = message.keepAlive && !mustClose;
  http10_ = message.versionMinor == 0;
  headRequest_ = message.method == "HEAD";
  state_ = State::kHandling;

  ApiRequest request;
  request.method = std::move(message.method);
  splitTarget(message.target, request);
  request.body = std::exchange(body_, std::string());
  if (!buildRequest(message, request)) return;
  if (!core_.submit(id_, std::move(request))) {
    respond(ApiResponse::error(503, "ServiceUnavailableError", "server busy"));
  }
}

void HttpConnection::respondError(HttpError error) {
  stopReading();
  pending_.clear();
  keepAlive_ = false;
  http10_ = parser_.headersComplete() && parser_.message().versionMinor == 0;
  headRequest_ = false;
  state_ = State::kHandling;
  respond(parseErrorResponse(error, parser_.errorDetail(), core_.options().limits.maxBodyBytes));
}

void HttpConnection::onResponse(ApiResponse response) {
  if (state_ != State::kHandling) return;
  respond(std::move(response));
}

std::vector<HttpHeader> HttpConnection::responseHeaders(
    std::vector<std::pair<std::string, std::string>> given, bool closing) const {
  std::vector<HttpHeader> headers;
  headers.reserve(given.size() + 1);
  for (auto& [name, value] : given) {
    if (httpNameEquals(name, "Connection")) continue;  // hop-by-hop: the server's to decide
    headers.push_back({std::move(name), std::move(value)});
  }
  if (closing) {
    headers.push_back({"Connection", "close"});
  } else if (http10_) {
    headers.push_back({"Connection", "keep-alive"});
  }
  return headers;
}

void HttpConnection::respond(ApiResponse response) {
  const bool closing = !keepAlive_ || core_.draining();
  const std::vector<HttpHeader> headers = responseHeaders(std::move(response.headers), closing);
  std::optional<std::string> wire;
  if (response.status >= 200) {
    // HEAD: the head a GET would get, so Content-Length, without the body.
    const bool bodyless = response.status == 204 || response.status == 304;
    wire = headRequest_
               ? serializeResponseHead(
                     response.status, "", headers,
                     bodyless ? HttpFraming::none() : HttpFraming::length(response.body.size()))
               : serializeResponse(response.status, "", headers, response.body);
  }
  if (!wire) {
    // A handler bug (a 1xx, a body on a 204, a CR in a header): ours always serialize.
    core_.log().error("API handler's response cannot be sent", {{"status", response.status}});
    respond(ApiResponse::error(500, "InternalError", "internal error"));
    return;
  }
  core_.countResponse(response.status);
  closeAfterWrite_ = closing;
  state_ = State::kWriting;
  deadline_ = core_.now() + millis(core_.options().idleTimeout);
  write(std::move(*wire), true);
}

void HttpConnection::write(std::string data, bool final, size_t streamed) {
  auto request = std::make_unique<WriteRequest>();
  request->data = std::move(data);
  request->final = final;
  request->streamed = streamed;
  request->req.data = request.get();
  const uv_buf_t buf =
      uv_buf_init(request->data.data(), static_cast<unsigned int>(request->data.size()));
  if (uv_write(&request->req, stream(), &buf, 1, onWrite) != 0) {
    close();
    return;
  }
  static_cast<void>(request.release());  // onWrite frees it, also when cancelled
  ++writesInFlight_;
}

void HttpConnection::onWrite(uv_write_t* req, int status) {
  const std::unique_ptr<WriteRequest> request(static_cast<WriteRequest*>(req->data));
  auto* self = static_cast<HttpConnection*>(req->handle->data);
  if (status == UV_ECANCELED || self->state_ == State::kClosing) return;
  --self->writesInFlight_;
  if (status < 0) {
    self->close();
    return;
  }
  if (request->streamed > 0 && self->exchange_) {
    self->exchange_->written(request->streamed);
    self->deadline_ = self->core_.now() + millis(self->core_.options().idleTimeout);
  }
  if (request->final) self->onResponseWritten();
}

void HttpConnection::onResponseWritten() {
  exchange_.reset();
  if (closeAfterWrite_) {
    startLingering();
    return;
  }
  state_ = State::kReading;
  parser_.reset();
  messageStarted_ = false;
  continueSent_ = false;
  deadline_ = core_.now() + millis(core_.options().idleTimeout);
  // A pipelined request read with the previous one goes first; reads resume only if it is partial.
  const std::string buffered = std::exchange(pending_, std::string());
  if (!buffered.empty()) {
    consume(std::span(reinterpret_cast<const uint8_t*>(buffered.data()), buffered.size()));
    if (state_ != State::kReading) return;
  }
  startReading();
}

// Closing right away would make the kernel answer unread input with a reset, which can destroy
// the response before the peer reads it; so: FIN after the response, drop input until EOF.
void HttpConnection::startLingering() {
  state_ = State::kLingering;
  pending_ = std::string();
  deadline_ = core_.now() + millis(core_.options().lingerTimeout);
  if (uv_shutdown(&shutdown_, stream(), onShutdown) != 0) {
    close();
    return;
  }
  startReading();
}

void HttpConnection::onShutdown(uv_shutdown_t* req, int status) {
  auto* self = static_cast<HttpConnection*>(req->handle->data);
  if (status == UV_ECANCELED || self->state_ == State::kClosing) return;
  if (status < 0) self->close();
}

bool HttpConnection::expired(uint64_t now, bool draining) const {
  switch (state_) {
    case State::kReading:
      // A streamed body paused for the worker waits as long as the worker takes.
      if (streamIn_) return reading_ && now >= deadline_;
      // Draining closes connections between requests, not one whose request is on its way.
      return now >= deadline_ || (draining && !messageStarted_);
    case State::kStreaming:
      // A worker slow to make the next chunk is not the peer's fault; a peer not reading is.
      return writesInFlight_ > 0 && now >= deadline_;
    case State::kWriting:
    case State::kLingering:
      return now >= deadline_;
    case State::kHandling:
    case State::kClosing:
      break;
  }
  return false;
}

}  // namespace ot::controld
