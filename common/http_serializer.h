// Writing HTTP/1.1 messages: the proxy path (relayd re-sends a parsed request to controld and its
// answer to the visitor) and otunnel's requests. Pure: returns strings the caller owns.
//
// The serializer owns the framing. Content-Length and Transfer-Encoding fields in `headers` are
// dropped and replaced by what HttpFraming says, so a proxied message is always re-framed by us and
// never carries a peer's framing headers (no request smuggling through us). Everything written is
// validated first: nullopt when a method or field name is not a token, a target or field value or
// reason phrase carries CR, LF or another CTL, a status is outside 100..999, or the framing is not
// allowed for the status (1xx, 204 and 304 take no framing header).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/http_parser.h"

namespace ot {

struct HttpFraming {
  enum class Kind : uint8_t { kNone, kContentLength, kChunked };

  Kind kind = Kind::kNone;
  uint64_t contentLength = 0;

  [[nodiscard]] static constexpr HttpFraming none() { return {}; }
  [[nodiscard]] static constexpr HttpFraming length(uint64_t bytes) {
    return {Kind::kContentLength, bytes};
  }
  [[nodiscard]] static constexpr HttpFraming chunked() { return {Kind::kChunked, 0}; }
};

// "METHOD target HTTP/1.1\r\n" + headers + the framing field + "\r\n".
[[nodiscard]] std::optional<std::string> serializeRequestHead(std::string_view method,
                                                              std::string_view target,
                                                              std::span<const HttpHeader> headers,
                                                              HttpFraming framing);
// "HTTP/1.1 status reason\r\n" + headers + the framing field + "\r\n". An empty reason is
// replaced by httpReasonPhrase(status).
[[nodiscard]] std::optional<std::string> serializeResponseHead(int status, std::string_view reason,
                                                               std::span<const HttpHeader> headers,
                                                               HttpFraming framing);

// Whole messages with a Content-Length body. A request with an empty body gets "Content-Length: 0"
// only for POST, PUT and PATCH (methods that define content); a 1xx/204/304 response must have an
// empty body and gets no framing field.
[[nodiscard]] std::optional<std::string> serializeRequest(std::string_view method,
                                                          std::string_view target,
                                                          std::span<const HttpHeader> headers,
                                                          std::string_view body);
[[nodiscard]] std::optional<std::string> serializeResponse(int status, std::string_view reason,
                                                           std::span<const HttpHeader> headers,
                                                           std::string_view body);

// One chunk of a chunked body ("1a\r\n" data "\r\n"). Empty data gives nothing: the end of the
// body is kLastChunk (no trailers are ever written).
[[nodiscard]] std::string serializeChunk(std::span<const uint8_t> data);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

// The RFC 9110 reason phrase for the statuses we send ("Not Found"); empty for others.
[[nodiscard]] std::string_view httpReasonPhrase(int status);

}  // namespace ot
