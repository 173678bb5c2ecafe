#include "relayd/api_proxy.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "common/http_parser.h"
#include "common/http_serializer.h"

namespace ot::relayd {
namespace {

constexpr size_t kMaxResponseBytes = 16 * 1024 * 1024;
constexpr size_t kReadChunkBytes = 64 * 1024;

// Parses `raw` as exactly one complete response after any 1xx interim ones, and returns that final
// response (body collected), or an Error. A response to HEAD ends with its head.
Result<HttpMessage> parseFinalResponse(std::span<const uint8_t> raw, bool headRequest) {
  HttpParserLimits limits;
  limits.maxHeaderBytes = 64 * 1024;
  limits.maxHeaderCount = 200;
  limits.maxBodyBytes = kMaxResponseBytes;
  // Streamed so that the head of a HEAD answer is seen as such (kHeaders); pieces gathered here.
  limits.bodyMode = HttpBodyMode::kStream;
  HttpParser parser(HttpParser::Kind::kResponse, limits);
  std::string body;
  std::span<const uint8_t> input = raw;
  bool atEof = false;
  int eofCalls = 0;
  while (true) {
    if (atEof && ++eofCalls > 4) return Error{ErrorKind::kInvalid, "upstream response never ended"};
    HttpParseResult result = atEof ? parser.finish() : parser.feed(input);
    if (!atEof) input = input.subspan(result.consumed);
    const int status = parser.message().status;
    switch (result.status) {
      case HttpParseStatus::kHeaders:
        if (headRequest && status >= 200) {
          if (!input.empty()) return Error{ErrorKind::kInvalid, "bytes after a HEAD response"};
          return parser.message();
        }
        continue;
      case HttpParseStatus::kBody:
        body.append(reinterpret_cast<const char*>(result.body.data()), result.body.size());
        continue;
      case HttpParseStatus::kDone:
        if (status >= 100 && status < 200) {  // interim (100 Continue): the final one follows
          parser.reset();
          body.clear();
          continue;
        }
        if (!input.empty()) return Error{ErrorKind::kInvalid, "bytes after the response"};
        {
          HttpMessage message = parser.message();
          message.body = std::move(body);
          return message;
        }
      case HttpParseStatus::kNeedMore:
        if (atEof) return Error{ErrorKind::kUnavailable, "upstream sent no response"};
        atEof = true;  // controld closed: a body without framing ends here
        continue;
      case HttpParseStatus::kUpgrade:
        return Error{ErrorKind::kInvalid, "upstream answered with an upgrade"};
      case HttpParseStatus::kError:
        if (result.error == HttpError::kTruncated) {
          return Error{ErrorKind::kUnavailable, "upstream closed in the middle of its response"};
        }
        return Error{ErrorKind::kInvalid,
                     "malformed upstream response: " + std::string(parser.errorDetail())};
    }
  }
}

Error uvError(const char* what, int status) {
  return Error{ErrorKind::kUnavailable, std::string(what) + ": " + uv_strerror(status)};
}

}  // namespace

struct ApiProxy::Impl {
  uv_loop_t* loop = nullptr;
  std::string socketPath;
  uint64_t timeoutMs = 0;
  uint64_t nextId = 1;
  std::unordered_map<uint64_t, ApiProxyCall*> calls;
};

// One request in flight: its pipe, timer and buffers. Freed by the last close callback; forgets
// the proxy as soon as it finishes or is cancelled, so the proxy may be gone by then.
class ApiProxyCall {
 public:
  ApiProxyCall(ApiProxy::Impl* proxy, uint64_t id, std::vector<uint8_t> request,
               ApiProxy::Done done)
      : proxy_(proxy), id_(id), request_(std::move(request)), done_(std::move(done)) {
    const std::string_view start(reinterpret_cast<const char*>(request_.data()),
                                 std::min<size_t>(request_.size(), 5));
    headRequest_ = start == "HEAD ";
  }

  void start() {
    uv_pipe_init(proxy_->loop, &pipe_, 0);
    uv_timer_init(proxy_->loop, &timer_);
    pipe_.data = this;
    timer_.data = this;
    connect_.data = this;
    write_.data = this;
    openHandles_ = 2;
    uv_timer_start(&timer_, &ApiProxyCall::onTimeout, proxy_->timeoutMs, 0);
    uv_pipe_connect(&connect_, &pipe_, proxy_->socketPath.c_str(), &ApiProxyCall::onConnect);
  }

  // Ends the call now with `error` (its callback runs).
  void fail(Error error) {
    if (closing_) return;
    finish(std::move(error));
  }

  // Drops the call without running its callback.
  void cancel() {
    proxy_ = nullptr;
    ApiProxy::Done dropped = std::move(done_);
    close();
  }

 private:
  static void onConnect(uv_connect_t* request, int status) {
    auto* self = static_cast<ApiProxyCall*>(request->data);
    if (self->closing_) return;
    if (status < 0) {
      self->finish(uvError("connect to controld", status));
      return;
    }
    uv_buf_t buffer = uv_buf_init(reinterpret_cast<char*>(self->request_.data()),
                                  static_cast<unsigned>(self->request_.size()));
    auto* stream = reinterpret_cast<uv_stream_t*>(&self->pipe_);
    const int written = uv_write(&self->write_, stream, &buffer, 1, &ApiProxyCall::onWritten);
    if (written < 0) {
      self->finish(uvError("write to controld", written));
      return;
    }
    uv_read_start(stream, &ApiProxyCall::onAlloc, &ApiProxyCall::onRead);
  }

  static void onWritten(uv_write_t* request, int status) {
    auto* self = static_cast<ApiProxyCall*>(request->data);
    if (self->closing_ || status == UV_ECANCELED) return;
    if (status < 0) self->finish(uvError("write to controld", status));
  }

  static void onAlloc(uv_handle_t* handle, size_t, uv_buf_t* buffer) {
    auto* self = static_cast<ApiProxyCall*>(handle->data);
    auto& raw = self->response_;
    const size_t used = raw.size();
    // Room for one more byte than allowed, so an oversized answer is detected.
    const size_t room = std::min(kReadChunkBytes, kMaxResponseBytes + 1 - used);
    raw.resize(used + room);
    *buffer = uv_buf_init(reinterpret_cast<char*>(raw.data() + used), static_cast<unsigned>(room));
  }

  static void onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buffer) {
    auto* self = static_cast<ApiProxyCall*>(stream->data);
    auto& raw = self->response_;
    // Keep only what was read: the rest of the buffer handed out by onAlloc is unused.
    if (buffer->base != nullptr) {
      const size_t start =
          static_cast<size_t>(reinterpret_cast<uint8_t*>(buffer->base) - raw.data());
      raw.resize(start + (nread > 0 ? static_cast<size_t>(nread) : 0));
    }
    if (self->closing_ || nread == 0) return;
    if (nread == UV_EOF) {
      self->complete();
      return;
    }
    if (nread < 0) {
      self->finish(uvError("read from controld", static_cast<int>(nread)));
      return;
    }
    if (raw.size() > kMaxResponseBytes) {
      self->finish(Error{ErrorKind::kInvalid, "controld's response is over 16 MiB"});
    }
  }

  static void onTimeout(uv_timer_t* handle) {
    auto* self = static_cast<ApiProxyCall*>(handle->data);
    if (self->closing_) return;
    self->finish(Error{ErrorKind::kTimeout, "controld did not answer in time"});
  }

  void complete() {
    Result<HttpMessage> parsed = parseFinalResponse(response_, headRequest_);
    if (!parsed.ok()) {
      finish(parsed.error());
      return;
    }
    finish(ProxiedResponse{std::move(parsed).value(), headRequest_});
  }

  // Runs the callback once: after the call left the proxy and started closing, so the callback
  // may send, cancel or destroy the proxy.
  void finish(Result<ProxiedResponse> result) {
    if (proxy_ != nullptr) proxy_->calls.erase(id_);
    proxy_ = nullptr;
    ApiProxy::Done done = std::move(done_);
    close();
    if (done) done(std::move(result));
  }

  void close() {
    if (closing_) return;
    closing_ = true;
    uv_close(reinterpret_cast<uv_handle_t*>(&pipe_), &ApiProxyCall::onClosed);
    uv_close(reinterpret_cast<uv_handle_t*>(&timer_), &ApiProxyCall::onClosed);
  }

  static void onClosed(uv_handle_t* handle) {
    auto* self = static_cast<ApiProxyCall*>(handle->data);
    if (--self->openHandles_ == 0) delete self;
  }

  ApiProxy::Impl* proxy_;
  uint64_t id_;
  std::vector<uint8_t> request_;
  std::vector<uint8_t> response_;
  ApiProxy::Done done_;
  uv_pipe_t pipe_{};
  uv_timer_t timer_{};
  uv_connect_t connect_{};
  uv_write_t write_{};
  int openHandles_ = 0;
  bool closing_ = false;
  bool headRequest_ = false;
};

ApiProxy::ApiProxy(uv_loop_t* loop, std::string socketPath, uint64_t timeoutMs)
    : impl_(std::make_unique<Impl>()) {
  impl_->loop = loop;
  impl_->socketPath = std::move(socketPath);
  impl_->timeoutMs = timeoutMs;
}

ApiProxy::~ApiProxy() {
  auto calls = std::move(impl_->calls);
  impl_->calls.clear();
  for (auto& [id, call] : calls) call->cancel();
}

uint64_t ApiProxy::send(std::vector<uint8_t> request, Done done) {
  const uint64_t id = impl_->nextId++;
  auto* call = new ApiProxyCall(impl_.get(), id, std::move(request), std::move(done));
  impl_->calls.emplace(id, call);
  call->start();
  return id;
}

void ApiProxy::cancel(uint64_t callId) {
  const auto found = impl_->calls.find(callId);
  if (found == impl_->calls.end()) return;
  ApiProxyCall* call = found->second;
  impl_->calls.erase(found);
  call->cancel();
}

size_t ApiProxy::failAll(const std::string& why) {
  // finish() runs callbacks that may send new calls or cancel others: work from a snapshot of
  // the ids and look each one up again.
  std::vector<uint64_t> ids;
  ids.reserve(impl_->calls.size());
  for (const auto& [id, call] : impl_->calls) ids.push_back(id);
  size_t ended = 0;
  for (const uint64_t id : ids) {
    const auto found = impl_->calls.find(id);
    if (found == impl_->calls.end()) continue;
    found->second->fail(Error{ErrorKind::kUnavailable, why});
    ++ended;
  }
  return ended;
}

size_t ApiProxy::inFlight() const {
  return impl_->calls.size();
}

bool isHopHeader(std::string_view name) {
  static constexpr std::array<std::string_view, 8> kHopHeaders = {
      "connection", "keep-alive", "proxy-connection", "transfer-encoding",
      "upgrade",    "te",         "content-length",   "x-opentunnel-client-address"};
  return std::any_of(kHopHeaders.begin(), kHopHeaders.end(),
                     [name](std::string_view hop) { return httpNameEquals(hop, name); });
}

std::vector<uint8_t> jsonErrorResponse(
    int status, const std::string& tag, const std::string& message, bool close,
    const std::vector<std::pair<std::string, std::string>>& extraHeaders) {
  nlohmann::ordered_json body = nlohmann::ordered_json::object();
  body["_tag"] = tag;
  body["message"] = message;
  // replace: invalid UTF-8 in a message becomes U+FFFD instead of an exception.
  const std::string text = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);

  std::vector<HttpHeader> headers{{"Content-Type", "application/json"}};
  for (const auto& [name, value] : extraHeaders) headers.push_back({name, value});
  if (close) headers.push_back({"Connection", "close"});
  std::optional<std::string> out = serializeResponse(status, "", headers, text);
  if (!out) {
    // An unwritable extra header or status: still answer, with the fixed fields only.
    std::vector<HttpHeader> fixed{{"Content-Type", "application/json"}};
    if (close) fixed.push_back({"Connection", "close"});
    out = serializeResponse(status >= 200 && status <= 999 ? status : 500, "", fixed, text);
  }
  if (!out) return {};
  return std::vector<uint8_t>(out->begin(), out->end());
}

std::vector<uint8_t> unavailableResponse(const std::string& message, bool close) {
  return jsonErrorResponse(503, "ServiceUnavailableError", message, close, {{"Retry-After", "5"}});
}

}  // namespace ot::relayd
