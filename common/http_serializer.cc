#include "common/http_serializer.h"

#include <algorithm>
#include <charconv>

namespace ot {

namespace {

// field-value and reason-phrase characters (RFC 9110 5.5, RFC 9112 4): HTAB, SP, VCHAR, obs-text.
bool isFieldText(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte == '\t' || (byte >= 0x20 && byte != 0x7f);
  });
}

bool isTarget(std::string_view target) {
  return !target.empty() && std::all_of(target.begin(), target.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte > 0x20 && byte < 0x7f;
  });
}

bool isFramingField(std::string_view name) {
  return httpNameEquals(name, "content-length") || httpNameEquals(name, "transfer-encoding");
}

bool noContentStatus(int status) {
  return status < 200 || status == 204 || status == 304;
}

// Appends the fields, the framing field and the empty line; false when a field is unsafe to write.
bool appendFields(std::string& out, std::span<const HttpHeader> headers, HttpFraming framing) {
  for (const auto& field : headers) {
    if (!isHttpToken(field.name) || !isFieldText(field.value)) return false;
    if (isFramingField(field.name)) continue;
    out.append(field.name).append(": ").append(field.value).append("\r\n");
  }
  switch (framing.kind) {
    case HttpFraming::Kind::kNone:
      break;
    case HttpFraming::Kind::kContentLength:
      out.append("Content-Length: ").append(std::to_string(framing.contentLength)).append("\r\n");
      break;
    case HttpFraming::Kind::kChunked:
      out.append("Transfer-Encoding: chunked\r\n");
      break;
  }
  out.append("\r\n");
  return true;
}

bool methodDefinesContent(std::string_view method) {
  return method == "POST" || method == "PUT" || method == "PATCH";
}

}  // namespace

std::optional<std::string> serializeRequestHead(std::string_view method, std::string_view target,
                                                std::span<const HttpHeader> headers,
                                                HttpFraming framing) {
  if (!isHttpToken(method) || !isTarget(target)) return std::nullopt;
  std::string out;
  out.append(method).append(" ").append(target).append(" HTTP/1.1\r\n");
  if (!appendFields(out, headers, framing)) return std::nullopt;
  return out;
}

std::optional<std::string> serializeResponseHead(int status, std::string_view reason,
                                                 std::span<const HttpHeader> headers,
                                                 HttpFraming framing) {
  if (status < 100 || status > 999 || !isFieldText(reason)) return std::nullopt;
  if (noContentStatus(status) && framing.kind != HttpFraming::Kind::kNone) return std::nullopt;
  if (reason.empty()) reason = httpReasonPhrase(status);
  std::string out;
  out.append("HTTP/1.1 ").append(std::to_string(status)).append(" ").append(reason).append("\r\n");
  if (!appendFields(out, headers, framing)) return std::nullopt;
  return out;
}

std::optional<std::string> serializeRequest(std::string_view method, std::string_view target,
                                            std::span<const HttpHeader> headers,
                                            std::string_view body) {
  const HttpFraming framing = body.empty() && !methodDefinesContent(method)
                                  ? HttpFraming::none()
                                  : HttpFraming::length(body.size());
  auto out = serializeRequestHead(method, target, headers, framing);
  if (out) out->append(body);
  return out;
}

std::optional<std::string> serializeResponse(int status, std::string_view reason,
                                             std::span<const HttpHeader> headers,
                                             std::string_view body) {
  const bool noContent = noContentStatus(status);
  if (noContent && !body.empty()) return std::nullopt;
  auto out = serializeResponseHead(
      status, reason, headers, noContent ? HttpFraming::none() : HttpFraming::length(body.size()));
  if (out) out->append(body);
  return out;
}

std::string serializeChunk(std::span<const uint8_t> data) {
  if (data.empty()) return {};
  char size[16];
  const auto [end, ec] = std::to_chars(size, size + sizeof(size), data.size(), 16);
  std::string out;
  out.reserve(static_cast<size_t>(end - size) + data.size() + 4);
  out.append(size, end).append("\r\n");
  out.append(reinterpret_cast<const char*>(data.data()), data.size()).append("\r\n");
  return out;
}

std::string_view httpReasonPhrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 101:
      return "Switching Protocols";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 307:
      return "Temporary Redirect";
    case 308:
      return "Permanent Redirect";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 411:
      return "Length Required";
    case 412:
      return "Precondition Failed";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Content";
    case 426:
      return "Upgrade Required";
    case 428:
      return "Precondition Required";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return {};
  }
}

}  // namespace ot
