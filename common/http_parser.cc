// One concern over ~450 lines: the HTTP/1.1 head parser. The llhttp callbacks (the strictness
// checks listed in http_parser.h) and the feed/scan loop that drives them share HttpParser's
// private state and must agree on where each check runs (a *_complete callback at a fixed byte);
// split across files they would need that state exposed for no other reader.
#include "common/http_parser.h"

#include <algorithm>
#include <utility>

#include "common/text.h"

namespace ot {

namespace {

constexpr bool isTchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

// llhttp must never see a null pointer: with one, its "restart spans" step would mark an open span
// as closed and a later span end would report a garbage length.
const char* bytesOf(std::span<const uint8_t> input) {
  static constexpr char kEmpty = 0;
  return input.empty() ? &kEmpty : reinterpret_cast<const char*>(input.data());
}

// Where llhttp stopped inside [begin, begin + length); a position outside it (which llhttp only
// reports for an error left from an earlier call) counts as nothing taken.
size_t stoppedAt(const char* position, const char* begin, size_t length) {
  if (position == nullptr || position < begin || position > begin + length) return 0;
  return static_cast<size_t>(position - begin);
}

}  // namespace

bool isHttpToken(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return isTchar(static_cast<unsigned char>(c));
  });
}

bool httpNameEquals(std::string_view a, std::string_view b) {
  return equalsIgnoreCase(a, b);
}

std::string_view httpErrorName(HttpError error) {
  switch (error) {
    case HttpError::kNone:
      return "none";
    case HttpError::kBadRequest:
      return "bad_request";
    case HttpError::kUriTooLong:
      return "uri_too_long";
    case HttpError::kHeadersTooLarge:
      return "headers_too_large";
    case HttpError::kTooManyHeaders:
      return "too_many_headers";
    case HttpError::kBodyTooLarge:
      return "body_too_large";
    case HttpError::kVersionNotSupported:
      return "version_not_supported";
    case HttpError::kTruncated:
      return "truncated";
  }
  return "bad_request";
}

int httpErrorStatus(HttpError error) {
  switch (error) {
    case HttpError::kNone:
      return 200;
    case HttpError::kBadRequest:
    case HttpError::kTruncated:
      return 400;
    case HttpError::kUriTooLong:
      return 414;
    case HttpError::kHeadersTooLarge:
    case HttpError::kTooManyHeaders:
      return 431;
    case HttpError::kBodyTooLarge:
      return 413;
    case HttpError::kVersionNotSupported:
      return 505;
  }
  return 400;
}

std::optional<std::string_view> HttpMessage::header(std::string_view name) const {
  for (const auto& field : headers) {
    if (httpNameEquals(field.name, name)) return std::string_view(field.value);
  }
  return std::nullopt;
}

size_t HttpMessage::headerCount(std::string_view name) const {
  return static_cast<size_t>(std::count_if(headers.begin(), headers.end(), [&](const auto& field) {
    return httpNameEquals(field.name, name);
  }));
}

// llhttp's callbacks. Each either records what it saw or refuses through setError(). Checks run in
// the *_complete callbacks, which fire at a fixed byte, never in span callbacks, which also fire
// wherever the input happened to be split; that keeps the verdict independent of the split.
struct HttpParserCallbacks {
  static HttpParser& self(llhttp_t* parser) { return *static_cast<HttpParser*>(parser->data); }

  static int onMethod(llhttp_t* parser, const char* at, size_t length) {
    self(parser).message_.method.append(at, length);
    return 0;
  }

  static int onUrl(llhttp_t* parser, const char* at, size_t length) {
    self(parser).message_.target.append(at, length);
    return 0;
  }

  static int onUrlComplete(llhttp_t* parser) {
    HttpParser& p = self(parser);
    for (const char c : p.message_.target) {
      const auto byte = static_cast<unsigned char>(c);
      if (byte <= 0x20 || byte >= 0x7f) {
        return p.setError(HttpError::kBadRequest, "invalid character in request target");
      }
    }
    return 0;
  }

  static int onStatus(llhttp_t* parser, const char* at, size_t length) {
    self(parser).message_.reason.append(at, length);
    return 0;
  }

  static int onStatusComplete(llhttp_t* parser) {
    HttpParser& p = self(parser);
    // reason-phrase = *( HTAB / SP / VCHAR / obs-text ); the loose build lets other CTLs through.
    for (const char c : p.message_.reason) {
      const auto byte = static_cast<unsigned char>(c);
      if ((byte < 0x20 && byte != '\t') || byte == 0x7f) {
        return p.setError(HttpError::kBadRequest, "invalid character in reason phrase");
      }
    }
    return 0;
  }

  static int onVersionComplete(llhttp_t* parser) {
    HttpParser& p = self(parser);
    p.message_.versionMajor = parser->http_major;
    p.message_.versionMinor = parser->http_minor;
    if (parser->http_major != 1 || parser->http_minor > 1) {
      return p.setError(HttpError::kVersionNotSupported, "HTTP version is not 1.0 or 1.1");
    }
    return 0;
  }

  static int onHeaderField(llhttp_t* parser, const char* at, size_t length) {
    HttpParser& p = self(parser);
    if (p.phase_ != HttpParser::Phase::kHead) {
      p.trailerBytes_ += length;  // trailers are counted against the limits, never stored
    } else {
      if (p.field_ != HttpParser::Field::kName) p.message_.headers.emplace_back();
      p.message_.headers.back().name.append(at, length);
    }
    p.field_ = HttpParser::Field::kName;
    return 0;
  }

  static int onHeaderFieldComplete(llhttp_t* parser) {
    HttpParser& p = self(parser);
    const bool named = p.field_ == HttpParser::Field::kName;
    p.field_ = HttpParser::Field::kValue;
    if (p.phase_ != HttpParser::Phase::kHead) {
      if (++p.trailerCount_ > p.limits_.maxHeaderCount) {
        return p.setError(HttpError::kTooManyHeaders, "too many trailer fields");
      }
      return 0;
    }
    // llhttp's loose build passes "Name :" (space before the colon) and ": value" through.
    if (!named || p.message_.headers.back().name.empty()) {
      return p.setError(HttpError::kBadRequest, "empty header name");
    }
    if (!isHttpToken(p.message_.headers.back().name)) {
      return p.setError(HttpError::kBadRequest, "invalid character in header name");
    }
    if (p.message_.headers.size() > p.limits_.maxHeaderCount) {
      return p.setError(HttpError::kTooManyHeaders, "too many header fields");
    }
    return 0;
  }

  static int onHeaderValue(llhttp_t* parser, const char* at, size_t length) {
    HttpParser& p = self(parser);
    if (p.phase_ != HttpParser::Phase::kHead) {
      p.trailerBytes_ += length;
    } else if (!p.message_.headers.empty()) {  // onHeaderFieldComplete guarantees one
      p.message_.headers.back().value.append(at, length);
    }
    return 0;
  }

  static int onHeaderValueComplete(llhttp_t* parser) {
    HttpParser& p = self(parser);
    if (p.phase_ != HttpParser::Phase::kHead) {
      if (p.trailerBytes_ > p.limits_.maxHeaderBytes) {
        return p.setError(HttpError::kHeadersTooLarge, "trailer section too large");
      }
      return 0;
    }
    if (!p.message_.headers.empty()) {
      std::string& value = p.message_.headers.back().value;  // llhttp keeps trailing OWS
      const size_t end = value.find_last_not_of(" \t");
      value.resize(end == std::string::npos ? 0 : end + 1);
    }
    return 0;
  }

  static int onHeadersComplete(llhttp_t* parser) {
    HttpParser& p = self(parser);
    HttpMessage& m = p.message_;
    if (const int refused = onVersionComplete(parser); refused != 0) return refused;
    if (p.kind_ == HttpParser::Kind::kRequest) {
      const size_t hosts = m.headerCount("host");
      if (hosts > 1) return p.setError(HttpError::kBadRequest, "repeated Host header");
      if (hosts == 0 && m.versionMinor == 1) {
        return p.setError(HttpError::kBadRequest, "missing Host header");
      }
    } else {
      m.status = parser->status_code;
      if (m.status < 100) return p.setError(HttpError::kBadRequest, "invalid status code");
      // These never have a body whatever Content-Length says (RFC 9112 6.3); llhttp would read one.
      if (m.status < 200 || m.status == 204 || m.status == 304) parser->flags |= F_SKIPBODY;
    }
    if ((parser->flags & F_CONTENT_LENGTH) != 0) m.contentLength = parser->content_length;
    m.chunked = (parser->flags & F_CHUNKED) != 0;
    m.upgrade = parser->upgrade != 0;
    m.keepAlive = llhttp_should_keep_alive(parser) != 0;
    p.eofBody_ = llhttp_message_needs_eof(parser) != 0;
    if ((parser->flags & F_SKIPBODY) == 0 && !m.chunked && m.contentLength &&
        *m.contentLength > p.limits_.maxBodyBytes) {
      return p.setError(HttpError::kBodyTooLarge, "Content-Length over the body limit");
    }
    // Always stop here: the head's framing checks end at this byte, whatever the body mode.
    p.headComplete_ = true;
    p.phase_ = HttpParser::Phase::kHeadersPaused;
    p.field_ = HttpParser::Field::kNone;
    return HPE_PAUSED;
  }

  static int onChunkHeader(llhttp_t* parser) {
    HttpParser& p = self(parser);
    if (parser->content_length > p.limits_.maxBodyBytes - p.bodyBytes_) {
      return p.setError(HttpError::kBodyTooLarge, "chunked body over the body limit");
    }
    return 0;
  }

  static int onBody(llhttp_t* parser, const char* at, size_t length) {
    HttpParser& p = self(parser);
    if (length == 0) return 0;
    if (length > p.limits_.maxBodyBytes - p.bodyBytes_) {
      return p.setError(HttpError::kBodyTooLarge, "body over the body limit");
    }
    p.bodyBytes_ += length;
    if (p.limits_.bodyMode == HttpBodyMode::kCollect) {
      p.message_.body.append(at, length);
      return 0;
    }
    p.pendingBody_ = std::span(reinterpret_cast<const uint8_t*>(at), length);
    return HPE_PAUSED;
  }

  static int onMessageComplete(llhttp_t* parser) {
    HttpParser& p = self(parser);
    p.message_.upgrade = parser->upgrade != 0;
    p.message_.keepAlive = llhttp_should_keep_alive(parser) != 0;
    p.messageComplete_ = true;
    return HPE_PAUSED;  // so the bytes after this message stay the caller's
  }

  static const llhttp_settings_t& settings() {
    static const llhttp_settings_t kSettings = [] {
      llhttp_settings_t s{};
      s.on_method = onMethod;
      s.on_url = onUrl;
      s.on_url_complete = onUrlComplete;
      s.on_status = onStatus;
      s.on_status_complete = onStatusComplete;
      s.on_version_complete = onVersionComplete;
      s.on_header_field = onHeaderField;
      s.on_header_field_complete = onHeaderFieldComplete;
      s.on_header_value = onHeaderValue;
      s.on_header_value_complete = onHeaderValueComplete;
      s.on_headers_complete = onHeadersComplete;
      s.on_chunk_header = onChunkHeader;
      s.on_body = onBody;
      s.on_message_complete = onMessageComplete;
      return s;
    }();
    return kSettings;
  }
};

HttpParser::HttpParser(Kind kind, HttpParserLimits limits) : kind_(kind), limits_(limits) {
  llhttp_init(&llhttp_, kind == Kind::kRequest ? HTTP_REQUEST : HTTP_RESPONSE,
              &HttpParserCallbacks::settings());
}

void HttpParser::reset() {
  *this = HttpParser(kind_, limits_);
}

int HttpParser::setError(HttpError error, const char* detail) {
  callbackError_ = error;
  callbackDetail_ = detail;
  return HPE_USER;
}

HttpParseResult HttpParser::fail(HttpError error, const char* detail, size_t consumed) {
  // What was gathered before the error depends on where the input was split (llhttp hands over
  // spans at the end of each piece), so only a complete head is kept, never part of a body.
  if (phase_ == Phase::kHead) message_ = HttpMessage{};
  message_.body.clear();
  error_ = error;
  errorDetail_ = detail;
  return settle({HttpParseStatus::kError, error, consumed, {}});
}

HttpParseResult HttpParser::settle(HttpParseResult result) {
  phase_ = Phase::kFinal;
  final_ = result;
  final_.consumed = 0;
  return result;
}

HttpParser::FeedWindow HttpParser::scanHead(std::span<const uint8_t> input) {
  for (size_t i = 0; i < input.size(); ++i) {
    const uint8_t byte = input[i];
    if (headBytes_ == limits_.maxHeaderBytes) {
      return {i, HttpError::kHeadersTooLarge, "header section too large", false};
    }
    ++headBytes_;
    if (sawCr_) {
      sawCr_ = false;
      if (byte != '\n') return {i, HttpError::kBadRequest, "CR without LF in the head", false};
      if (lineBytes_ == 0) {
        if (startLineDone_) return {i + 1, HttpError::kNone, "", true};
        continue;  // an empty line before the start line is ignored (RFC 9112 2.2), as llhttp does
      }
      // llhttp's loose build takes an HTTP/0.9 style "GET /path" line (no version) with headers.
      if (kind_ == Kind::kRequest && startLineSpaces_ != 2) {
        return {i, HttpError::kBadRequest, "request line is not method SP target SP version",
                false};
      }
      startLineDone_ = true;
      lineBytes_ = 0;
      continue;
    }
    if (byte == '\r') {
      sawCr_ = true;
      continue;
    }
    if (byte == '\n') return {i, HttpError::kBadRequest, "bare LF in the head", false};
    if (!startLineDone_) {
      if (lineBytes_ == limits_.maxStartLineBytes) {
        return {i, HttpError::kUriTooLong, "start line too long", false};
      }
      if (kind_ == Kind::kRequest && byte == ' ' && ++startLineSpaces_ > 2) {
        return {i, HttpError::kBadRequest, "extra space in request line", false};
      }
    } else if (lineBytes_ == 0 && (byte == ' ' || byte == '\t')) {
      return {i, HttpError::kBadRequest, "obs-fold or whitespace before a header name", false};
    }
    ++lineBytes_;
  }
  return {input.size(), HttpError::kNone, "", false};
}

HttpParseResult HttpParser::feed(std::string_view input) {
  return feed(std::span(reinterpret_cast<const uint8_t*>(input.data()), input.size()));
}

HttpParseResult HttpParser::feed(std::span<const uint8_t> input) {
  if (phase_ == Phase::kFinal) return final_;
  llhttp_.data = this;
  if (phase_ == Phase::kHeadersPaused || phase_ == Phase::kBodyPaused) {
    llhttp_resume(&llhttp_);
    phase_ = Phase::kBody;
  }
  size_t pos = 0;
  for (;;) {
    const std::span<const uint8_t> rest = input.subspan(pos);
    FeedWindow window{rest.size(), HttpError::kNone, "", false};
    if (phase_ == Phase::kHead) {
      window = scanHead(rest);
    } else if (eofBody_ && rest.size() > limits_.maxBodyBytes - bodyBytes_) {
      // Every byte is body until EOF: stop at the limit's byte, not where a piece happens to end.
      const uint64_t room = limits_.maxBodyBytes - bodyBytes_;  // < rest.size(), so it fits
      window = {room, HttpError::kBodyTooLarge, "body over the body limit", false};
    }
    const char* begin = bytesOf(rest);
    const llhttp_errno_t err = llhttp_execute(&llhttp_, begin, window.length);
    pos += err == HPE_OK ? window.length
                         : stoppedAt(llhttp_get_error_pos(&llhttp_), begin, window.length);

    if (err == HPE_PAUSED) {
      if (messageComplete_) {
        const bool upgraded = message_.upgrade;
        return settle({upgraded ? HttpParseStatus::kUpgrade : HttpParseStatus::kDone,
                       HttpError::kNone,
                       pos,
                       {}});
      }
      if (!pendingBody_.empty()) {
        phase_ = Phase::kBodyPaused;
        return {HttpParseStatus::kBody, HttpError::kNone, pos, std::exchange(pendingBody_, {})};
      }
      if (phase_ != Phase::kHeadersPaused) {
        return fail(HttpError::kBadRequest, "parser paused unexpectedly", pos);
      }
      if (limits_.bodyMode == HttpBodyMode::kStream) {
        return {HttpParseStatus::kHeaders, HttpError::kNone, pos, {}};
      }
      llhttp_resume(&llhttp_);
      phase_ = Phase::kBody;
      continue;  // even with nothing left: a message without a body completes on resume
    }
    if (err != HPE_OK) {
      if (callbackError_ != HttpError::kNone) return fail(callbackError_, callbackDetail_, pos);
      if (err == HPE_PAUSED_H2_UPGRADE) {
        return fail(HttpError::kVersionNotSupported, "HTTP/2 connection preface", pos);
      }
      if (err == HPE_PAUSED_UPGRADE) {  // not reached: onMessageComplete pauses first
        return settle({HttpParseStatus::kUpgrade, HttpError::kNone, pos, {}});
      }
      const char* reason = llhttp_get_error_reason(&llhttp_);
      return fail(HttpError::kBadRequest, reason != nullptr ? reason : "malformed message", pos);
    }
    if (window.error != HttpError::kNone) return fail(window.error, window.detail, pos);
    if (window.headEnd) return fail(HttpError::kBadRequest, "head ended unexpectedly", pos);
    return {HttpParseStatus::kNeedMore, HttpError::kNone, pos, {}};
  }
}

HttpParseResult HttpParser::finish() {
  if (phase_ == Phase::kHeadersPaused || phase_ == Phase::kBodyPaused) {
    // The caller stopped after an event; let a message that is already complete finish first.
    const HttpParseResult pending = feed(std::span<const uint8_t>());
    if (pending.status != HttpParseStatus::kNeedMore) return pending;
  }
  if (phase_ == Phase::kFinal) return final_;
  llhttp_.data = this;
  const llhttp_errno_t err = llhttp_finish(&llhttp_);
  if (messageComplete_) {
    return settle({HttpParseStatus::kDone, HttpError::kNone, 0, {}});
  }
  if (err == HPE_OK) return {HttpParseStatus::kNeedMore, HttpError::kNone, 0, {}};
  if (callbackError_ != HttpError::kNone) return fail(callbackError_, callbackDetail_, 0);
  return fail(HttpError::kTruncated, "connection closed inside a message", 0);
}

}  // namespace ot
