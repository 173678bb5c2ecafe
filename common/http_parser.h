// Incremental HTTP/1.1 request and response parsing on llhttp, hardened for hostile peers: relayd
// parses what visitors send to the API domain, otunnel parses the relay's 101. Pure codec: no I/O,
// no logging, no exceptions. An HttpParser belongs to one connection and is only touched by that
// connection's loop thread; it owns the message it is building (at most the configured limits).
//
// Strictness. Our CMake compiles llhttp 8.1 without LLHTTP_STRICT_MODE and no lenient flag is ever
// set. llhttp itself refuses: Content-Length with Transfer-Encoding, any second Content-Length
// (even with the same value), signs, lists or overflow in Content-Length, a request whose last
// transfer coding is not chunked, bad or overflowing chunk sizes, CTLs in header values, non-token
// header names, unknown methods. Its loose build lets through what this file refuses: bare LF or a
// CR without LF anywhere in the head, obs-fold (a field line starting with SP or HTAB), whitespace
// before the colon, an empty field name, repeated SP in the request line, CTL/SP/non-ASCII in the
// request target, CTLs in a reason phrase, status codes below 100, any version but HTTP/1.0 and 1.1
// (the HTTP/2 preface "PRI * HTTP/2.0" included), and in requests a missing (1.1) or repeated Host.
// Field values may carry obs-text (bytes >= 0x80), kept raw. Chunked framing is llhttp's own (its
// loose build takes a bare LF ending the trailer section); a proxy re-frames every body it forwards
// (http_serializer.h), so no framing we accept reaches another parser. Responses with 1xx, 204 or
// 304 never have a body. Not supported: responses to HEAD (otunnel never sends HEAD). CONNECT is
// reported as kUpgrade like an Upgrade request; callers that do not tunnel refuse it.
#pragma once

#include <llhttp.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ot {

inline constexpr size_t kHttpDefaultMaxStartLineBytes = 8 * 1024;
inline constexpr size_t kHttpDefaultMaxHeaderBytes = 16 * 1024;
inline constexpr size_t kHttpDefaultMaxHeaderCount = 100;
inline constexpr uint64_t kHttpDefaultMaxBodyBytes = 1024 * 1024;

enum class HttpError : uint8_t {
  kNone,
  kBadRequest,           // 400: malformed; errorDetail() has llhttp's or our reason
  kUriTooLong,           // 414: start line over maxStartLineBytes (status line, for responses)
  kHeadersTooLarge,      // 431: header section (or trailer section) over maxHeaderBytes
  kTooManyHeaders,       // 431: more than maxHeaderCount fields (or trailer fields)
  kBodyTooLarge,         // 413: Content-Length or the body seen so far over maxBodyBytes
  kVersionNotSupported,  // 505: anything but HTTP/1.0 and 1.1, the HTTP/2 preface included
  kTruncated,            // finish() inside a message: the peer closed early (nothing to answer)
};

// Stable snake_case name ("uri_too_long", ...) for metric labels, log lines and API error codes.
[[nodiscard]] std::string_view httpErrorName(HttpError error);
// The status to answer with (400, 413, 414, 431, 505); 200 for kNone.
[[nodiscard]] int httpErrorStatus(HttpError error);

// A non-empty RFC 9110 token (method, field name).
[[nodiscard]] bool isHttpToken(std::string_view text);
// ASCII case-insensitive equality, for field names and tokens.
[[nodiscard]] bool httpNameEquals(std::string_view a, std::string_view b);

struct HttpHeader {
  std::string name;   // as received (token characters only)
  std::string value;  // leading and trailing SP/HTAB removed; may hold obs-text
  bool operator==(const HttpHeader&) const = default;
};

struct HttpMessage {
  std::string method;  // requests: as sent, e.g. "GET"
  std::string target;  // requests: raw request-target (path and query), not decoded
  int status = 0;      // responses
  std::string reason;  // responses: reason phrase as sent
  uint8_t versionMajor = 1;
  uint8_t versionMinor = 1;
  std::vector<HttpHeader> headers;  // wire order, repeats kept; trailers are not kept
  std::optional<uint64_t> contentLength;
  bool chunked = false;
  bool keepAlive = false;  // llhttp's verdict: another message may follow on this connection
  bool upgrade = false;    // Upgrade + Connection: upgrade (101 for responses), or CONNECT
  std::string body;        // HttpBodyMode::kCollect only

  // First field named `name` (ASCII case-insensitive).
  [[nodiscard]] std::optional<std::string_view> header(std::string_view name) const;
  [[nodiscard]] size_t headerCount(std::string_view name) const;
};

// kCollect: the body is gathered into HttpMessage::body (API requests, small responses).
// kStream: the head is reported with kHeaders, then each piece of body as kBody, a view into the
// caller's input; nothing is buffered, so a proxy forwards each piece (and can stop reading while
// its upstream is full) and the parser's memory stays at the head's size. A proxy's loop:
//   r = parser.feed(buffered); drop r.consumed bytes from `buffered`; then on
//   kHeaders  decide (route, auth, 100-continue), write serializeRequestHead(..., chunked())
//   upstream kBody     write serializeChunk(r.body) upstream (or hold `buffered` while upstream is
//   full) kNeedMore read more from the socket;  kDone  write kLastChunk, reset() if keepAlive
//   kError    answer httpErrorStatus(r.error) with Connection: close
// then feed again; after kHeaders and kBody even when nothing is left (the message may be done).
enum class HttpBodyMode : uint8_t { kCollect, kStream };

struct HttpParserLimits {
  size_t maxStartLineBytes = kHttpDefaultMaxStartLineBytes;  // excluding CRLF
  size_t maxHeaderBytes = kHttpDefaultMaxHeaderBytes;        // start line through the empty line
  size_t maxHeaderCount = kHttpDefaultMaxHeaderCount;
  uint64_t maxBodyBytes = kHttpDefaultMaxBodyBytes;  // decoded body (chunk data), both modes
  HttpBodyMode bodyMode = HttpBodyMode::kCollect;
};

enum class HttpParseStatus : uint8_t {
  kNeedMore,  // all input taken, message incomplete
  kHeaders,   // kStream only: message() holds the head; feed the rest of the input (even if empty)
  kBody,      // kStream only: `body` is the next piece; feed the rest of the input (even if empty)
  kDone,      // message complete; bytes from `consumed` on belong to the next message
  kUpgrade,   // message complete and upgraded (or CONNECT): bytes from `consumed` on are the
              // new protocol's (the WebSocket stream); this parser is finished
  kError,
};

struct HttpParseResult {
  HttpParseStatus status = HttpParseStatus::kNeedMore;
  HttpError error = HttpError::kNone;
  // Bytes of this feed's input the parser took; always <= its size. On kError: how far it got.
  size_t consumed = 0;
  std::span<const uint8_t> body;  // kBody: a view into the input just fed
};

// Fed bytes in arbitrary pieces; every decision is made at a byte position, so the outcome does not
// depend on how the input was split. On kError, message() keeps the head only if it was complete
// and never part of a body. After kDone call reset() to parse the next pipelined message
// (when message().keepAlive); kDone, kUpgrade and kError are final until then: further feeds
// return the same status with consumed == 0. Copyable and movable (llhttp's state is plain data;
// its back pointer is refreshed on every call).
class HttpParser {
 public:
  enum class Kind : uint8_t { kRequest, kResponse };

  explicit HttpParser(Kind kind, HttpParserLimits limits = {});

  [[nodiscard]] HttpParseResult feed(std::span<const uint8_t> input);
  [[nodiscard]] HttpParseResult feed(std::string_view input);
  // The peer closed its side. Completes a response whose body runs to EOF (kDone); kNeedMore when
  // no message had started; kError/kTruncated inside any other message.
  [[nodiscard]] HttpParseResult finish();
  // Start the next message on the same connection; limits and kind are kept.
  void reset();

  [[nodiscard]] const HttpMessage& message() const { return message_; }
  [[nodiscard]] HttpMessage takeMessage() { return std::move(message_); }
  [[nodiscard]] HttpError error() const { return error_; }
  // One line for the log: llhttp's reason or ours. Static storage; empty without an error.
  [[nodiscard]] std::string_view errorDetail() const { return errorDetail_; }
  // The head (start line and fields) is in message(); from kHeaders on, and after kDone/kUpgrade.
  [[nodiscard]] bool headersComplete() const { return headComplete_; }

 private:
  friend struct HttpParserCallbacks;

  enum class Phase : uint8_t { kHead, kHeadersPaused, kBody, kBodyPaused, kFinal };
  enum class Field : uint8_t { kNone, kName, kValue };

  // How much of the input llhttp may see now: in the head, up to a framing violation or the final
  // LF (checked byte by byte here first); in a body that runs to EOF, up to the body limit.
  struct FeedWindow {
    size_t length = 0;  // bytes to hand to llhttp
    HttpError error = HttpError::kNone;
    const char* detail = "";
    bool headEnd = false;  // `length` ends with the empty line that closes the head
  };
  [[nodiscard]] FeedWindow scanHead(std::span<const uint8_t> input);
  [[nodiscard]] HttpParseResult fail(HttpError error, const char* detail, size_t consumed);
  [[nodiscard]] HttpParseResult settle(HttpParseResult result);
  int setError(HttpError error, const char* detail);

  Kind kind_;
  HttpParserLimits limits_;
  llhttp_t llhttp_{};
  HttpMessage message_;
  Phase phase_ = Phase::kHead;
  HttpParseResult final_;
  HttpError error_ = HttpError::kNone;
  const char* errorDetail_ = "";
  HttpError callbackError_ = HttpError::kNone;  // set by a callback that refused
  const char* callbackDetail_ = "";
  std::span<const uint8_t> pendingBody_;  // set by on_body in kStream
  bool headComplete_ = false;             // set by on_headers_complete once the head passed
  bool messageComplete_ = false;          // set by on_message_complete

  // Head framing state (scanHead).
  size_t headBytes_ = 0;
  size_t lineBytes_ = 0;
  size_t startLineSpaces_ = 0;
  bool startLineDone_ = false;
  bool sawCr_ = false;

  // Field collection: names and values arrive in pieces; trailers are only counted.
  Field field_ = Field::kNone;
  size_t trailerBytes_ = 0;
  size_t trailerCount_ = 0;
  uint64_t bodyBytes_ = 0;
  bool eofBody_ = false;  // a response body delimited by the connection's end
};

}  // namespace ot
