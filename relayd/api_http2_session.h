// The HTTP/2 framing of one API connection (ALPN h2), on nghttp2: bytes in, complete requests out,
// responses in, bytes out. No I/O and no libuv: ApiConnection (api_connection_h2.cc) feeds it the
// decrypted bytes, pulls what to encrypt, proxies each request and hands the answer back.
//
// Every nghttp2 callback only records what happened (a request completed, a stream closed); the
// Handler hears of it after nghttp2 returned, so a handler may respond, go away or drop the
// session without nghttp2 on the stack.
//
// Limits, the HTTP/1.1 budgets of an API connection (docs/relayd.md, "Limits"):
//   - SETTINGS_MAX_CONCURRENT_STREAMS kMaxConcurrentStreams; a stream past it is refused by
//     nghttp2 (RST_STREAM REFUSED_STREAM);
//   - a request's header list (names + values + 32 per field, RFC 9113 6.5.2) at most
//     maxHeaderBytes and maxHeaderCount fields: 431 JSON;
//   - a request body at most maxBodyBytes (Content-Length or the data seen): 413 JSON;
//   - request bodies buffered by the whole connection: the connection-level flow-control window
//     is given back only while they stay within maxBufferedBodyBytes, so a client cannot make
//     the connection hold more than that plus one window (64 KiB). Over it with no request handed
//     on (interleaved bodies none of which can end), the largest is reset REFUSED_STREAM.
//   - (refused requests are reported to the handler: 431, 413, 405; 503 for REFUSED_STREAM)
// A malformed preface or frame is a connection error: GOAWAY (nghttp2's error code), then the
// session is finished() once that is sent. Loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/http_parser.h"

struct nghttp2_session;  // nghttp2/nghttp2.h, included by the .cc only

namespace ot::relayd {

struct Http2Request {
  int32_t streamId = 0;
  std::string method;
  std::string path;                 // :path, the request target
  std::string authority;            // :authority (becomes Host)
  std::vector<HttpHeader> headers;  // regular fields, names lowercase as sent
  std::string body;
};

struct Http2Limits {
  size_t maxHeaderBytes = kHttpDefaultMaxHeaderBytes;
  size_t maxHeaderCount = kHttpDefaultMaxHeaderCount;
  uint64_t maxBodyBytes = kHttpDefaultMaxBodyBytes;
  uint64_t maxBufferedBodyBytes = kHttpDefaultMaxBodyBytes;
};

class ApiHttp2Session {
 public:
  static constexpr uint32_t kMaxConcurrentStreams = 32;

  class Handler {
   public:
    virtual ~Handler() = default;
    // A complete, well-formed request within the limits. Answer it with respond().
    virtual void onHttp2Request(Http2Request request) = 0;
    // The stream ended (answered and sent, or reset by the client): forget what it waits for.
    virtual void onHttp2StreamClosed(int32_t streamId) = 0;
    // A request refused here (431, 413, 400): for the handler's counters and log.
    virtual void onHttp2Refused(int status) = 0;
  };

  // Null when nghttp2 cannot allocate its session.
  static std::unique_ptr<ApiHttp2Session> create(Handler& handler, Http2Limits limits);
  ~ApiHttp2Session();
  ApiHttp2Session(const ApiHttp2Session&) = delete;
  ApiHttp2Session& operator=(const ApiHttp2Session&) = delete;

  // Feeds bytes from the client. After a connection error the rest is ignored (GOAWAY queued).
  void receive(std::span<const uint8_t> bytes);
  // Appends at most about `maxBytes` of frames to send to `out` (nghttp2 emits whole frames, so
  // one frame may pass the bound). Returns how many bytes were appended.
  size_t takeOutput(std::vector<uint8_t>& out, size_t maxBytes);
  // Answers `streamId` (ignored if the stream is gone). Field names are lowercased here; header
  // fields specific to one HTTP/1.1 connection must not be given. With `headOnly` no body is
  // sent and `contentLength` (when set) is the field sent.
  void respond(int32_t streamId, int status, const std::vector<HttpHeader>& headers,
               std::string body, bool headOnly = false, int64_t contentLength = -1);
  // A JSON error answer in the API's shape ({"_tag":tag,"message":message}).
  void respondError(int32_t streamId, int status, const std::string& tag,
                    const std::string& message, const std::vector<HttpHeader>& extra = {});
  // Graceful: GOAWAY NO_ERROR with the last stream taken; open streams are still answered.
  void goAway();
  // The connection is refused before any request (its source holds its share of connections):
  // GOAWAY ENHANCE_YOUR_CALM, nothing read.
  void refuseConnection();

  // Nothing more to read or write: the connection can close (after its bytes are flushed).
  [[nodiscard]] bool finished() const;
  [[nodiscard]] bool wantsOutput() const;
  [[nodiscard]] size_t openStreams() const;
  // Answer bytes submitted but not yet taken by takeOutput.
  [[nodiscard]] size_t pendingResponseBytes() const { return pendingResponseBytes_; }
  [[nodiscard]] bool failed() const { return failed_; }

 private:
  struct Stream;
  struct Callbacks;
  friend struct Callbacks;

  ApiHttp2Session(Handler& handler, Http2Limits limits);
  void deliverEvents();
  void refuse(Stream& stream, int status, const std::string& message);
  void giveBackWindow();
  void refuseWhileStuck();

  Handler& handler_;
  Http2Limits limits_;
  ::nghttp2_session* session_ = nullptr;
  std::unordered_map<int32_t, std::unique_ptr<Stream>> streams_;  // open streams, by id
  std::vector<Http2Request> completed_;                           // requests to hand to the handler
  std::vector<int32_t> closed_;  // streams whose close the handler is told
  std::vector<int> refused_;     // statuses of requests refused here
  std::vector<std::pair<int32_t, size_t>> streamConsumed_;  // stream windows to give back
  uint64_t bufferedBodyBytes_ = 0;                          // request bodies held by open streams
  uint64_t windowOwed_ = 0;  // connection window not given back while over the budget
  size_t pendingResponseBytes_ = 0;
  bool failed_ = false;
  bool delivering_ = false;
};

}  // namespace ot::relayd
