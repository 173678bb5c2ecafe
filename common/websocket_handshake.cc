#include "common/websocket_handshake.h"

#include <openssl/evp.h>

#include <array>

#include "common/text.h"

namespace ot::ws {

namespace {

// Whether any header called `name` lists `token` in its comma-separated value.
bool hasToken(HeaderList headers, std::string_view name, std::string_view token) {
  for (const HttpHeader& header : headers) {
    if (!equalsIgnoreCase(header.name, name)) continue;
    std::string_view rest = header.value;
    while (true) {
      const size_t comma = rest.find(',');
      if (equalsIgnoreCase(trimOws(rest.substr(0, comma)), token)) return true;
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return false;
}

struct SingleValue {
  size_t count = 0;
  std::string_view value;  // trimmed, from the first occurrence
};

SingleValue findSingle(HeaderList headers, std::string_view name) {
  SingleValue found;
  for (const HttpHeader& header : headers) {
    if (!equalsIgnoreCase(header.name, name)) continue;
    if (found.count++ == 0) found.value = trimOws(header.value);
  }
  return found;
}

std::string base64(std::span<const uint8_t> bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), bytes.data(),
                                      static_cast<int>(bytes.size()));
  out.resize(written > 0 ? static_cast<size_t>(written) : 0);
  return out;
}

int base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool safeForHead(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

}  // namespace

std::string acceptKey(std::string_view secWebSocketKey) {
  std::string input;
  input.reserve(secWebSocketKey.size() + kHandshakeGuid.size());
  input.append(secWebSocketKey).append(kHandshakeGuid);
  std::array<uint8_t, EVP_MAX_MD_SIZE> digest{};
  unsigned int digestSize = 0;
  if (EVP_Digest(input.data(), input.size(), digest.data(), &digestSize, EVP_sha1(), nullptr) !=
      1) {
    return {};
  }
  return base64(std::span<const uint8_t>(digest.data(), digestSize));
}

bool isValidClientKey(std::string_view key) {
  // 16 bytes encode as 22 significant characters and "=="; the last character carries only two
  // bits of data, so its low four bits must be zero in the canonical form.
  if (key.size() != 24 || key.substr(22) != "==") return false;
  for (size_t i = 0; i < 22; ++i) {
    if (base64Value(key[i]) < 0) return false;
  }
  return (base64Value(key[21]) & 0x0F) == 0;
}

// --- Server side ------------------------------------------------------------------------------

UpgradeCheck checkUpgradeRequest(const UpgradeRequest& request) {
  UpgradeCheck check;
  auto failWith = [&check](UpgradeError error) {
    check.error = error;
    check.key = {};
    return check;
  };
  if (request.method != "GET") return failWith(UpgradeError::kMethodNotGet);
  if (request.httpMajor < 1 || (request.httpMajor == 1 && request.httpMinor < 1)) {
    return failWith(UpgradeError::kHttpVersion);
  }
  if (!hasToken(request.headers, "Upgrade", "websocket")) {
    return failWith(UpgradeError::kNotWebSocket);
  }
  if (!hasToken(request.headers, "Connection", "upgrade")) {
    return failWith(UpgradeError::kConnectionNotUpgrade);
  }
  const SingleValue version = findSingle(request.headers, "Sec-WebSocket-Version");
  if (version.count == 0) return failWith(UpgradeError::kVersionMissing);
  if (version.count != 1 || version.value != kSupportedVersion) {
    return failWith(UpgradeError::kVersionUnsupported);
  }
  const SingleValue key = findSingle(request.headers, "Sec-WebSocket-Key");
  if (key.count == 0) return failWith(UpgradeError::kKeyMissing);
  if (key.count != 1 || !isValidClientKey(key.value)) return failWith(UpgradeError::kKeyInvalid);
  check.key = key.value;
  return check;
}

int httpStatusFor(UpgradeError error) {
  switch (error) {
    case UpgradeError::kNone:
      return 101;
    case UpgradeError::kNotWebSocket:
    case UpgradeError::kVersionUnsupported:
      return 426;
    case UpgradeError::kMethodNotGet:
    case UpgradeError::kHttpVersion:
    case UpgradeError::kConnectionNotUpgrade:
    case UpgradeError::kVersionMissing:
    case UpgradeError::kKeyMissing:
    case UpgradeError::kKeyInvalid:
      break;
  }
  return 400;
}

std::string_view upgradeErrorName(UpgradeError error) {
  switch (error) {
    case UpgradeError::kNone:
      return "none";
    case UpgradeError::kMethodNotGet:
      return "websocket_method_not_get";
    case UpgradeError::kHttpVersion:
      return "websocket_http_version";
    case UpgradeError::kNotWebSocket:
      return "websocket_upgrade_required";
    case UpgradeError::kConnectionNotUpgrade:
      return "websocket_connection_not_upgrade";
    case UpgradeError::kVersionMissing:
      return "websocket_version_missing";
    case UpgradeError::kVersionUnsupported:
      return "websocket_version_unsupported";
    case UpgradeError::kKeyMissing:
      return "websocket_key_missing";
    case UpgradeError::kKeyInvalid:
      return "websocket_key_invalid";
  }
  return "unknown";
}

std::string_view upgradeErrorMessage(UpgradeError error) {
  switch (error) {
    case UpgradeError::kNone:
      return "ok";
    case UpgradeError::kMethodNotGet:
      return "a WebSocket upgrade must use GET";
    case UpgradeError::kHttpVersion:
      return "a WebSocket upgrade needs HTTP/1.1 or later";
    case UpgradeError::kNotWebSocket:
      return "this endpoint requires Upgrade: websocket";
    case UpgradeError::kConnectionNotUpgrade:
      return "the Connection header must include upgrade";
    case UpgradeError::kVersionMissing:
      return "Sec-WebSocket-Version is missing";
    case UpgradeError::kVersionUnsupported:
      return "only Sec-WebSocket-Version 13 is supported";
    case UpgradeError::kKeyMissing:
      return "Sec-WebSocket-Key is missing";
    case UpgradeError::kKeyInvalid:
      return "Sec-WebSocket-Key must be one base64-encoded 16-byte value";
  }
  return "unknown error";
}

std::string buildUpgradeResponse(std::string_view key) {
  std::string response =
      "HTTP/1.1 101 Switching Protocols\r\n"
      "Upgrade: websocket\r\n"
      "Connection: Upgrade\r\n"
      "Sec-WebSocket-Accept: ";
  response.append(acceptKey(key)).append("\r\n\r\n");
  return response;
}

// --- Client side ------------------------------------------------------------------------------

std::optional<ClientHandshake> buildClientRequest(std::string_view host, std::string_view target,
                                                  std::span<const uint8_t, 16> nonce,
                                                  HeaderList extraHeaders) {
  if (host.empty() || !safeForHead(host)) return std::nullopt;
  if (target.empty() || target.front() != '/' || !safeForHead(target) ||
      target.find_first_of(" \t") != std::string_view::npos) {
    return std::nullopt;
  }
  for (const HttpHeader& header : extraHeaders) {
    if (header.name.empty() || !safeForHead(header.name) || !safeForHead(header.value) ||
        header.name.find_first_of(": \t") != std::string_view::npos) {
      return std::nullopt;
    }
  }
  ClientHandshake handshake;
  handshake.key = base64(nonce);
  std::string& r = handshake.request;
  r.append("GET ").append(target).append(" HTTP/1.1\r\n");
  r.append("Host: ").append(host).append("\r\n");
  r.append("Upgrade: websocket\r\nConnection: Upgrade\r\n");
  r.append("Sec-WebSocket-Key: ").append(handshake.key).append("\r\n");
  r.append("Sec-WebSocket-Version: ").append(kSupportedVersion).append("\r\n");
  for (const HttpHeader& header : extraHeaders) {
    r.append(header.name).append(": ").append(header.value).append("\r\n");
  }
  r.append("\r\n");
  return handshake;
}

ResponseError checkUpgradeResponse(int status, HeaderList headers, std::string_view key) {
  if (status != 101) return ResponseError::kNotSwitchingProtocols;
  const SingleValue upgrade = findSingle(headers, "Upgrade");
  if (upgrade.count != 1 || !equalsIgnoreCase(upgrade.value, "websocket")) {
    return ResponseError::kNotWebSocket;
  }
  if (!hasToken(headers, "Connection", "upgrade")) return ResponseError::kConnectionNotUpgrade;
  const SingleValue accept = findSingle(headers, "Sec-WebSocket-Accept");
  const std::string expected = acceptKey(key);
  if (accept.count != 1 || expected.empty() || accept.value != expected) {
    return ResponseError::kAcceptMismatch;
  }
  if (findSingle(headers, "Sec-WebSocket-Extensions").count != 0) {
    return ResponseError::kUnexpectedExtension;
  }
  if (findSingle(headers, "Sec-WebSocket-Protocol").count != 0) {
    return ResponseError::kUnexpectedProtocol;
  }
  return ResponseError::kNone;
}

std::string_view responseErrorName(ResponseError error) {
  switch (error) {
    case ResponseError::kNone:
      return "none";
    case ResponseError::kNotSwitchingProtocols:
      return "not_switching_protocols";
    case ResponseError::kNotWebSocket:
      return "not_websocket";
    case ResponseError::kConnectionNotUpgrade:
      return "connection_not_upgrade";
    case ResponseError::kAcceptMismatch:
      return "accept_mismatch";
    case ResponseError::kUnexpectedExtension:
      return "unexpected_extension";
    case ResponseError::kUnexpectedProtocol:
      return "unexpected_protocol";
  }
  return "unknown";
}

}  // namespace ot::ws
