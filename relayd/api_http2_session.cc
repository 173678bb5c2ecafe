// ApiHttp2Session (api_http2_session.h): nghttp2's server session with our limits. The callbacks
// (struct Callbacks) record into the session's vectors; deliverEvents() hands them on.
#include "relayd/api_http2_session.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>

namespace ot::relayd {

struct ApiHttp2Session::Stream {
  int32_t id = 0;
  Http2Request request;
  size_t headerBytes = 0;
  uint64_t bodyBytes = 0;   // counted against the connection's budget until the stream closes
  int refusedStatus = 0;    // 431 / 413 found while reading: answered at the end of the headers
  bool answered = false;    // a response was submitted: later request data is dropped
  bool dispatched = false;  // handed to the handler, which is told when it closes
  std::string responseBody;
  size_t responseOffset = 0;
};

namespace {

std::string_view view(const uint8_t* data, size_t length) {
  return {reinterpret_cast<const char*>(data), length};
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

nghttp2_nv field(const std::string& name, const std::string& value) {
  // nghttp2 copies the fields when the response is submitted: no flags that keep our pointers.
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          NGHTTP2_NV_FLAG_NONE};
}

}  // namespace

// nghttp2's callbacks: each finds the session in user_data and only records.
struct ApiHttp2Session::Callbacks {
  static ApiHttp2Session& self(void* userData) { return *static_cast<ApiHttp2Session*>(userData); }

  static Stream* find(ApiHttp2Session& session, int32_t id) {
    const auto found = session.streams_.find(id);
    return found == session.streams_.end() ? nullptr : found->second.get();
  }

  static int onBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* userData) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    ApiHttp2Session& session = self(userData);
    auto stream = std::make_unique<Stream>();
    stream->id = frame->hd.stream_id;
    stream->request.streamId = frame->hd.stream_id;
    session.streams_[frame->hd.stream_id] = std::move(stream);
    return 0;
  }

  static int onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t nameLength, const uint8_t* value, size_t valueLength, uint8_t,
                      void* userData) {
    ApiHttp2Session& session = self(userData);
    Stream* stream = find(session, frame->hd.stream_id);
    if (stream == nullptr || stream->refusedStatus != 0) return 0;
    stream->headerBytes += nameLength + valueLength + 32;
    Http2Request& request = stream->request;
    if (stream->headerBytes > session.limits_.maxHeaderBytes ||
        request.headers.size() >= session.limits_.maxHeaderCount) {
      stream->refusedStatus = 431;
      return 0;
    }
    if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;  // trailers: counted, not kept
    const std::string_view key = view(name, nameLength);
    const std::string_view text = view(value, valueLength);
    if (key == ":method") {
      request.method = text;
    } else if (key == ":path") {
      request.path = text;
    } else if (key == ":authority") {
      request.authority = text;
    } else if (!key.empty() && key[0] != ':') {
      request.headers.push_back({std::string(key), std::string(text)});
    }
    return 0;
  }

  static int onDataChunk(nghttp2_session*, uint8_t, int32_t streamId, const uint8_t* data,
                         size_t length, void* userData) {
    ApiHttp2Session& session = self(userData);
    session.streamConsumed_.emplace_back(streamId, length);
    session.windowOwed_ += length;
    Stream* stream = find(session, streamId);
    if (stream == nullptr || stream->answered || stream->refusedStatus != 0) return 0;
    if (stream->bodyBytes + length > session.limits_.maxBodyBytes) {
      stream->refusedStatus = 413;
      session.bufferedBodyBytes_ -= stream->bodyBytes;
      stream->bodyBytes = 0;
      std::string().swap(stream->request.body);
      session.refuse(*stream, 413, "the request body is over 1 MiB");
      return 0;
    }
    stream->bodyBytes += length;
    session.bufferedBodyBytes_ += length;
    stream->request.body.append(view(data, length));
    return 0;
  }

  static int onFrameReceived(nghttp2_session*, const nghttp2_frame* frame, void* userData) {
    ApiHttp2Session& session = self(userData);
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
    Stream* stream = find(session, frame->hd.stream_id);
    if (stream == nullptr || stream->answered) return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      if (stream->refusedStatus == 431) {
        session.refuse(*stream, 431, "the request's header fields are over their limit");
        return 0;
      }
      if (!checkContentLength(session, *stream)) return 0;
    }
    if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0) return 0;
    if (stream->refusedStatus != 0) {
      session.refuse(*stream, stream->refusedStatus, "the request is over its limits");
      return 0;
    }
    if (stream->request.method == "CONNECT" || stream->request.path.empty()) {
      session.refuse(*stream, 405, "CONNECT is not served here");
      return 0;
    }
    stream->dispatched = true;
    session.completed_.push_back(std::move(stream->request));
    return 0;
  }

  // A declared body over the limit is refused before any of it arrives.
  static bool checkContentLength(ApiHttp2Session& session, Stream& stream) {
    for (const auto& header : stream.request.headers) {
      if (header.name != "content-length") continue;
      uint64_t length = 0;
      const char* end = header.value.data() + header.value.size();
      const auto parsed = std::from_chars(header.value.data(), end, length);
      if (parsed.ec == std::errc() && parsed.ptr == end && length <= session.limits_.maxBodyBytes)
        continue;
      stream.refusedStatus = 413;
      session.refuse(stream, 413, "the request body is over 1 MiB");
      return false;
    }
    return true;
  }

  static int onStreamClose(nghttp2_session*, int32_t streamId, uint32_t, void* userData) {
    ApiHttp2Session& session = self(userData);
    const auto found = session.streams_.find(streamId);
    if (found == session.streams_.end()) return 0;
    Stream& stream = *found->second;
    session.bufferedBodyBytes_ -= stream.bodyBytes;
    session.pendingResponseBytes_ -= stream.responseBody.size() - stream.responseOffset;
    if (stream.dispatched) session.closed_.push_back(streamId);
    session.streams_.erase(found);
    return 0;
  }

  static ssize_t readBody(nghttp2_session*, int32_t, uint8_t* buffer, size_t length,
                          uint32_t* flags, nghttp2_data_source* source, void* userData) {
    ApiHttp2Session& session = self(userData);
    auto* stream = static_cast<Stream*>(source->ptr);
    const size_t count = std::min(length, stream->responseBody.size() - stream->responseOffset);
    if (count > 0) std::memcpy(buffer, stream->responseBody.data() + stream->responseOffset, count);
    stream->responseOffset += count;
    session.pendingResponseBytes_ -= count;
    if (stream->responseOffset == stream->responseBody.size()) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      std::string().swap(stream->responseBody);
      stream->responseOffset = 0;
    }
    return static_cast<ssize_t>(count);
  }
};

std::unique_ptr<ApiHttp2Session> ApiHttp2Session::create(Handler& handler, Http2Limits limits) {
  std::unique_ptr<ApiHttp2Session> session(new ApiHttp2Session(handler, limits));
  if (session->session_ == nullptr) return nullptr;
  return session;
}

ApiHttp2Session::ApiHttp2Session(Handler& handler, Http2Limits limits)
    : handler_(handler), limits_(limits) {
  nghttp2_session_callbacks* callbacks = nullptr;
  if (nghttp2_session_callbacks_new(&callbacks) != 0) return;
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, &Callbacks::onBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, &Callbacks::onHeader);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, &Callbacks::onDataChunk);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, &Callbacks::onFrameReceived);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, &Callbacks::onStreamClose);
  nghttp2_option* option = nullptr;
  if (nghttp2_option_new(&option) != 0) {
    nghttp2_session_callbacks_del(callbacks);
    return;
  }
  // The connection window is given back by giveBackWindow(), within the body budget.
  nghttp2_option_set_no_auto_window_update(option, 1);
  nghttp2_option_set_max_send_header_block_length(option, 64 * 1024);
  const int created = nghttp2_session_server_new2(&session_, callbacks, this, option);
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(callbacks);
  if (created != 0) {
    session_ = nullptr;
    return;
  }
  const std::array<nghttp2_settings_entry, 2> settings{{
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(limits_.maxHeaderBytes)},
  }};
  if (nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings.data(), settings.size()) != 0)
    failed_ = true;
}

ApiHttp2Session::~ApiHttp2Session() {
  // nghttp2 calls no callback while it frees the session; our streams go with the map.
  if (session_ != nullptr) nghttp2_session_del(session_);
}

void ApiHttp2Session::receive(std::span<const uint8_t> bytes) {
  if (failed_ || bytes.empty()) return;
  const ssize_t read = nghttp2_session_mem_recv(session_, bytes.data(), bytes.size());
  if (read < 0) {
    // A bad preface (NGHTTP2_ERR_BAD_CLIENT_MAGIC), a flood or a fatal error: GOAWAY and done.
    failed_ = true;
    nghttp2_session_terminate_session(session_, NGHTTP2_PROTOCOL_ERROR);
  }
  deliverEvents();
}

size_t ApiHttp2Session::takeOutput(std::vector<uint8_t>& out, size_t maxBytes) {
  size_t taken = 0;
  while (taken < maxBytes) {
    const uint8_t* data = nullptr;
    const ssize_t length = nghttp2_session_mem_send(session_, &data);
    if (length < 0) {
      failed_ = true;
      break;
    }
    if (length == 0) break;
    out.insert(out.end(), data, data + length);
    taken += static_cast<size_t>(length);
  }
  deliverEvents();
  return taken;
}

void ApiHttp2Session::respond(int32_t streamId, int status, const std::vector<HttpHeader>& headers,
                              std::string body, bool headOnly, int64_t contentLength) {
  const auto found = streams_.find(streamId);
  if (found == streams_.end() || found->second->answered) return;
  Stream& stream = *found->second;
  stream.answered = true;
  std::vector<std::pair<std::string, std::string>> fields;
  fields.reserve(headers.size() + 2);
  fields.emplace_back(":status", std::to_string(status));
  for (const auto& header : headers) fields.emplace_back(lowercase(header.name), header.value);
  const int64_t length = headOnly ? contentLength : static_cast<int64_t>(body.size());
  if (length >= 0) fields.emplace_back("content-length", std::to_string(length));
  std::vector<nghttp2_nv> nva;
  nva.reserve(fields.size());
  for (const auto& [name, value] : fields) nva.push_back(field(name, value));
  nghttp2_data_provider provider{};
  const bool withBody = !headOnly && !body.empty();
  if (withBody) {
    stream.responseBody = std::move(body);
    stream.responseOffset = 0;
    pendingResponseBytes_ += stream.responseBody.size();
    provider.source.ptr = &stream;
    provider.read_callback = &Callbacks::readBody;
  }
  const int submitted = nghttp2_submit_response(session_, streamId, nva.data(), nva.size(),
                                                withBody ? &provider : nullptr);
  if (submitted != 0) {
    if (withBody) {
      pendingResponseBytes_ -= stream.responseBody.size();
      std::string().swap(stream.responseBody);
    }
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, streamId, NGHTTP2_INTERNAL_ERROR);
  }
}

void ApiHttp2Session::respondError(int32_t streamId, int status, const std::string& tag,
                                   const std::string& message,
                                   const std::vector<HttpHeader>& extra) {
  nlohmann::ordered_json body = nlohmann::ordered_json::object();
  body["_tag"] = tag;
  body["message"] = message;
  std::vector<HttpHeader> headers{{"content-type", "application/json"}};
  headers.insert(headers.end(), extra.begin(), extra.end());
  respond(streamId, status, headers,
          body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void ApiHttp2Session::refuse(Stream& stream, int status, const std::string& message) {
  refused_.push_back(status);
  const char* tag = status == 413   ? "PayloadTooLargeError"
                    : status == 431 ? "RequestHeaderFieldsTooLargeError"
                    : status == 405 ? "MethodNotAllowedError"
                                    : "BadRequestError";
  respondError(stream.id, status, tag, message);
}

void ApiHttp2Session::goAway() {
  if (failed_) return;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
}

void ApiHttp2Session::refuseConnection() {
  failed_ = true;
  nghttp2_session_terminate_session(session_, NGHTTP2_ENHANCE_YOUR_CALM);
}

void ApiHttp2Session::refuseWhileStuck() {
  // Over the budget with no request handed on, nothing would ever free a byte: the client's
  // interleaved bodies would wait for a window that never comes. The largest unfinished body is
  // refused (RST_STREAM REFUSED_STREAM: the client may retry it) until the rest fits.
  while (bufferedBodyBytes_ > limits_.maxBufferedBodyBytes) {
    Stream* largest = nullptr;
    for (const auto& [id, stream] : streams_) {
      if (stream->dispatched) return;  // its answer frees its body: wait for it
      if (!stream->answered && (largest == nullptr || stream->bodyBytes > largest->bodyBytes))
        largest = stream.get();
    }
    if (largest == nullptr || largest->bodyBytes == 0) return;
    bufferedBodyBytes_ -= largest->bodyBytes;
    largest->bodyBytes = 0;
    std::string().swap(largest->request.body);
    largest->answered = true;
    refused_.push_back(503);
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, largest->id, NGHTTP2_REFUSED_STREAM);
  }
}

void ApiHttp2Session::giveBackWindow() {
  for (const auto& [streamId, length] : streamConsumed_) {
    nghttp2_session_consume_stream(session_, streamId, length);
  }
  streamConsumed_.clear();
  refuseWhileStuck();
  if (windowOwed_ > 0 && bufferedBodyBytes_ <= limits_.maxBufferedBodyBytes) {
    nghttp2_session_consume_connection(session_, windowOwed_);
    windowOwed_ = 0;
  }
}

void ApiHttp2Session::deliverEvents() {
  if (delivering_) return;
  delivering_ = true;
  while (!completed_.empty() || !closed_.empty() || !refused_.empty() || !streamConsumed_.empty()) {
    giveBackWindow();
    std::vector<int> refused;
    refused.swap(refused_);
    for (const int status : refused) handler_.onHttp2Refused(status);
    std::vector<Http2Request> completed;
    completed.swap(completed_);
    for (auto& request : completed) handler_.onHttp2Request(std::move(request));
    std::vector<int32_t> closed;
    closed.swap(closed_);
    for (const int32_t streamId : closed) handler_.onHttp2StreamClosed(streamId);
  }
  giveBackWindow();  // streams that closed may have brought the bodies under the budget
  delivering_ = false;
}

bool ApiHttp2Session::finished() const {
  return nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0;
}

bool ApiHttp2Session::wantsOutput() const {
  return nghttp2_session_want_write(session_) != 0;
}

size_t ApiHttp2Session::openStreams() const {
  return streams_.size();
}

}  // namespace ot::relayd
